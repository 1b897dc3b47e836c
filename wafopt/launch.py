"""The `wafopt` executable's entry point. It imports almost nothing itself, so that a Ctrl-C while
the command line and its solvers load (about a second) ends with a plain message and exit 130,
not a traceback."""

from __future__ import annotations

import sys

from wafopt.core.errors import EXIT_INTERRUPTED, NOT_STARTED


def main(argv: list[str] | None = None) -> int:
    try:
        from wafopt.cli.app import main as run
    except KeyboardInterrupt:
        sys.stderr.write(f"wafopt: {NOT_STARTED}\n")
        return EXIT_INTERRUPTED
    return run(argv)
