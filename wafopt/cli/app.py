"""The command line's subcommands and their dispatch (wafopt.cli.main loads this module)."""

from __future__ import annotations

import argparse
import gc
import signal
import traceback

from wafopt.api import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    NOT_STARTED,
    STARTUP_SIGINTS,
    InstanceError,
    __version__,
)
from wafopt.cli.common import stderr
from wafopt.cli.exploring import Explore
from wafopt.cli.instances import Export, ImportQaplib, Presets, Schema, Show
from wafopt.cli.scenarios import (
    Ablation,
    Calibrate,
    Fidelity,
    Simulate,
    TatpReport,
    WorkloadTable,
)
from wafopt.cli.solving import Certify, Compare, Evaluate, Solve, Validate

COMMANDS = [Validate(), Solve(), Compare(), Ablation(), Certify(), Evaluate(), Show(), ImportQaplib(), TatpReport(),
            Export(), WorkloadTable(), Explore(), Schema(), Presets(), Simulate(), Calibrate(), Fidelity()]


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
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        if argv is None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not cut the exit short
        stderr(f"wafopt: {NOT_STARTED}")
        return EXIT_INTERRUPTED
    try:
        return args.handler.run(args)
    except InstanceError as exc:
        stderr(f"wafopt: error: {exc}")
        return EXIT_INVALID
    except KeyboardInterrupt:
        stderr("wafopt: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # an internal error: say so plainly, with the traceback for a bug report
        if STARTUP_SIGINTS:   # a Ctrl-C while a solver library loaded, turned into its import error
            if argv is None:
                signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not cut the exit short
            stderr(f"wafopt: {NOT_STARTED}")
            return EXIT_INTERRUPTED
        traceback.print_exc()
        stderr(f"wafopt: internal error: {type(exc).__name__}: {exc}")
        return EXIT_INTERNAL
    finally:
        if argv is None:  # the command line, and the process ends now
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # the work is done: a late Ctrl-C keeps the exit code
            gc.freeze()   # skips the collector's sweep of every loaded module at exit (~1 s with the solvers)
