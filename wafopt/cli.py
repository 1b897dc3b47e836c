"""The `wafopt` command line: one small class per subcommand.

Exit codes: 0 ok, 1 internal error, 2 invalid input, 3 infeasible, 4 not certified, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import io
import json
import math
import os
import signal
import sys
import threading
from pathlib import Path

from wafopt import __version__
from wafopt.core.errors import (
    EXIT_INFEASIBLE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_NO_PLAN,
    EXIT_OK,
    InstanceError,
)


def _fmt(value, digits: int = 6) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.3g}%"


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _options(args):
    from wafopt.api import options

    workers = getattr(args, "workers", 1)
    return options(args.time_limit, args.seed, None, args.quiet, getattr(args, "verbose", False),
                   workers=(os.cpu_count() or 1) if workers is None else workers,
                   solver=getattr(args, "solver", None) or "highs",
                   elite_share=getattr(args, "elite_share", 0.5), scheduler=getattr(args, "scheduler", None))


def _add_solve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problem", help="solve this sub-problem derived from a scenario instance "
                   "(placement, recompute, mem_pair, tatp, routing)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds per method (default: none for exact methods, 10 s for the GA and local search)")
    p.add_argument("--seed", type=int, default=0, help="seed of every randomized method (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    p.add_argument("--verbose", action="store_true", help="solver logs on stderr")
    p.add_argument("--solver", default="highs", metavar="NAME",
                   help="MILP solver of the pyomo models: highs (default) or any solver pyomo's SolverFactory "
                        "finds installed (gurobi, cplex, scip, cbc, ...)")


def _methods_help() -> str:
    """'problem: method, method; ...' from the problem registry."""
    from wafopt.core.registry import PROBLEMS
    from wafopt.run.methods import methods

    return "; ".join(f"{p}: {', '.join(methods(p))}" for p in PROBLEMS)


def _load(path: str, problem: str | None = None):
    from wafopt.api import load

    return load(path, problem)


@contextlib.contextmanager
def _ctrl_c_noted(options):
    """While a run goes on, the runner turns Ctrl-C into a stop. Around it (before it installs its
    handler; after it returned, e.g. the second of two quick Ctrl-Cs) Ctrl-C stops the run too but
    never loses its plan: it is noted (the list yielded) until the solution is written."""
    noted: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def note(*_):
        noted.append(True)
        options.interrupted = True

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_and_save(loaded, method: str, options, write: bool = True, out: str | None = None):
    """Run a method with its progress on stderr, then write its solution (`write`), Ctrl-C noted
    until it is written. Returns (result, path written, note of save, interrupted)."""
    from wafopt.api import Result, save
    from wafopt.present.progress import console_progress
    from wafopt.run.runner import run

    path, note = None, None
    with _ctrl_c_noted(options) as late_ctrl_c:
        with console_progress(options):
            result = Result.of(run(loaded, method, options))
        if write:
            path, note = save(result, loaded, out)
    return result, path, note, bool(late_ctrl_c) or result.interrupted


def _exit_code(result) -> int:
    """0 a plan (optimal or feasible); 3 no plan exists or none was found; 130 interrupted."""
    if result.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if result.status in ("optimal", "feasible") else EXIT_NO_PLAN


class Command:
    name = ""
    help = ""

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        pass

    def run(self, args) -> int:
        raise NotImplementedError


class Validate(Command):
    name = "validate"
    help = "check instance files and report the first problem in each"

    def add_arguments(self, p):
        p.add_argument("instances", nargs="+", metavar="INSTANCE")

    def run(self, args):
        from wafopt.problems import load

        code = EXIT_OK
        for path in args.instances:
            try:
                loaded = load(path)
                print(f"ok       {path}  (problem: {loaded.problem}, name: {loaded.name})")
            except InstanceError as exc:
                print(f"invalid  {exc}")
                code = EXIT_INVALID
        return code


class Solve(Command):
    name = "solve"
    help = "solve an instance with one method and write the solution JSON"

    def add_arguments(self, p):
        p.add_argument("instance", metavar="INSTANCE")
        p.add_argument("--method", help=_methods_help() + " (default for a scenario: plan, the joint planner)")
        _add_solve_options(p)
        p.add_argument("--workers", type=int, default=None, metavar="N",
                       help="plan: compose layouts on N local processes (default: the number of cores)")
        p.add_argument("--scheduler", metavar="ADDRESS", help="plan: compose layouts on this Dask cluster")
        p.add_argument("--plot", metavar="PNG", help="draw the solution (as `wafopt show --plot`); "
                       "plan: the convergence of plan and bound")
        p.add_argument("--elite-share", type=float, default=0.5, metavar="OMEGA",
                       help="plan: the share of each GA generation kept as elites (WATOS omega, 0 to 1; default 0.5)")
        p.add_argument("--warm-start", metavar="SOLUTION", help="start exact methods from this plan")
        p.add_argument("--out", metavar="FILE|DIR", help="a file, or a directory to write into "
                       "(default: solutions/<instance-stem>.<method>.json; a better solution there is kept)")
        p.add_argument("--json", action="store_true", help="print the solution JSON on stdout")

    def run(self, args):
        from wafopt.api import check_warm_start
        from wafopt.core.registry import load_libraries
        from wafopt.core.solution import read_solution
        from wafopt.run.methods import method_function

        loaded = _load(args.instance, args.problem)
        if args.method is None:
            if loaded.problem != "plan":
                raise InstanceError(f"is required for problem {loaded.problem}", "--method")
            args.method = "plan"   # a scenario: the joint planner searches what `parallel:` leaves open
        # an unknown method fails before any work; its solver libraries load before "solving"
        load_libraries(method_function(loaded.problem, args.method))
        options = _options(args)
        if args.warm_start:
            start = read_solution(args.warm_start)
            if start.problem != loaded.problem:
                raise InstanceError(f"is a {start.problem} solution, this instance is {loaded.problem}",
                                    args.warm_start)
            check_warm_start(loaded, start.plan, args.warm_start)
            options.warm_start = start.plan
        if not options.quiet:
            _stderr(f"solving {args.instance} ({loaded.problem}) with {args.method}"
                    + (f", time limit {args.time_limit:g} s" if args.time_limit else ""))
        result, out, note, interrupted = _run_and_save(loaded, args.method, options, out=args.out)
        if args.json:
            print(json.dumps(result.solution.to_dict(), indent=1))
        else:
            bound = result.bound
            print(f"{result.status.value:10s} objective {_fmt(result.objective)}  bound {_fmt(bound and bound.value)}"
                  + (f" ({bound.provenance}: {bound.kind})" if bound else "")
                  + f"  gap {_pct(result.gap)}  {result.time_s:.2f} s  [{result.solution.solver}]")
            if result.message:
                print(f"note: {result.message}")
            if result.solution.stats.get("candidates"):
                from wafopt.present.planner import candidates_text

                print(candidates_text(result.solution.stats))
            print(f"wrote {out}")
        if args.plot:
            if loaded.problem == "plan" and result.solution.stats.get("convergence"):
                from wafopt.present.planner import convergence_png

                convergence_png(result.solution.stats, args.plot, f"{loaded.name}: {args.method}")
            else:
                from wafopt.present.pictures import save_picture

                save_picture(loaded.problem, loaded.instance, result.plan, result.solution.stats, args.plot)
            _stderr(f"wrote {args.plot}")
        if note:
            _stderr(f"wafopt: note: {note}")
        return EXIT_INTERRUPTED if interrupted else _exit_code(result)


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
        from wafopt.planner.ablation import ablation

        code = EXIT_OK
        for path in args.scenarios:
            loaded = _load(path)
            if loaded.problem != "plan":
                raise InstanceError(f"needs a scenario (problem: plan), got problem: {loaded.problem}", path)
            options = _options(args).start()
            rows = ablation(loaded.instance, options)
            heads = ["step", "layout", "iteration (s)", "throughput x MG-wafer", "bound (s)"]
            cells = [[r.step, r.layout, _fmt(r.objective), "-" if r.ratio is None else f"{r.ratio:.3f}",
                      _fmt(r.bound)] for r in rows]
            if args.markdown:
                print(f"\n**{loaded.name}**\n\n| " + " | ".join(heads) + " |\n|" + "---|" * len(heads))
                for c in cells:
                    print("| " + " | ".join(c) + " |")
            else:
                widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
                print(f"\n{loaded.name}")
                print("  ".join(h.ljust(w) for h, w in zip(heads, widths)))
                for c in cells:
                    print("  ".join(v.ljust(w) for v, w in zip(c, widths)))
            if options.interrupted:
                code = EXIT_INTERRUPTED
                break
        return code


class Compare(Command):
    name = "compare"
    help = "run several methods on each instance and tabulate objective, bound, gap and time"

    def add_arguments(self, p):
        p.add_argument("instances", nargs="+", metavar="INSTANCE")
        p.add_argument("--methods", help="comma-separated (default: the problem's default set)")
        _add_solve_options(p)
        p.add_argument("--save", action="store_true", help="also write each solution to solutions/")
        fmt = p.add_mutually_exclusive_group()
        fmt.add_argument("--json", action="store_true", help="rows as JSON")
        fmt.add_argument("--csv", action="store_true", help="rows as CSV")
        fmt.add_argument("--markdown", action="store_true", help="tables as Markdown (for docs/)")
        p.add_argument("--details", default="", metavar="KEYS",
                       help="extra columns from the evaluator's details, comma-separated "
                            "(e.g. recompute_share,peak_fraction for plans)")

    def run(self, args):
        from wafopt.api import applicable, default_methods
        from wafopt.core.numeric import relative_gap
        from wafopt.core.registry import PROBLEMS
        from wafopt.run.methods import methods as methods_of

        extra = [k.strip() for k in args.details.split(",") if k.strip()]
        asked = None if args.methods is None else [m.strip() for m in args.methods.split(",") if m.strip()]
        if asked is not None and not asked:
            raise InstanceError("names no method", "--methods")
        known_anywhere = {m for p in PROBLEMS for m in methods_of(p)}
        for method in asked or []:
            if method not in known_anywhere:
                raise InstanceError(f"unknown method {method!r} (known: {', '.join(sorted(known_anywhere))})",
                                    "--methods")
        # load every instance before solving anything; a method that does not apply is skipped
        jobs = []
        for path in args.instances:
            loaded = _load(path, args.problem)
            chosen = asked if asked is not None else default_methods(loaded)
            jobs.append((loaded, [m for m in chosen if applicable(loaded, m)],
                         [m for m in chosen if not applicable(loaded, m)]))
        if asked is not None and not any(run_ for _, run_, _ in jobs):
            raise InstanceError(f"none of {', '.join(asked)} applies to these instances", "--methods")
        rows = []
        code = EXIT_OK
        for loaded, methods, skipped in jobs:
            block = []
            for k, method in enumerate(methods):
                if not args.quiet:
                    _stderr(f"[{loaded.name}] {method} ({k + 1}/{len(methods)}) ...")
                result, _, note, interrupted = _run_and_save(loaded, method, _options(args), write=args.save)
                if note:
                    _stderr(f"wafopt: note: {note}")
                block.append(result.solution)
                if interrupted:
                    code = EXIT_INTERRUPTED
                    break
            best_bound = max((s.bound for s in block if s.bound is not None), default=None)
            best_obj = min((s.objective for s in block if s.objective is not None), default=None)
            if best_bound is not None and best_obj is not None:
                best_bound = min(best_bound, best_obj)  # a bound above a feasible plan is a bug; never hide it
            known = loaded.known_optimum
            block_rows = [{
                "instance": loaded.name, "method": s.method, "status": s.status,
                "objective": s.objective, "bound": s.bound, "bound_provenance": s.bound_provenance,
                "gap": s.gap, "gap_best_bound": relative_gap(s.objective, best_bound),
                "known_optimum": known.value if known else None,
                "gap_known": (None if known is None or s.objective is None
                              else (s.objective - known.value) / abs(known.value or 1.0)),
                "time_s": s.time_s, "solver": s.solver, "message": s.message,
                **{k: (s.evaluation.get("details") or {}).get(k) for k in extra}} for s in block]
            block_rows += [{"instance": loaded.name, "method": m, "status": "skipped", "objective": None,
                            "bound": None, "bound_provenance": "none", "gap": None, "gap_best_bound": None,
                            "known_optimum": known.value if known else None, "gap_known": None, "time_s": None,
                            "solver": "", "message": f"does not apply to problem {loaded.problem}",
                            **{k: None for k in extra}} for m in skipped]
            rows += block_rows
            if not (args.json or args.csv):  # each table as soon as its instance is done
                self.print_tables(block_rows, extra, getattr(loaded.module, "OBJECTIVE", ""), args.markdown)
            if code == EXIT_INTERRUPTED:
                break
        missing = [k for k in extra if all(r[k] is None for r in rows)]
        if missing:
            _stderr(f"wafopt: note: no evaluation has details {', '.join(missing)}")
        if args.json:
            print(json.dumps(rows, indent=1))
        elif args.csv:
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["instance"])
            writer.writeheader()
            writer.writerows(rows)
            print(buf.getvalue(), end="")
        return code

    @staticmethod
    def print_tables(rows, extra=(), objective: str = "", markdown: bool = False):
        columns = ["method", "status", "objective", "bound", "bound_provenance", "gap", "gap_best_bound", "time_s",
                   *extra]
        if any(r["known_optimum"] is not None for r in rows):
            columns.append("gap_known")
        heads = {"bound_provenance": "bound from", "gap_best_bound": "gap to best bound", "time_s": "time (s)", "gap_known": "gap to known opt."}
        for name in dict.fromkeys(r["instance"] for r in rows):
            block = [r for r in rows if r["instance"] == name]
            known = block[0]["known_optimum"]
            title = f"{name}" + (f" — objective: {objective}" if objective else "") + \
                (f" (known optimum {_fmt(known)})" if known is not None else "")
            cells = [[_pct(r[c]) if c.startswith("gap") else
                      (f"{r[c]:.2f}" if c == "time_s" and r[c] is not None else _fmt(r[c])) for c in columns]
                     for r in block]
            headers = [heads.get(c, c) for c in columns]
            if markdown:
                print(f"\n**{title}**\n")
                print("| " + " | ".join(headers) + " |")
                print("|" + "---|" * len(headers))
                for row in cells:
                    print("| " + " | ".join(row) + " |")
            else:
                widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
                print(f"\n{title}")
                print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
                print("  ".join("-" * w for w in widths))
                for row in cells:
                    print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
            for r in block:  # what each method says of its result explains most gaps
                if r["message"]:
                    note = r["message"] if len(r["message"]) <= 200 else r["message"][:197] + "..."
                    print(f"{'- ' if markdown else '  '}{r['method']}: {note}")
            sys.stdout.flush()


class Certify(Command):
    name = "certify"
    help = ("re-check a solution without trusting it: feasibility, objective, certified bound and gap, "
            "the solver's claim (exit 0 certified, 4 claimed, 5 invalid)")

    def add_arguments(self, p):
        p.add_argument("solution", metavar="SOLUTION")
        p.add_argument("--instance", metavar="INSTANCE", help="default: the path stored in the solution")
        p.add_argument("--resolve", action="store_true",
                       help="confirm a solver's claim by re-solving with an exact method (cpsat or milp)")
        p.add_argument("--time-limit", type=float, metavar="S",
                       help="seconds for --resolve (default: 60)")

    def run(self, args):
        from wafopt.run.certify import certify

        if args.time_limit is not None and not (math.isfinite(args.time_limit) and args.time_limit > 0):
            raise InstanceError(f"must be a positive number of seconds, got {args.time_limit}", "--time-limit")
        if args.time_limit is not None and not args.resolve:
            raise InstanceError("only applies with --resolve", "--time-limit")
        report = certify(args.solution, args.instance, resolve=args.resolve, time_limit=args.time_limit)
        for line in report.lines:
            print(line)
        return report.exit_code


class Evaluate(Command):
    name = "evaluate"
    help = "the evaluator's verdict on a hand-written plan (YAML/JSON, or a solution file)"

    def add_arguments(self, p):
        p.add_argument("instance", metavar="INSTANCE")
        p.add_argument("plan", metavar="PLAN")
        p.add_argument("--problem", help="evaluate as this sub-problem of a scenario")
        p.add_argument("--json", action="store_true")

    def run(self, args):
        from wafopt.core.files import read_mapping
        from wafopt.problems import evaluate

        loaded = _load(args.instance, args.problem)
        data, _ = read_mapping(args.plan)
        if "plan" in data and data.get("problem") not in (None, loaded.problem):
            raise InstanceError(f"is a solution of a {data['problem']} instance, this instance is "
                                f"{loaded.problem}", args.plan)
        plan = data["plan"] if isinstance(data.get("plan"), dict) else data
        ev = evaluate(loaded.problem, loaded.instance, plan)
        if args.json:
            print(json.dumps(ev.to_dict(), indent=1))
        else:
            print(f"feasible: {'yes' if ev.feasible else 'no'}")
            print(f"objective: {_fmt(ev.objective)}")
            for v in ev.violations:
                print(f"violation: {v}")
        return EXIT_OK if ev.feasible else EXIT_INFEASIBLE


class Show(Command):
    name = "show"
    help = "a readable summary of an instance or a solution; --plot (or --png) draws it"

    def add_arguments(self, p):
        p.add_argument("target", metavar="INSTANCE|SOLUTION")
        p.add_argument("--problem", help="show this sub-problem of a scenario")
        p.add_argument("--json", action="store_true")
        p.add_argument("--plot", "--png", dest="png", metavar="PNG", help="draw the instance, or the solution's plan "
                       "(mesh and link loads, recompute memory bars, GA convergence)")

    def run(self, args):
        from wafopt.present.show import show

        info = show(args.target, args.problem, args.png)
        if args.json:
            print(json.dumps(info, indent=1))
        else:
            from wafopt.present.show import render_text
            print(render_text(info))
        if args.png:
            _stderr(f"wrote {args.png}")
        return EXIT_OK


class ImportQaplib(Command):
    name = "import-qaplib"
    help = "convert a QAPLIB .dat (with its .sln) whose distances form a grid into a placement instance"

    def add_arguments(self, p):
        p.add_argument("dat", metavar="FILE.dat")
        p.add_argument("--sln", metavar="FILE.sln", help="records the known optimum (default: FILE.sln beside it)")
        p.add_argument("--out", metavar="DIR", default="instances/placement/qaplib")

    def run(self, args):
        from wafopt.problems.placement.qaplib import write_instance

        sln = args.sln
        if sln is None and Path(args.dat).with_suffix(".sln").exists():
            sln = str(Path(args.dat).with_suffix(".sln"))
        path = write_instance(args.dat, sln, args.out)
        print(f"wrote {path}")
        return EXIT_OK


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
        from wafopt.run.methods import methods as methods_of
        from wafopt.run.tatp_report import render, report

        loaded = _load(args.scenario)
        if loaded.problem != "plan":
            raise InstanceError(f"needs a scenario (problem: plan), got problem: {loaded.problem}", args.scenario)
        if args.detour < 0:
            raise InstanceError(f"must be >= 0, got {args.detour}", "--detour")
        combos = []
        for item in args.combos.split(","):
            mapping, _, routing = item.strip().partition("+")
            if not routing:
                raise InstanceError(f"expected mapping+routing, got {item!r}", "--combos")
            for problem, method in (("tatp", mapping), ("routing", routing)):
                known = methods_of(problem)
                if method not in known:
                    raise InstanceError(f"unknown {problem} method {method!r} (available: {', '.join(known)})",
                                        "--combos")
            combos.append((mapping, routing))
        rep = report(loaded.instance, combos, args.time_limit, args.detour)
        if args.json:
            print(json.dumps(rep, indent=1, default=str))
        else:
            print(render(rep))
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
        p.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
        p.add_argument("--tp-scheme", choices=("megatron", "tatp"), default="megatron")
        p.add_argument("--json", action="store_true")

    def run(self, args):
        from dataclasses import replace

        from wafopt.costmodel.report import render_report, workload_report
        from wafopt.costmodel.training import parse_training

        loaded = _load(args.scenario)
        if loaded.problem != "plan":
            raise InstanceError(f"needs a scenario (problem: plan), got problem: {loaded.problem}", args.scenario)
        sc = loaded.instance
        training = sc.training
        if args.micro_batch is not None or args.sequence_parallel:
            b = args.micro_batch if args.micro_batch is not None else training.micro_batch
            if b <= 0:
                raise InstanceError(f"must be a positive integer, got {b}", "--micro-batch")
            training = replace(training, micro_batch=b, sequence_parallel=training.sequence_parallel
                               or args.sequence_parallel)
            parse_training({"seq": training.seq, "micro_batch": b, "global_batch": training.global_batch},
                           "--micro-batch")   # the same batch checks as a scenario file
        given = sc.parallel
        layout = {k: getattr(args, k) or (getattr(given, k) if given else 1) for k in ("tp", "pp", "dp")}
        for k, v in layout.items():
            if v <= 0:
                raise InstanceError(f"must be a positive integer, got {v}", f"--{k}")
        rep = workload_report(sc.llm, training, sc.wafer, layout["tp"], layout["pp"], layout["dp"],
                              args.recompute, args.tp_scheme)
        print(json.dumps(rep, indent=1) if args.json else render_report(rep))
        return EXIT_OK


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
        import contextlib
        import os

        from wafopt.explore.report import plot, render
        from wafopt.explore.run import explore
        from wafopt.explore.space import load_space
        from wafopt.explore.store import Store
        from wafopt.present.progress import LevelProgress

        loaded = load_space(args.space)
        for name in ("budget", "time_limit", "epsilon"):
            v = getattr(args, name)
            if v is not None and not (math.isfinite(v) and (v > 0 or (name == "epsilon" and 0 <= v < 1))):
                raise InstanceError(f"out of range: {v}", "--" + name.replace("_", "-"))
        workers = (os.cpu_count() or 1) if args.workers is None else args.workers
        if workers < 0:
            raise InstanceError(f"must be >= 0, got {workers}", "--workers")
        with contextlib.nullcontext() if args.quiet else LevelProgress() as bars:
            out = explore(loaded, exhaustive=args.exhaustive, epsilon=args.epsilon,
                          store=Store(args.store) if args.store else None, budget_s=args.budget, seed=args.seed,
                          workers=workers, scheduler=args.scheduler, time_limit=args.time_limit,
                          progress=None if bars is None else _explore_progress(bars))
        if args.plot:
            for path in plot(out, args.plot):
                _stderr(f"wrote {path}")
        print(json.dumps(out, indent=1) if args.json else render(out))
        return EXIT_OK


def _explore_progress(bars):
    """Per fidelity level: tasks done, designs pruned and still in play, the best so far and the
    least bound of the designs that could still beat it."""
    def report(level: str, info: dict) -> None:
        if level == "enumerate":
            bars.note("enumerated: " + ", ".join(f"{k} {v}" for k, v in info["counts"].items()))
            return
        text = f"pruned {info['pruned']}, remaining {info['remaining']}"
        if info.get("best"):
            text += f", best {info['best']} {info['best_value']:.4g}"
        if info.get("bound") is not None:
            text += f", least bound {info['bound']:.4g}"
        bars.update(level, info["done"], info["total"], text)
    return report


class Export(Command):
    name = "export"
    help = "write an exact model for another solver: the MILP as MPS or LP, the CP-SAT model as its proto"

    FORMATS = {"milp": ("mps", "lp"), "cpsat": ("pb",)}

    def add_arguments(self, p):
        p.add_argument("instance", metavar="INSTANCE")
        p.add_argument("--model", required=True, choices=sorted(self.FORMATS), help="which exact model")
        p.add_argument("--format", choices=["mps", "lp", "pb"], help="mps or lp for milp (default mps), "
                       "pb for cpsat (CP-SAT's CpModelProto, binary)")
        p.add_argument("--problem", help="export this sub-problem of a scenario instance")
        p.add_argument("--out", metavar="FILE", help="default: <instance-stem>.<model>.<format> here; further "
                       "models of the same instance (other tile shapes, a second phase) go beside it as "
                       "<stem>.2.<format>, ...")

    def run(self, args):
        from wafopt.core.budget import SolveOptions
        from wafopt.run.methods import method_function, methods
        from wafopt.solvers.backends import ModelExport

        fmt = args.format or self.FORMATS[args.model][0]
        if fmt not in self.FORMATS[args.model]:
            raise InstanceError(f"{args.model} is written as {' or '.join(self.FORMATS[args.model])}, not {fmt}",
                                "--format")
        loaded = _load(args.instance, args.problem)
        if args.model not in methods(loaded.problem):
            raise InstanceError(f"problem {loaded.problem} has no {args.model} model", "--model")
        out = args.out or f"{Path(args.instance).stem}.{args.model}.{fmt}"
        export = ModelExport(out, fmt)
        method_function(loaded.problem, args.model)(loaded.instance, SolveOptions(quiet=True, export=export).start())
        if not export.written:
            raise InstanceError(f"the {args.model} method solved this instance without building a model "
                                f"(a heuristic start already meets its bound)", args.instance)
        for path in export.written:
            print(f"wrote {path}")
        return EXIT_OK


class Schema(Command):
    name = "schema"
    help = "print the JSON Schema of a problem's instance files"

    def add_arguments(self, p):
        from wafopt.core.registry import PROBLEMS

        p.add_argument("problem", metavar="PROBLEM", choices=list(PROBLEMS), help=", ".join(PROBLEMS))

    def run(self, args):
        from wafopt.core.schema import json_schema
        from wafopt.problems import document_schema

        document = document_schema(args.problem)
        if document is None:
            raise InstanceError("publishes no schema", args.problem)
        print(json.dumps(json_schema(document), indent=1))
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

    def run(self, args):
        from wafopt.simulate.engine import MemoryOverflow
        from wafopt.simulate.report import plot, render_text, simulate_solution

        try:
            sim, evaluation = simulate_solution(args.solution, args.instance, not args.no_contention,
                                                timeline=bool(args.plot))
        except MemoryOverflow as exc:
            _stderr(f"wafopt: error: DRAM overflow: {exc}")
            return EXIT_INFEASIBLE
        if args.plot:
            plot(sim, args.plot)
            _stderr(f"wrote {args.plot}")
        if args.json:
            print(json.dumps({**sim.to_dict(), "analytic_iteration_s": evaluation.objective}, indent=1))
        else:
            print(render_text(sim, evaluation.objective))
        return EXIT_OK


class Calibrate(Command):
    name = "calibrate"
    help = "analytic plan model against the simulator on shipped and random plans: the error table and epsilon"

    def add_arguments(self, p):
        p.add_argument("--plans", type=int, default=50, metavar="N", help="random feasible plans (default 50)")
        p.add_argument("--seed", type=int, default=0, help="seed of the random plans (default 0)")
        p.add_argument("--out", default="docs/calibration.md", metavar="MD", help="the error table (markdown)")
        p.add_argument("--quiet", action="store_true")

    def run(self, args):
        from wafopt.simulate.calibrate import (
            calibrate,
            render_markdown,
            write_calibration,
        )
        from wafopt.simulate.report import plan_producer

        if not 0 <= args.plans <= 10_000:
            raise InstanceError(f"must be in 0..10000, got {args.plans}", "--plans")
        if not 0 <= args.seed < 2 ** 32:
            raise InstanceError(f"must be in 0..2^32-1, got {args.seed}", "--seed")

        def progress(row):
            if not args.quiet:
                _stderr(f"{row.label}: analytic {row.analytic_s:.6g} s, simulated {row.simulated_s:.6g} s "
                        f"({100 * row.time_error:+.3f} %)")

        result = calibrate(args.plans, args.seed, plan_producer(), progress)
        command = f"wafopt calibrate --plans {args.plans} --seed {args.seed}"
        Path(args.out).write_text(render_markdown(result, command))
        _stderr(f"wrote {args.out} and {write_calibration(result)}")
        t, m = result["iteration_time"], result["peak_memory"]
        print(f"iteration time: median {_pct(t['median'])}, p95 {_pct(t['p95'])}, max {_pct(t['max'])} (epsilon)")
        print(f"peak memory:    median {_pct(m['median'])}, p95 {_pct(m['p95'])}, max {_pct(m['max'])}")
        return EXIT_OK


COMMANDS = [Validate(), Solve(), Compare(), Ablation(), Certify(), Evaluate(), Show(), ImportQaplib(), TatpReport(), Export(),
            WorkloadTable(), Explore(), Schema(),
            Simulate(), Calibrate()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wafopt", description="Exact and heuristic optimization of LLM training on wafer-scale chips.")
    parser.add_argument("--version", action="version", version=f"wafopt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(p)
        p.set_defaults(handler=cmd)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler.run(args)
    except InstanceError as exc:
        _stderr(f"wafopt: error: {exc}")
        return EXIT_INVALID
    except KeyboardInterrupt:
        _stderr("wafopt: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # an internal error: say so plainly, with the traceback for a bug report
        import traceback
        traceback.print_exc()
        _stderr(f"wafopt: internal error: {type(exc).__name__}: {exc}")
        return EXIT_INTERNAL
    finally:
        if argv is None:  # the command line, and the process ends now
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # the work is done: a late Ctrl-C keeps the exit code
            gc.freeze()   # skips the collector's sweep of every loaded module at exit (~1 s with the solvers)


if __name__ == "__main__":
    raise SystemExit(main())
