"""The local worker pool (wafopt.core.workers): results by task number, a failing or dying task
reported, and a pool stopped while a worker writes a large result lets the process exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wafopt.core.workers import WorkerError, WorkerPool

ROOT = Path(__file__).resolve().parent.parent


def square(x: int) -> int:
    return x * x


def slow_identity(x: int, seconds: float) -> int:
    time.sleep(seconds)
    return x


def fail(message: str) -> None:
    raise ValueError(message)


def die() -> None:
    os._exit(3)


def collect(pool: WorkerPool, numbers: list[int]) -> list:
    deadline = time.monotonic() + 60
    while not all(pool.done(n) for n in numbers) and time.monotonic() < deadline:
        pool.wait(0.1)
    return [pool.result(n) for n in numbers]


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_results_come_back_by_task_number_whatever_finishes_first(start_method):
    pool = WorkerPool(2, start_method)
    try:
        # the first task finishes last: more tasks than workers, so some wait in the queue
        numbers = [pool.submit(slow_identity, 0, 0.5)] + [pool.submit(square, k) for k in range(1, 6)]
        assert collect(pool, numbers) == [0, 1, 4, 9, 16, 25]
        processes = [process for process, _ in pool.workers]
        assert len(processes) == 2
    finally:
        pool.close()
    assert not any(process.is_alive() for process in processes)


def test_ordered_results_follow_the_tasks_with_a_bounded_number_ahead():
    pool = WorkerPool(2, "fork")
    seen = []

    def tasks():
        for k in range(7):
            seen.append(k)
            yield (k, 0.2 if k == 0 else 0.0)     # the first finishes last
    try:
        results = pool.ordered(slow_identity, tasks(), ahead=3)
        assert next(results) == 0 and seen == [0, 1, 2]    # no more than 3 handed out before the first returns
        assert list(results) == [1, 2, 3, 4, 5, 6]
    finally:
        pool.close()


def test_a_failing_task_raises_with_the_workers_traceback_and_the_pool_goes_on():
    pool = WorkerPool(1, "fork")
    try:
        failing, fine = pool.submit(fail, "bad shape"), pool.submit(square, 7)
        with pytest.raises(WorkerError, match="ValueError: bad shape"):
            collect(pool, [failing])
        assert collect(pool, [fine]) == [49]
    finally:
        pool.close()


def test_a_worker_that_dies_is_reported_not_waited_for():
    pool = WorkerPool(1, "fork")
    number = pool.submit(die)
    with pytest.raises(WorkerError, match="exit code 3"):
        collect(pool, [number])
    assert pool.stopped
    with pytest.raises(WorkerError, match="stopped"):
        pool.submit(square, 2)


def test_stopping_while_a_worker_writes_a_large_result_lets_the_process_exit(tmp_path):
    # A worker terminated half-way through sending 200 MB: the parent must neither read the rest
    # nor wait for it at exit (a shared result queue read by a thread would hang here).
    script = tmp_path / "stop.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from wafopt.core.workers import WorkerPool

        def big():
            return b"x" * 200_000_000

        if __name__ == "__main__":
            pool = WorkerPool(2, "fork")
            numbers = [pool.submit(big), pool.submit(big)]
            pool.wait(30)           # at least one worker has begun to send its result
            pool.stop()
            print("stopped", flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "stopped" in done.stdout, done.stderr
