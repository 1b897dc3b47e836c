"""`wafopt show`, `import-qaplib`, `export` and `schema`."""

from __future__ import annotations

import json

import wafopt.api as api
from wafopt.api import EXIT_OK, EXPORT_FORMATS, PROBLEMS
from wafopt.cli.common import Command, stderr
from wafopt.present.show import render_text
from wafopt.present.tables import presets_text


class Show(Command):
    name = "show"
    help = "a readable summary of an instance or a solution; --plot (or --png) draws it"

    def add_arguments(self, p):
        p.add_argument("target", metavar="INSTANCE|SOLUTION")
        p.add_argument("--problem", help="show this sub-problem of a scenario")
        p.add_argument("--instance", metavar="INSTANCE", help="the instance a solution solves (default: the one it names)")
        p.add_argument("--json", action="store_true")
        p.add_argument("--plot", "--png", dest="png", metavar="PNG", help="draw the instance, or the solution's plan "
                       "(mesh and link loads, recompute memory bars, GA convergence)")

    def run(self, args):
        info = api.show(args.target, args.problem, args.png, args.instance)
        print(json.dumps(info, indent=1) if args.json else render_text(info))
        if args.png:
            stderr(f"wrote {args.png}")
        return EXIT_OK


class ImportQaplib(Command):
    name = "import-qaplib"
    help = "convert a QAPLIB .dat (with its .sln) whose distances form a grid into a placement instance"

    def add_arguments(self, p):
        p.add_argument("dat", metavar="FILE.dat")
        p.add_argument("--sln", metavar="FILE.sln", help="records the known optimum (default: FILE.sln beside it)")
        p.add_argument("--out", metavar="DIR", default="instances/placement/qaplib")

    def run(self, args):
        print(f"wrote {api.import_qaplib(args.dat, args.sln, args.out)}")
        return EXIT_OK


class Export(Command):
    name = "export"
    help = "write an exact model for another solver: the MILP as MPS or LP, the CP-SAT model as its proto"

    def add_arguments(self, p):
        p.add_argument("instance", metavar="INSTANCE")
        p.add_argument("--model", required=True, choices=sorted(EXPORT_FORMATS), help="which exact model")
        p.add_argument("--format", choices=["mps", "lp", "pb"], help="mps or lp for milp (default mps), "
                       "pb for cpsat (CP-SAT's CpModelProto, binary)")
        p.add_argument("--problem", help="export this sub-problem of a scenario instance")
        p.add_argument("--out", metavar="FILE", help="default: <instance-stem>.<model>.<format> here; further "
                       "models of the same instance (other tile shapes, a second phase) go beside it as "
                       "<stem>.2.<format>, ...")

    def run(self, args):
        for path in api.export(args.instance, args.model, args.format, args.problem, args.out):
            print(f"wrote {path}")
        return EXIT_OK


class Schema(Command):
    name = "schema"
    help = "print the JSON Schema of a problem's instance files"

    def add_arguments(self, p):
        p.add_argument("problem", metavar="PROBLEM", choices=list(PROBLEMS), help=", ".join(PROBLEMS))

    def run(self, args):
        print(json.dumps(api.schema(args.problem), indent=1))
        return EXIT_OK


class Presets(Command):
    name = "presets"
    help = "the model, wafer and cluster presets a scenario can name: their key numbers and sources"

    def add_arguments(self, p):
        p.add_argument("--json", action="store_true")

    def run(self, args):
        found = api.presets()
        print(json.dumps(found, indent=1) if args.json else presets_text(found))
        return EXIT_OK
