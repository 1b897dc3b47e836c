"""Local worker processes: one small pool that every process pool of wafopt uses.

Each worker has its own pipe; a task goes out on it and its result comes back on it. The parent
handles Ctrl-C (the run's interrupt) and stops its workers itself (`WorkerPool.stop`), and a
worker ignores SIGINT so that a Ctrl-C at the terminal does not end it half-way through a task.

Why not concurrent.futures.ProcessPoolExecutor: its manager thread reads every result from one
shared queue, and a worker terminated while it writes a result leaves that thread waiting for the
rest of the message, which the interpreter joins at exit: the process never ends. Here a stopped
worker's pipe is simply never read again, and there is no thread to join.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import traceback
from collections import deque
from typing import Any, Callable, Iterable, Iterator

JOIN_S = 0.5   # how long a worker may take to exit (asked, or terminated) before it is killed
WAIT_S = 1.0   # how long one wait for a result blocks before it looks again


def default_workers(workers: int | None) -> int:
    """`workers` as given, or one process per core when it is not."""
    return (os.cpu_count() or 1) if workers is None else workers


class WorkerError(RuntimeError):
    """A worker process ended without returning its task's result."""


def ignore_ctrl_c() -> None:
    """In a worker: Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def one_blas_thread() -> None:
    """In a worker (an initializer): BLAS on one thread. A forked worker keeps its parent's BLAS
    thread pool, and two workers each spinning up one thread per core on a 2-core machine ran
    the QPB of branch and bound 3.7 times slower than one process alone."""
    from threadpoolctl import threadpool_limits  # imported in the worker only

    threadpool_limits(1)


def _serve(connection, initializer: Callable[[], None] | None) -> None:
    """A worker's loop: run each task it receives, send back ("ok", result) or ("error", text)."""
    ignore_ctrl_c()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})   # blocked by the parent while it started us
    if initializer is not None:
        initializer()
    while True:
        try:
            task = connection.recv()
        except (EOFError, OSError):   # the parent is gone
            return
        if task is None:
            return
        function, args = task
        try:
            reply = ("ok", function(*args))
        except BaseException:   # noqa: BLE001 - the parent re-raises it with the worker's traceback
            reply = ("error", traceback.format_exc())
        try:
            connection.send(reply)
        except (EOFError, OSError):
            return


class WorkerPool:
    """`count` worker processes, started on the first task with `start_method` ("fork": they
    inherit this process's state; "spawn": a fresh interpreter each). Tasks are numbered in the
    order they are submitted and run on the first idle worker; results are fetched by number."""

    def __init__(self, count: int, start_method: str, initializer: Callable[[], None] | None = None):
        self.count = max(1, count)
        self.context = multiprocessing.get_context(start_method)
        self.initializer = initializer
        self.workers: list = []        # (process, parent end of its pipe)
        self.running: dict = {}        # worker index -> task number
        self.queued: deque = deque()   # (task number, task) not yet sent
        self.results: dict = {}        # task number -> reply
        self.submitted = 0
        self.stopped = False

    # --- tasks ----------------------------------------------------------------------------------
    def submit(self, function: Callable, *args: Any) -> int:
        """Queue `function(*args)` (a module-level function: it is pickled by name); its number."""
        if self.stopped:
            raise WorkerError("the worker pool was stopped")
        number = self.submitted
        self.submitted += 1
        self.queued.append((number, (function, args)))
        self._dispatch()
        return number

    def done(self, number: int) -> bool:
        return number in self.results

    def wait(self, timeout: float) -> list[int]:
        """Wait up to `timeout` seconds for running tasks; the numbers of those that finished."""
        if not self.running:
            return []
        busy = {self.workers[w][1]: w for w in self.running}
        sentinels = {self.workers[w][0].sentinel: w for w in self.running}
        ready = multiprocessing.connection.wait([*busy, *sentinels], timeout)
        finished = []
        for worker in sorted({busy.get(r, sentinels.get(r)) for r in ready}):
            process, connection = self.workers[worker]
            try:
                reply = connection.recv()
            except (EOFError, OSError):
                self.stop()
                raise WorkerError(f"a worker process ended (exit code {process.exitcode}) "
                                  "before returning its result") from None
            number = self.running.pop(worker)
            self.results[number] = reply
            finished.append(number)
        self._dispatch()
        return finished

    def ordered(self, function: Callable, tasks: Iterable[tuple], ahead: int) -> Iterator:
        """function(*task) for each task, the results in task order, with at most `ahead` tasks
        submitted and not yet returned (so a long task list is never all in memory)."""
        submitted: deque = deque()
        for task in tasks:
            submitted.append(self.submit(function, *task))
            if len(submitted) >= ahead:
                yield self._when_done(submitted.popleft())
        while submitted:
            yield self._when_done(submitted.popleft())

    def _when_done(self, number: int) -> Any:
        while not self.done(number):
            self.wait(WAIT_S)
        return self.result(number)

    def result(self, number: int) -> Any:
        """A finished task's result (its exception re-raised with the worker's traceback)."""
        kind, value = self.results.pop(number)
        if kind == "error":
            raise WorkerError(f"a worker's task failed:\n{value}")
        return value

    def _dispatch(self) -> None:
        """Send queued tasks to idle workers, starting the workers on the first task."""
        if not self.workers and self.queued:
            self._start()
        idle = [w for w in range(len(self.workers)) if w not in self.running]
        while idle and self.queued:
            worker = idle.pop(0)
            number, task = self.queued.popleft()
            try:
                self.workers[worker][1].send(task)
            except (EOFError, OSError):
                self.stop()
                raise WorkerError("a worker process ended before it took its task") from None
            self.running[worker] = number

    def _start(self) -> None:
        # Ctrl-C is held while the workers start: a forked worker would otherwise run the parent's
        # handler until it ignores SIGINT (the mask also passes through a spawned worker's exec)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for _ in range(self.count):
                parent_end, child_end = self.context.Pipe()
                process = self.context.Process(target=_serve, args=(child_end, self.initializer), daemon=True)
                process.start()
                child_end.close()   # the worker's end lives only in the worker: its death reads as EOF here
                self.workers.append((process, parent_end))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    # --- ending ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """Terminate the workers now (running tasks are dropped); the pool is of no further use."""
        self.stopped = True
        for process, _ in self.workers:
            if process.is_alive():
                process.terminate()
        for process, connection in self.workers:
            process.join(JOIN_S)
            if process.is_alive():
                process.kill()
                process.join()
            connection.close()
        self.workers, self.running = [], {}
        self.queued.clear()

    def close(self) -> None:
        """Let idle workers exit (running ones are terminated after JOIN_S)."""
        for worker, (_, connection) in enumerate(self.workers):
            if worker not in self.running:
                try:
                    connection.send(None)
                except (EOFError, OSError):
                    pass
        for process, _ in self.workers:
            process.join(0 if self.running else JOIN_S)
        self.stop()
