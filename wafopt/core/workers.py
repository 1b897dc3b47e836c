"""Local worker processes: what every process pool of wafopt does the same way.

The parent handles Ctrl-C (the run's interrupt) and stops its workers itself; a worker ignores
SIGINT so that a Ctrl-C at the terminal does not end it half-way through a task.
"""

from __future__ import annotations

import signal


def ignore_ctrl_c() -> None:
    """In a worker: Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def terminate_workers(executor, shut_down: bool = False) -> None:
    """Stop a ProcessPoolExecutor's processes now (a running task does not poll the run's
    interrupt), after shutting the pool down first if asked (which forgets its processes). No
    future is cancelled: once the workers are terminated the pool marks the pending ones broken,
    and Python 3.11 raises InvalidStateError in its manager thread when one was cancelled first.
    The pool is of no further use."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    if shut_down:
        executor.shutdown(wait=False, cancel_futures=False)
    for process in processes:
        if process.is_alive():
            process.terminate()
