"""What is asked of a scenario (`problem: plan`) beyond solving it: its workload table, the planner's
ablation, the TATP report, the simulation of a plan and the calibration of the analytic model."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from wafopt.api.solving import Instance, load, options
from wafopt.core.errors import InstanceError
from wafopt.core.files import write_text
from wafopt.costmodel.report import workload_report
from wafopt.costmodel.rules import sequence_parallel_violation
from wafopt.costmodel.training import parse_training
from wafopt.hardware.cluster import require_mesh
from wafopt.planner.ablation import Row
from wafopt.planner.ablation import ablation as planner_ablation
from wafopt.present.simulation import plot_simulation
from wafopt.present.trace import write_trace
from wafopt.run.fidelity import (
    FidelityRow,
    LayerRow,
    layer_fidelity,
    layer_summary,
    summary,
)
from wafopt.run.fidelity import fidelity as fidelity_rows
from wafopt.run.methods import methods
from wafopt.run.tatp_report import report as tatp_table
from wafopt.simulate.calibrate import calibrate as calibrate_model
from wafopt.simulate.calibrate import render_markdown, write_calibration
from wafopt.simulate.engine import Simulation
from wafopt.simulate.report import simulate_solution


def scenario(path: str | Path) -> Instance:
    """A scenario file (problem: plan); any other problem is an InstanceError."""
    loaded = load(path)
    if loaded.problem != "plan":
        raise InstanceError(f"needs a scenario (problem: plan), got problem: {loaded.problem}", str(path))
    return loaded


def workload(path: str | Path, tp: int | None = None, pp: int | None = None, dp: int | None = None,
             micro_batch: int | None = None, sequence_parallel: bool = False, recompute: str | None = None,
             tp_scheme: str | None = None) -> dict:
    """The per-operator cost table of a scenario's layout (by default its `parallel:`, with its
    tp_scheme and interleave, else Megatron's; degrees left out are 1): per operator, per layer and
    per stage.
    Sequence parallelism and recomputation as the scenario's `training` sets them unless given."""
    sc = scenario(path).instance
    recompute = recompute or sc.training.recompute_policy or "none"
    training = sc.training
    if micro_batch is not None or sequence_parallel:
        b = micro_batch if micro_batch is not None else training.micro_batch
        if b <= 0:
            raise InstanceError(f"must be a positive integer, got {b}", "--micro-batch")
        training = replace(training, micro_batch=b, sequence_parallel=training.sequence_parallel
                           or sequence_parallel)
        parse_training({"seq": training.seq, "micro_batch": b, "global_batch": training.global_batch},
                       "--micro-batch")   # the same batch checks as a scenario file
    given = sc.parallel
    asked = {"tp": tp, "pp": pp, "dp": dp}
    layout = {k: asked[k] if asked[k] is not None else (getattr(given, k) if given else 1) for k in ("tp", "pp", "dp")}
    for k, v in layout.items():
        if v <= 0:
            raise InstanceError(f"must be a positive integer, got {v}", f"--{k}")
    # the scenario's virtual stages, unless --pp changes the pipeline they split
    interleave = given.interleave if given and given.interleave and layout["pp"] == given.pp else 1
    why = sequence_parallel_violation(training.seq, layout["tp"]) if training.sequence_parallel else None
    if why:   # the layout rules the evaluator applies (a micro-batch size outside the list is a what-if)
        raise InstanceError(why, "--sequence-parallel" if sequence_parallel else "--tp")
    scheme = tp_scheme or sc.fixed.tp_scheme or "megatron"
    return workload_report(sc.llm, training, sc.wafer, layout["tp"], layout["pp"], layout["dp"],
                           recompute, scheme, interleave)


@dataclass
class AblationRun:
    """What each part of the planner adds over MG-wafer on one scenario."""

    name: str
    rows: list[Row]
    interrupted: bool


def ablation(path: str | Path, time_limit: float | None = 300.0, seed: int = 0, quiet: bool = True) -> AblationRun:
    """The planner's steps one by one (WATOS Fig. 18), each with a share of the time limit."""
    loaded = scenario(path)
    require_mesh(loaded.instance.wafer, "ablation", str(path))
    opts = options(time_limit, seed, None, quiet).start()
    rows = planner_ablation(loaded.instance, opts)
    return AblationRun(loaded.name, rows, opts.interrupted)


def tatp_report(path: str | Path, combos: str = "snake+xy,tiles+xy,tiles+tcme", time_limit: float = 10.0,
                detour: int = 0) -> dict:
    """TATP mapping + routing on a scenario, one row per `mapping+routing` pair of `combos`
    (comma-separated): physical rings, tail hops, peak link load, layer time."""
    loaded = scenario(path)
    require_mesh(loaded.instance.wafer, "tatp-report", str(path))
    if detour < 0:
        raise InstanceError(f"must be >= 0, got {detour}", "--detour")
    pairs = []
    for item in combos.split(","):
        mapping, _, routing = item.strip().partition("+")
        if not routing:
            raise InstanceError(f"expected mapping+routing, got {item!r}", "--combos")
        for problem, method in (("tatp", mapping), ("routing", routing)):
            known = methods(problem)
            if method not in known:
                raise InstanceError(f"unknown {problem} method {method!r} (available: {', '.join(known)})",
                                    "--combos")
        pairs.append((mapping, routing))
    return tatp_table(loaded.instance, pairs, time_limit, detour)


@dataclass
class SimulationRun:
    """The simulated iteration of a plan solution beside the analytic model's iteration time."""

    simulation: Simulation
    analytic_iteration_s: float

    def to_dict(self) -> dict:
        return {**self.simulation.to_dict(), "analytic_iteration_s": self.analytic_iteration_s}


def simulate(solution: str, instance: str | None = None, contention: bool = True,
             plot: str | None = None, trace: str | None = None) -> SimulationRun:
    """Discrete-event simulation of one training iteration of a plan solution (1F1B, link sharing,
    DRAM); `plot` writes a Gantt chart and a memory timeline there, `trace` the timeline in the
    Chrome trace event format (Perfetto). A plan that overflows a die's DRAM raises MemoryOverflow."""
    sim, evaluation = simulate_solution(solution, instance, contention, timeline=bool(plot or trace))
    if plot:
        plot_simulation(sim, plot)
    if trace:
        write_trace(sim, trace)
    return SimulationRun(sim, evaluation.objective)


@dataclass
class Calibration:
    """The error of the analytic plan model against the simulator, and the files written."""

    result: dict
    table: Path             # the error table (markdown)
    calibration: Path       # the epsilon the exploration prunes with


SHIPPED_CALIBRATION_TABLE = "docs/calibration.md"


def calibrate(plans: int = 50, seed: int = 0, out: str | None = None,
              progress: Callable | None = None) -> Calibration:
    """The analytic model against the simulator on the shipped and `plans` random feasible plans;
    `progress(row)` after each plan. The table goes to `out` and its epsilon beside it as JSON;
    without `out` they are the shipped pair, docs/calibration.md and the epsilon `explore` prunes
    with (wafopt/data/calibration.json)."""
    if not 0 <= plans <= 10_000:
        raise InstanceError(f"must be in 0..10000, got {plans}", "--plans")
    if not 0 <= seed < 2 ** 32:
        raise InstanceError(f"must be in 0..2^32-1, got {seed}", "--seed")
    result = calibrate_model(plans, seed, progress)
    command = f"wafopt calibrate --plans {plans} --seed {seed}"
    table = write_text(out or SHIPPED_CALIBRATION_TABLE, render_markdown(result, command))
    return Calibration(result, table, write_calibration(result) if out is None
                       else write_calibration(result, Path(out).with_suffix(".json")))


@dataclass
class FidelityRun:
    rows: list[FidelityRow]
    summary: dict
    layers: list[LayerRow]     # single layers' forward and backward passes
    layer_summary: dict


def fidelity(progress: Callable | None = None) -> FidelityRun:
    """The cost model's prediction of every shipped measured training run (wafopt/data/measured)
    against its measured iteration time, and of every measured layer's forward and backward
    pass; `progress(row)` after each run."""
    rows = fidelity_rows(progress)
    layers = layer_fidelity()
    return FidelityRun(rows, summary(rows), layers, layer_summary(layers))
