"""`wafopt validate`, `solve`, `compare`, `certify` and `evaluate`."""

from __future__ import annotations

import csv
import io
import json
import math
import sys

import wafopt.api as api
from wafopt.api import (
    EXIT_INFEASIBLE,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    NOT_STARTED,
    InstanceError,
)
from wafopt.api.solving import default_workers
from wafopt.cli.common import (
    Command,
    add_solve_options,
    exit_code,
    methods_help,
    note_no_time_limit,
    run_and_save,
    solve_options,
    stderr,
)
from wafopt.present.draw import check_picture_path
from wafopt.present.pictures import draw_solution
from wafopt.present.planner import candidates_text
from wafopt.present.tables import compare_tables, evaluation_text, result_line


class Validate(Command):
    name = "validate"
    help = "check instance files and report the first problem in each"

    def add_arguments(self, p):
        p.add_argument("instances", nargs="+", metavar="INSTANCE")

    def run(self, args):
        code = EXIT_OK
        for path, loaded, error in api.validate(args.instances):
            if error is None:
                print(f"ok       {path}  (problem: {loaded.problem}, name: {loaded.name})")
            else:
                print(f"invalid  {error}")
                code = EXIT_INVALID
        return code


class Solve(Command):
    name = "solve"
    help = "solve an instance with one method and write the solution JSON"

    def add_arguments(self, p):
        p.add_argument("instance", metavar="INSTANCE")
        p.add_argument("--method", help=methods_help() + " (default for a scenario: plan, the joint planner)")
        add_solve_options(p)
        p.add_argument("--workers", type=int, default=None, metavar="N",
                       help="plan: compose layouts on N local processes; bnb: search subtrees on N processes "
                       "(default: the number of cores)")
        p.add_argument("--scheduler", metavar="ADDRESS", help="plan: compose layouts on this Dask cluster")
        p.add_argument("--plot", metavar="PNG", help="draw the solution (as `wafopt show --plot`); "
                       "plan: the convergence of plan and bound")
        p.add_argument("--elite-share", type=float, default=0.5, metavar="OMEGA",
                       help="plan: the share of each GA generation kept as elites (WATOS omega, 0 to 1; default 0.5)")
        p.add_argument("--warm-start", metavar="SOLUTION", help="start exact methods from this plan")
        p.add_argument("--out", metavar="FILE|DIR", help="a file, or a directory to write into "
                       "(default: solutions/<instance-stem>.<method>.json; a better solution there is kept, a file "
                       "git tracks is never modified: the run goes beside it as <name>.new.json)")
        p.add_argument("--json", action="store_true", help="print the solution JSON on stdout")

    def run(self, args):
        try:
            loaded, options = self._prepare(args)
        except KeyboardInterrupt:
            stderr(f"wafopt: {NOT_STARTED}")
            return EXIT_INTERRUPTED
        note_no_time_limit([args.method], args)
        announce = None if options.quiet else (f"solving {args.instance} ({loaded.problem}) with {args.method}"
                                               + (f", time limit {args.time_limit:g} s" if args.time_limit else ""))
        try:
            result, out, note, interrupted = run_and_save(loaded, args.method, options, out=args.out, announce=announce)
        except InstanceError as exc:   # a field of the instance the method cannot use: name the file too
            if exc.where and not exc.where.startswith(("-", str(args.instance))):
                raise InstanceError(exc.reason, f"{args.instance}: {exc.where}") from None
            raise
        if args.json:
            print(json.dumps(result.solution.to_dict(), indent=1))
        else:
            print(result_line(result, loaded.objective_unit))
            if result.message:
                print(f"note: {result.message}")
            if result.solution.stats.get("candidates"):
                print(candidates_text(result.solution.stats))
            if out is not None:
                print(f"wrote {out}")
        if out is None:
            stderr(f"wafopt: {note}")
            return EXIT_INTERRUPTED
        if args.plot:
            draw_solution(loaded.problem, loaded.instance, result.plan, result.solution.stats, args.plot,
                          f"{loaded.name}: {args.method}")
            stderr(f"wrote {args.plot}")
        if note:
            stderr(f"wafopt: note: {note}")
        return EXIT_INTERRUPTED if interrupted else exit_code(result)

    @staticmethod
    def _prepare(args):
        """The instance and the checked options; the method's solver libraries loaded."""
        loaded = api.load(args.instance, args.problem)
        if args.method is None:
            if loaded.problem != "plan":
                raise InstanceError(f"is required for problem {loaded.problem} "
                                    f"(one of {', '.join(api.methods(loaded.problem))})", "--method")
            # a scenario: the joint planner searches what `parallel:` leaves open; on a GPU cluster
            # (no die mesh to place on) Megatron-LM's layout is the plan
            args.method = "megatron" if not api.applicable(loaded, "plan") else "plan"
        if args.plot:
            check_picture_path(args.plot)
        api.prepare_method(loaded, args.method)   # its solver libraries load before "solving"
        options = solve_options(args)
        if args.warm_start:
            options.warm_start = api.read_warm_start(args.warm_start, loaded)
        return loaded, options


class Compare(Command):
    name = "compare"
    help = "run several methods on each instance and tabulate objective, bound, gap and time"

    def add_arguments(self, p):
        p.add_argument("instances", nargs="+", metavar="INSTANCE")
        p.add_argument("--methods", help="comma-separated (default: the problem's default set)")
        add_solve_options(p)
        p.add_argument("--save", action="store_true", help="also write each solution to solutions/")
        fmt = p.add_mutually_exclusive_group()
        fmt.add_argument("--json", action="store_true", help="rows as JSON")
        fmt.add_argument("--csv", action="store_true", help="rows as CSV")
        fmt.add_argument("--markdown", action="store_true", help="tables as Markdown (for docs/)")
        p.add_argument("--details", default="", metavar="KEYS",
                       help="extra columns from the evaluator's details, comma-separated "
                            "(e.g. recompute_share,peak_fraction for plans)")

    def run(self, args):
        extra = [k.strip() for k in args.details.split(",") if k.strip()]
        asked = None if args.methods is None else [m.strip() for m in args.methods.split(",") if m.strip()]
        jobs = api.compare_jobs(args.instances, asked, args.problem)
        solve_options(args)   # a bad flag fails before any method runs
        note_no_time_limit([m for job in jobs for m in job.methods], args)
        rows = []
        code = EXIT_OK
        for job in jobs:
            results = []
            for k, method in enumerate(job.methods):
                announce = None if args.quiet else \
                    f"[{job.instance.name}] {method} ({k + 1}/{len(job.methods)}) ..."
                result, _, note, interrupted = run_and_save(job.instance, method, solve_options(args),
                                                            write=args.save, announce=announce)
                if note:
                    stderr(f"wafopt: note: {note}")
                results.append(result)
                if interrupted:
                    code = EXIT_INTERRUPTED
                    break
            block_rows = api.compare_rows(job, results, extra)
            rows += block_rows
            if not (args.json or args.csv):  # each table as soon as its instance is done
                print(compare_tables(block_rows, extra, job.objective, args.markdown))
                sys.stdout.flush()
            if code == EXIT_INTERRUPTED:
                break
        missing = api.missing_details(rows, extra)
        if missing:
            stderr(f"wafopt: note: no evaluation has details {', '.join(missing)}")
        if args.json:
            print(json.dumps(rows, indent=1))
        elif args.csv:
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["instance"])
            writer.writeheader()
            writer.writerows(rows)
            print(buf.getvalue(), end="")
        return code


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
        p.add_argument("--workers", type=int, metavar="N",
                       help="check a branch-and-bound tree on N processes (default: the number of cores)")
        p.add_argument("--quiet", action="store_true", help="no progress output on stderr during a long check")

    def run(self, args):
        if args.time_limit is not None and not (math.isfinite(args.time_limit) and args.time_limit > 0):
            raise InstanceError(f"must be a positive number of seconds, got {args.time_limit}", "--time-limit")
        if args.time_limit is not None and not args.resolve:
            raise InstanceError("only applies with --resolve", "--time-limit")
        if args.workers is not None and args.workers < 1:
            raise InstanceError(f"must be a positive number of processes, got {args.workers}", "--workers")
        report = api.certify_file(args.solution, args.instance, resolve=args.resolve, time_limit=args.time_limit,
                                  workers=default_workers(args.workers),
                                  quiet=args.quiet)
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
        loaded = api.load(args.instance, args.problem)
        ev = api.evaluate(loaded, api.read_plan(args.plan, loaded))
        if ev.malformed:   # bad input (exit 2), not an infeasible plan
            raise InstanceError(ev.violations[0], args.plan)
        if args.json:
            print(json.dumps(ev.to_dict(), indent=1))
        else:
            print(evaluation_text(ev))
        return EXIT_OK if ev.feasible else EXIT_INFEASIBLE
