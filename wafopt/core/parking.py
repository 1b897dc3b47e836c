"""Large structures kept alive to the end of a command-line run.

Freeing a search tree of millions of Python objects takes about a second per few million: done
when a method returns, it would delay writing the plan after Ctrl-C and push the process past its
time limit. A method parks such a structure instead; the command line enables parking and ends
the process without freeing what is parked (launch._exit_now). Without it (library use) parking
does nothing and the structure is freed as usual. The next park frees what the last one held, so
a process running many solves holds one at a time.
"""

from __future__ import annotations

from typing import Any

_parked: list | None = None   # None: parking is off


def park_until_exit() -> None:
    """Turn parking on (the command line, whose process ends right after its run)."""
    global _parked
    _parked = []


def park(value: Any) -> None:
    """Keep `value` alive until the process ends, in place of what was parked before."""
    if _parked is not None:
        _parked[:] = [value]


def holding() -> bool:
    return bool(_parked)
