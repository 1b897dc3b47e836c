"""Benchmark (not a test): full evaluations per CPU second of the placement `Fitness`.

    python tests/bench_fitness.py [INSTANCE] [--rounds N]

Side by side in one process, alternating round by round: the first implementation (one float64
gather `D[P[:, i], P[:, j]]` of the whole population) against today's `Fitness`, at the GA's
population (60) and at larger ones. Prints the median rate of each and the median of the per-round
ratios; ratios hold when a shared machine's speed drifts, absolute rates do not.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from wafopt.problems import load
from wafopt.problems.placement.fitness import Fitness
from wafopt.problems.placement.instance import layout

ROOT = Path(__file__).resolve().parents[1]


def rate(score, P: np.ndarray, reps: int) -> float:
    started = time.process_time()
    for _ in range(reps):
        score(P)
    return reps * len(P) / (time.process_time() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instance", nargs="?", default=str(ROOT / "instances/placement/qaplib/nug30.yaml"))
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    inst = load(args.instance).instance
    fitness = Fitness(inst, layout(inst.mesh, inst.tiles[0]))

    def first(P):
        return fitness.D[P[:, fitness.edge_i], P[:, fitness.edge_j]] @ fitness.edge_w + fitness.penalty(P)

    rng = np.random.default_rng(0)
    print(f"{Path(args.instance).stem}: {fitness.n} stages, {len(fitness.edge_w)} flow pairs; "
          f"median of {args.rounds} rounds, assignments per CPU second")
    print("| population | first | now | ratio |\n|---|---|---|---|")
    for pop in (60, 512, 10_000):
        P = np.array([rng.permutation(fitness.m) for _ in range(pop)])
        assert np.allclose(first(P), fitness(P))
        reps = max(1, 60_000 // pop)
        old, new = [], []
        for _ in range(args.rounds):
            old.append(rate(first, P, reps))
            new.append(rate(fitness, P, reps))
        ratio = statistics.median(b / a for a, b in zip(old, new))
        print(f"| {pop:,} | {statistics.median(old) / 1e6:.2f} M | {statistics.median(new) / 1e6:.2f} M | "
              f"x{ratio:.2f} |")


if __name__ == "__main__":
    main()
