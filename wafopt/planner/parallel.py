"""Where layouts are composed: in this process, on a local process pool, or on a Dask cluster.

Layouts are independent, so a wave of them runs at once; results come back in the wave's order,
whatever finishes first, so the planner's decisions (incumbent, pruning) are the same for any
number of workers. A worker gets the scenario, the layout, the seed and its seconds, never the
run's budget object: an interrupt stops the wave from here (pending tasks dropped, pool
processes terminated), and each task's own deadline bounds it otherwise.
"""

from __future__ import annotations

import multiprocessing
import time

from wafopt.core.budget import SolveOptions
from wafopt.core.errors import InstanceError
from wafopt.core.workers import WorkerPool
from wafopt.costmodel.scenario import Choice
from wafopt.planner.compose import Composition, compose_layout

POLL_S = 0.1   # how often a waiting wave checks for Ctrl-C and the deadline
GRACE_S = 1.0  # a task may overrun its own deadline by this much before it counts as timed out


def compose_task(scenario, choice: Choice, seed: int, seconds: float) -> Composition:
    """One choice (layout and micro-batch size) composed in a worker (a fresh budget of `seconds`)."""
    options = SolveOptions(time_limit=seconds, seed=seed, quiet=True).start()
    return compose_layout(scenario, choice, options)


def _worker_setup() -> None:
    # pyomo makes a multiprocessing lock when it is imported. In a spawned worker that lock is a
    # named semaphore, which the resource tracker reports as leaked when we terminate the worker
    # at a deadline; with fork as the worker's own start method the lock is anonymous.
    if "fork" in multiprocessing.get_all_start_methods():
        multiprocessing.set_start_method("fork", force=True)


def _pool(workers: int) -> WorkerPool:
    return WorkerPool(workers, "spawn", initializer=_worker_setup)


class Serial:
    """Runs each task in this process with the run's own budget (shared interrupt)."""
    workers = 1

    def __init__(self, options: SolveOptions):
        self.options = options

    def run(self, scenario, choices: list[Choice], seed: int, seconds: float, done) -> list:
        out = []
        for k, choice in enumerate(choices):
            if self.options.stopped():
                out.append(None)
                continue
            out.append(compose_layout(scenario, choice, self.options.sub(seconds)))
            done(k, out[-1])
        return out

    def close(self) -> None:
        pass


class _Waves:
    """Shared waiting loop: results in submission order, None for a task cut by an interrupt."""

    def __init__(self, options: SolveOptions):
        self.options = options

    def collect(self, tasks: list, seconds: float, done) -> list:
        """Wait for the wave; `done(k, outcome)` as each task finishes (any order)."""
        deadline = time.monotonic() + seconds + GRACE_S
        pending = set(tasks)
        index = {f: k for k, f in enumerate(tasks)}
        results: list = [None] * len(tasks)
        while pending and not self.options.stopped() and time.monotonic() < deadline:
            finished, pending = self.wait(pending, POLL_S)
            for f in sorted(finished, key=index.get):
                results[index[f]] = self.result(f)
                done(index[f], results[index[f]])
        if pending:
            self.abort(pending)
        return results


class Pool(_Waves):
    """A local process pool (spawned processes: no solver state is forked)."""

    def __init__(self, options: SolveOptions, workers: int):
        super().__init__(options)
        self.workers = workers
        self.pool = _pool(workers)

    def run(self, scenario, choices: list[Choice], seed: int, seconds: float, done) -> list:
        numbers = [self.pool.submit(compose_task, scenario, choice, seed, seconds) for choice in choices]
        return self.collect(numbers, seconds, done)

    def wait(self, pending, timeout):
        self.pool.wait(timeout)
        finished = {n for n in pending if self.pool.done(n)}
        return finished, set(pending) - finished

    def result(self, number):
        return self.pool.result(number)

    def abort(self, pending) -> None:
        self.pool.stop()   # pending results are ignored anyway
        self.pool = _pool(self.workers)

    def close(self) -> None:
        self.pool.close()


class Dask(_Waves):
    """An existing Dask cluster (`--scheduler ADDRESS`)."""

    def __init__(self, options: SolveOptions, address: str):
        super().__init__(options)
        # dask: heavy and optional, imported only with --scheduler
        try:
            from distributed import Client
        except ImportError:
            raise InstanceError("needs the distributed package (pip install distributed)", "--scheduler") from None
        try:
            self.client = Client(address, timeout=10, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise InstanceError(f"cannot reach the Dask scheduler at {address}: {exc}", "--scheduler") from None
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))

    def run(self, scenario, choices: list[Choice], seed: int, seconds: float, done) -> list:
        futures = [self.client.submit(compose_task, scenario, choice, seed, seconds, pure=False)
                   for choice in choices]
        return self.collect(futures, seconds, done)

    @staticmethod
    def wait(pending, timeout):
        time.sleep(timeout)   # futures of a client that is not the default one: poll them
        done = {f for f in pending if f.done()}
        return done, set(pending) - done

    @staticmethod
    def result(future):
        return future.result()

    def abort(self, pending) -> None:
        self.client.cancel(list(pending))

    def close(self) -> None:
        self.client.close()


def executor(options: SolveOptions, workers: int, scheduler: str | None):
    if scheduler:
        return Dask(options, scheduler)
    if workers > 1:
        return Pool(options, workers)
    return Serial(options)
