"""The `wafopt` command line: one small class per subcommand.

Exit codes: 0 ok, 1 internal error, 2 invalid input, 3 infeasible, 4 not certified, 130 interrupted.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from pathlib import Path

from wafopt import __version__
from wafopt.core.errors import (EXIT_INFEASIBLE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_NO_PLAN,
                               EXIT_NOT_CERTIFIED, EXIT_OK, InstanceError)


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

    return options(args.time_limit, args.seed, None, args.quiet, getattr(args, "verbose", False))


def _add_solve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problem", help="solve this sub-problem derived from a scenario instance "
                   "(placement, recompute, mem_pair, tatp, routing)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds per method (default: none for exact methods, 10 s for the GA and local search)")
    p.add_argument("--seed", type=int, default=0, help="seed of every randomized method (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    p.add_argument("--verbose", action="store_true", help="solver logs on stderr")


def _methods_help() -> str:
    """'problem: method, method; ...' from the problem registry."""
    from wafopt.core.registry import PROBLEMS, methods

    return "; ".join(f"{p}: {', '.join(methods(p))}" for p in PROBLEMS)


def _load(path: str, problem: str | None = None):
    from wafopt.api import load

    return load(path, problem)


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
        p.add_argument("--method", required=True, help=_methods_help())
        _add_solve_options(p)
        p.add_argument("--warm-start", metavar="SOLUTION", help="start exact methods from this plan")
        p.add_argument("--out", metavar="FILE|DIR", help="a file, or a directory to write into "
                       "(default: solutions/<instance-stem>.<method>.json; a better solution there is kept)")
        p.add_argument("--json", action="store_true", help="print the solution JSON on stdout")

    def run(self, args):
        from wafopt.api import Result, check_warm_start, save
        from wafopt.compose.runner import run
        from wafopt.core.registry import method_function
        from wafopt.core.solution import read_solution

        loaded = _load(args.instance, args.problem)
        method_function(loaded.problem, args.method)  # an unknown method fails before any work
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
        result = Result.of(run(loaded, args.method, options))
        out, note = save(result, loaded, args.out)
        if args.json:
            print(json.dumps(result.solution.to_dict(), indent=1))
        else:
            bound = result.bound
            print(f"{result.status.value:10s} objective {_fmt(result.objective)}  bound {_fmt(bound and bound.value)}"
                  + (f" ({bound.provenance}: {bound.kind})" if bound else "")
                  + f"  gap {_pct(result.gap)}  {result.time_s:.2f} s  [{result.solution.solver}]")
            if result.message:
                print(f"note: {result.message}")
            print(f"wrote {out}")
        if note:
            _stderr(f"wafopt: note: {note}")
        return _exit_code(result)


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
        from wafopt.api import Result, applicable, default_methods, save
        from wafopt.compose.runner import run
        from wafopt.core.numeric import relative_gap
        from wafopt.core.registry import PROBLEMS, methods as methods_of

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
                result = Result.of(run(loaded, method, _options(args)))
                if args.save:
                    _, note = save(result, loaded)
                    if note:
                        _stderr(f"wafopt: note: {note}")
                block.append(result.solution)
                if result.interrupted:
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
    help = "re-check a solution: instance hash, feasibility, objective, bound; print the certified gap"

    def add_arguments(self, p):
        p.add_argument("solution", metavar="SOLUTION")
        p.add_argument("--instance", metavar="INSTANCE", help="default: the path stored in the solution")

    def run(self, args):
        from wafopt.compose.certify import certify

        report = certify(args.solution, args.instance)
        for line in report.lines:
            print(line)
        return EXIT_OK if report.certified else EXIT_NOT_CERTIFIED


class Evaluate(Command):
    name = "evaluate"
    help = "the evaluator's verdict on a hand-written plan (YAML/JSON, or a solution file)"

    def add_arguments(self, p):
        p.add_argument("instance", metavar="INSTANCE")
        p.add_argument("plan", metavar="PLAN")
        p.add_argument("--problem", help="evaluate as this sub-problem of a scenario")
        p.add_argument("--json", action="store_true")

    def run(self, args):
        from wafopt.problems import evaluate
        from wafopt.core.files import read_mapping

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
    help = "a readable summary of an instance or a solution; --png draws the mesh"

    def add_arguments(self, p):
        p.add_argument("target", metavar="INSTANCE|SOLUTION")
        p.add_argument("--problem", help="show this sub-problem of a scenario")
        p.add_argument("--json", action="store_true")
        p.add_argument("--png", metavar="FILE", help="draw the mesh with the plan (if any)")

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
        from wafopt.problems import problem_module
        from wafopt.compose.tatp_report import render, report

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
                known = problem_module(problem).METHODS
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


COMMANDS = [Validate(), Solve(), Compare(), Certify(), Evaluate(), Show(), ImportQaplib(), TatpReport()]


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


if __name__ == "__main__":
    raise SystemExit(main())
