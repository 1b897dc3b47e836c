"""The `wafopt` executable's entry point. It imports almost nothing itself, so that a Ctrl-C while
the command line and its solvers load (about a second) ends with a plain message and exit 130,
not a traceback."""

from __future__ import annotations

import os
import signal
import sys

from wafopt.core.errors import (
    EXIT_INTERRUPTED,
    NOT_STARTED,
    STARTUP_SIGINTS,
    note_startup_sigint,
)
from wafopt.core.parking import holding, park_until_exit


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGINT, note_startup_sigint)
    try:
        from wafopt.cli.app import main as run
    except (KeyboardInterrupt, ImportError) as exc:
        if not (isinstance(exc, KeyboardInterrupt) or STARTUP_SIGINTS):
            raise   # a broken installation, not a Ctrl-C
        # (a C extension interrupted in its import reports an ImportError)
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not cut the exit short
        sys.stderr.write(f"wafopt: {NOT_STARTED}\n")
        _exit_now(EXIT_INTERRUPTED)
    if argv is None:   # the command line: this process ends with the run
        park_until_exit()
    code = run(argv)
    if holding() or (STARTUP_SIGINTS and code == EXIT_INTERRUPTED):
        _exit_now(code)   # parked search trees die with the process, unfreed
    return code


def _exit_now(code: int) -> None:
    """Exit without the interpreter's shutdown (which would free every parked structure, see
    wafopt.core.parking). Needed too where a KeyboardInterrupt that went through Python code a
    C extension ran while loading (pybind11's exec) marks the interpreter, which then kills itself
    with SIGINT at exit (exit -2) however the interrupt was handled. Output is flushed; files and
    worker pools are closed by then."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
