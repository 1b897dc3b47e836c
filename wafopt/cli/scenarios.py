"""`wafopt ablation`, `tatp-report`, `workload`, `simulate`, `calibrate` and `fidelity`: scenario reports."""

from __future__ import annotations

import json

import wafopt.api as api
from wafopt.api import EXIT_INFEASIBLE, EXIT_INTERRUPTED, EXIT_OK
from wafopt.cli.common import Command, stderr
from wafopt.present.reports import simulation_text, tatp_text, workload_text
from wafopt.present.tables import (
    ablation_table,
    calibration_line,
    calibration_summary,
    fidelity_table,
    layer_fidelity_table,
)


class Ablation(Command):
    name = "ablation"
    help = "what each part of the planner adds over MG-wafer (WATOS Fig. 18): throughput ratios"

    def add_arguments(self, p):
        p.add_argument("scenarios", nargs="+", metavar="SCENARIO")
        p.add_argument("--time-limit", type=float, default=300.0, metavar="S", help="seconds per scenario (default 300)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--quiet", action="store_true")
        p.add_argument("--markdown", action="store_true", help="the table as Markdown (for docs/)")

    def run(self, args):
        code = EXIT_OK
        for path in args.scenarios:
            done = api.ablation(path, args.time_limit, args.seed, args.quiet)
            print(ablation_table(done.name, done.rows, args.markdown))
            if done.interrupted:
                code = EXIT_INTERRUPTED
                break
        return code


class TatpReport(Command):
    name = "tatp-report"
    help = "TATP mapping + routing on a scenario: physical rings, tail hops, peak link load, layer time"

    def add_arguments(self, p):
        p.add_argument("scenario", metavar="SCENARIO", help="problem: plan with parallel {tp: N, pp, dp}")
        p.add_argument("--combos", default="snake+xy,tiles+xy,tiles+tcme",
                       help="mapping+routing pairs, comma-separated (mapping: snake, tiles, cpsat, milp, ga; "
                            "routing: xy, tcme, milp, cpsat)")
        p.add_argument("--time-limit", type=float, default=10.0, metavar="S", help="seconds per method")
        p.add_argument("--detour", type=int, default=0, help="paths up to this many hops longer than shortest")
        p.add_argument("--json", action="store_true")

    def run(self, args):
        rep = api.tatp_report(args.scenario, args.combos, args.time_limit, args.detour)
        print(json.dumps(rep, indent=1, default=str) if args.json else tatp_text(rep))
        return EXIT_OK


class WorkloadTable(Command):
    name = "workload"
    help = "the per-operator cost table of a scenario's layout: per operator, per layer and per stage"

    def add_arguments(self, p):
        p.add_argument("scenario", metavar="SCENARIO", help="problem: plan (its parallel: is the default layout)")
        for flag in ("tp", "pp", "dp"):
            p.add_argument(f"--{flag}", type=int, metavar=flag[0].upper(), help=f"{flag} degree")
        p.add_argument("--micro-batch", type=int, metavar="B", help="sequences per micro-batch")
        p.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallelism")
        p.add_argument("--recompute", choices=("none", "selective", "full"), default=None,
                       help="default: the scenario's training.recompute, else none")
        p.add_argument("--tp-scheme", choices=("megatron", "tatp"), default=None,
                       help="default: the scenario's parallel.tp_scheme, else megatron")
        p.add_argument("--json", action="store_true")

    def run(self, args):
        rep = api.workload(args.scenario, args.tp, args.pp, args.dp, args.micro_batch, args.sequence_parallel,
                           args.recompute, args.tp_scheme)
        print(json.dumps(rep, indent=1) if args.json else workload_text(rep))
        return EXIT_OK


class Simulate(Command):
    name = "simulate"
    help = "discrete-event simulation of one training iteration of a plan solution (1F1B, link sharing, DRAM)"

    def add_arguments(self, p):
        p.add_argument("solution", metavar="SOLUTION.json", help="a solution of a plan scenario")
        p.add_argument("--instance", metavar="SCENARIO.yaml", help="the scenario (default: the one the solution names)")
        p.add_argument("--no-contention", action="store_true",
                       help="every communication takes its analytic duration (the analytic longest path)")
        p.add_argument("--json", action="store_true")
        p.add_argument("--plot", metavar="PNG", help="write a Gantt chart and a memory timeline")
        p.add_argument("--trace", metavar="FILE.json",
                       help="write the timeline in the Chrome trace event format (open it in ui.perfetto.dev)")

    def run(self, args):
        try:
            done = api.simulate(args.solution, args.instance, not args.no_contention, args.plot, args.trace)
        except api.MemoryOverflow as exc:
            stderr(f"wafopt: error: DRAM overflow: {exc}")
            return EXIT_INFEASIBLE
        for path in (args.plot, args.trace):
            if path:
                stderr(f"wrote {path}")
        if args.json:
            print(json.dumps(done.to_dict(), indent=1))
        else:
            print(simulation_text(done.simulation, done.analytic_iteration_s))
        return EXIT_OK


class Calibrate(Command):
    name = "calibrate"
    help = "analytic plan model against the simulator on shipped and random plans: the error table and epsilon"

    def add_arguments(self, p):
        p.add_argument("--plans", type=int, default=50, metavar="N", help="random feasible plans (default 50)")
        p.add_argument("--seed", type=int, default=0, help="seed of the random plans (default 0)")
        p.add_argument("--out", default=None, metavar="MD",
                       help="the error table (markdown), its epsilon beside it as .json (default: "
                            "docs/calibration.md and the epsilon explore prunes with, wafopt/data/calibration.json)")
        p.add_argument("--quiet", action="store_true")

    def run(self, args):
        def progress(row):
            if not args.quiet:
                stderr(calibration_line(row))

        done = api.calibrate(args.plans, args.seed, args.out, progress)
        stderr(f"wrote {done.table} and {done.calibration}")
        print(calibration_summary(done.result))
        return EXIT_OK


class Fidelity(Command):
    name = "fidelity"
    help = "the cost model against measured training runs (published iteration times): predicted vs measured"

    def add_arguments(self, p):
        p.add_argument("--json", action="store_true", help="rows and summary as JSON")
        p.add_argument("--markdown", action="store_true", help="the table as markdown (docs/fidelity.md)")
        p.add_argument("--quiet", action="store_true")

    def run(self, args):
        def progress(row):
            if not args.quiet and not args.json:
                stderr(f"{row.run.name}: predicted {row.predicted_s if row.predicted_s is None else round(row.predicted_s, 3)} s, "
                       f"measured {row.run.measured_s} s")

        done = api.fidelity(progress)
        if args.json:
            print(json.dumps({"runs": [{"name": r.run.name, "source": r.run.source, "measured_s": r.run.measured_s,
                                        "predicted_s": r.predicted_s, "error": r.error, "message": r.message,
                                        "scenario": r.run.scenario} for r in done.rows],
                              "summary": done.summary,
                              "layers": [{"name": r.layer.name, "source": r.layer.source,
                                          "measured_forward_s": r.layer.forward_s, "predicted_forward_s": r.forward_s,
                                          "measured_backward_s": r.layer.backward_s,
                                          "predicted_backward_s": r.backward_s, "errors": list(r.errors),
                                          "scenario": r.layer.scenario} for r in done.layers],
                              "layer_summary": done.layer_summary}, indent=1))
        else:
            print(fidelity_table(done.rows, done.summary, markdown=args.markdown))
            print()
            print(layer_fidelity_table(done.layers, done.layer_summary, markdown=args.markdown))
        return EXIT_OK
