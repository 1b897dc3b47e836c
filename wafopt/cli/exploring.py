"""`wafopt explore`."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import wafopt.api as api
from wafopt.api import EXIT_OK
from wafopt.cli.common import Command, stderr
from wafopt.present.draw import check_picture_path
from wafopt.present.progress import LevelProgress, explore_progress


class Explore(Command):
    name = "explore"
    help = "design-space exploration: which wafer to build, with pruning that keeps the optimum"

    def add_arguments(self, p):
        p.add_argument("space", metavar="SPACE")
        p.add_argument("--exhaustive", action="store_true", help="simulate every design that survives enumeration")
        p.add_argument("--store", metavar="PATH", help="SQLite store of evaluations (resume, and no repeated work)")
        p.add_argument("--workers", type=int, default=None, metavar="N",
                       help="Dask local cluster workers (default: one per core; 0 runs in this process)")
        p.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler to run on")
        p.add_argument("--budget", type=float, default=20.0, metavar="S", help="planner seconds per F2 evaluation")
        p.add_argument("--time-limit", type=float, default=None, metavar="S", help="seconds for the whole exploration")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--epsilon", type=float, default=None, help="model error to prune with (default: calibrated)")
        p.add_argument("--plot", metavar="DIR", help="write funnel.png, pareto.png and s-curve.png here")
        p.add_argument("--json", action="store_true")
        p.add_argument("--quiet", action="store_true")

    def run(self, args):
        if args.plot:
            check_picture_path(str(Path(args.plot) / "funnel.png"))
        with contextlib.nullcontext() if args.quiet else LevelProgress() as bars:
            done = api.explore(args.space, exhaustive=args.exhaustive, store=args.store, workers=args.workers,
                               scheduler=args.scheduler, budget=args.budget, time_limit=args.time_limit,
                               seed=args.seed, epsilon=args.epsilon,
                               progress=None if bars is None else explore_progress(bars))
        if args.plot:
            for path in done.plot(args.plot):
                stderr(f"wrote {path}")
        print(json.dumps(done.result, indent=1) if args.json else done.text())
        return EXIT_OK
