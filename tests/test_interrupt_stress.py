"""Ctrl-C at random moments, 200 times across every method (slow: about 9 min on 2 shared cores).

Each run is a real process, `python -m wafopt solve INSTANCE --method M --out TMP/out.json
--time-limit 30 --seed 0` (cwd a temporary directory: nothing is written into the checkout), sent
SIGINT at a moment drawn by `random.Random(0)`:

- before   while the process loads (imports, reading the instance), before "solving ..." shows;
- after    0-50 ms after the "solving ..." line;
- during   at a random moment of the solve (up to 3 s, less for a method that is done sooner);
- twice    a first Ctrl-C at any of the above, a second one 20-150 ms later.

Half the signals go to the process alone (`kill -INT PID`), half to its process group (what a
terminal's Ctrl-C does: the worker and solver processes get it too).

Every run must end within CTRL_C_S of the (first) signal with exit 130 and either a solution file
whose plan `wafopt certify` certifies (exit 0; or 4, which only says that the solver's bound is
claimed, not re-derived, as for the same method run without Ctrl-C), or no file and a plain
"... nothing written" on stderr; never a traceback, a temporary file or a process left running. A run that had finished
before the signal arrived (exit 0 with its plan written before the signal) is allowed and counted;
at least MIN_INTERRUPTED runs must really be interrupted (not finished first).

A summary table (per method: runs, exit codes, plans written, "nothing written" messages, max
stop latency) is printed; each kind of failure is reported with a command that reproduces it
(`python tests/test_interrupt_stress.py --instance I --method M --after S [--gap S] [--group]`).
WAFOPT_STRESS_PICK=3,17 reruns only those runs of the schedule (same moments); WAFOPT_STRESS_RUNS=N
runs the first N.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
RUNS = 200
MIN_INTERRUPTED = 150
CTRL_C_S = 2.0        # the promise: the process ends within this of the (first) Ctrl-C
TIME_LIMIT = "30"
MODES = ("before", "after", "during", "twice")
NOTHING_WRITTEN = re.compile(r"^wafopt: interrupted before (any plan was found|solving began); nothing written$",
                             re.MULTILINE)

# (problem, method, instance, seconds the solve typically takes on 2 loaded cores; 30 = the limit)
TARGETS = [
    ("plan", "plan", "instances/plan/gpt3-175b-config3-search.yaml", 30),
    ("plan", "gcmr", "instances/plan/llama3-70b-config3-faulty.yaml", 7.5),
    ("plan", "megatron", "instances/plan/llama3-70b-config3-faulty.yaml", 0.12),
    ("plan", "mg-wafer", "instances/plan/llama3-70b-config3-faulty.yaml", 0.08),
    ("plan", "uniform", "instances/plan/llama3-70b-config3-faulty.yaml", 0.15),
    ("placement", "serpentine", "instances/placement/pl-sparse-24.yaml", 0.06),
    ("placement", "rowmajor", "instances/placement/pl-sparse-24.yaml", 0.06),
    ("placement", "glb", "instances/placement/pl-sparse-24.yaml", 0.06),
    ("placement", "local", "instances/placement/qaplib/tho40.yaml", 0.4),
    ("placement", "ga", "instances/placement/pl-sparse-24.yaml", 2.1),
    ("placement", "pb", "instances/placement/qaplib/tho40.yaml", 4.4),
    ("placement", "qpb", "instances/placement/qaplib/tho40.yaml", 1.4),
    ("placement", "rlt1", "instances/placement/pl-sparse-24.yaml", 2.7),
    ("placement", "bnb", "instances/placement/pl-sparse-24.yaml", 4.1),
    ("placement", "milp", "instances/placement/pl-sparse-16.yaml", 30),
    ("placement", "cpsat", "instances/placement/pl-sparse-16.yaml", 30),
    ("recompute", "dp", "instances/recompute/rc-g16s96l15u-pooled.yaml", 0.07),
    ("recompute", "uniform", "instances/recompute/rc-g16s96l15u-pooled.yaml", 0.15),
    ("recompute", "full", "instances/recompute/rc-g16s96l15u-pooled.yaml", 0.13),
    ("recompute", "none", "instances/recompute/rc-g16s96l15u-pooled.yaml", 0.15),
    ("recompute", "milp", "instances/recompute/rc-g16s96l15u-pooled-tight.yaml", 3.8),
    ("recompute", "cpsat", "instances/recompute/rc-g16s96l15u-pooled-tight.yaml", 3.2),
    ("mem_pair", "greedy", "instances/mem_pair/mp-g12x12-64s64h.yaml", 0.1),
    ("mem_pair", "lp", "instances/mem_pair/mp-g12x12-64s64h.yaml", 0.5),
    ("mem_pair", "milp", "instances/mem_pair/mp-g12x12-64s64h-k3-faults.yaml", 1.4),
    ("mem_pair", "cpsat", "instances/mem_pair/mp-g12x12-64s64h-k3-faults.yaml", 30),
    ("tatp", "tiles", "instances/tatp/tatp-8x8-n8.yaml", 0.07),
    ("tatp", "snake", "instances/tatp/tatp-8x8-n8.yaml", 0.07),
    ("tatp", "ga", "instances/tatp/tatp-8x8-f3-n4.yaml", 1.4),
    ("tatp", "cpsat", "instances/tatp/tatp-8x8-f3-n4.yaml", 0.6),
    ("tatp", "milp", "instances/tatp/tatp-8x8-f3-n4.yaml", 0.84),
    ("routing", "xy", "instances/routing/rt-8x8-f2-snake.yaml", 0.12),
    ("routing", "tcme", "instances/routing/rt-temp-6x9-snake-detour2.yaml", 0.22),
    ("routing", "milp", "instances/routing/rt-temp-6x9-snake-detour2.yaml", 1.3),
    ("routing", "cpsat", "instances/routing/rt-temp-6x9-snake-detour2.yaml", 1.8),
]
FAST_S = 0.5   # a method done this soon gets one run per mode; the others share the rest


# --- the schedule: every random choice drawn up front from random.Random(0) ---------------------------

@dataclass(frozen=True)
class Shot:
    index: int
    problem: str
    method: str
    instance: str
    mode: str
    first: str          # when the first Ctrl-C comes: before / after / during
    fraction: float     # before: the share of the expected loading time (past the interpreter's start)
    after_s: float      # after: seconds after the "solving" line (0-0.05)
    during_s: float     # during: seconds after the "solving" line
    gap_s: float        # twice: seconds between the two signals
    to_group: bool      # a terminal's Ctrl-C (the process group) or kill -INT PID

    @property
    def name(self) -> str:
        return f"{self.problem}/{self.method}"


def schedule(runs: int = RUNS, seed: int = 0) -> list[Shot]:
    rng = random.Random(seed)
    fast = [t for t in TARGETS if t[3] < FAST_S]
    slow = [t for t in TARGETS if t[3] >= FAST_S]
    counts = {t: len(MODES) for t in fast}
    left = runs - len(MODES) * len(fast)
    for k, t in enumerate(slow):
        counts[t] = left // len(slow) + (1 if k < left % len(slow) else 0)
    shots = []
    for (problem, method, instance, typical), n in counts.items():
        offset = rng.randrange(len(MODES))
        for k in range(n):
            mode = MODES[(offset + k) % len(MODES)]
            first = rng.choice(("before", "after", "during")) if mode == "twice" else mode
            shots.append({"problem": problem, "method": method, "instance": instance, "mode": mode, "first": first,
                          "fraction": rng.random(), "after_s": rng.uniform(0.0, 0.05),
                          "during_s": rng.uniform(0.05, max(0.06, min(3.0, 0.8 * typical))),
                          "gap_s": rng.uniform(0.02, 0.15), "to_group": rng.random() < 0.5})
    rng.shuffle(shots)
    return [Shot(index=i, **s) for i, s in enumerate(shots)]


# --- one run ------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    shot: Shot
    returncode: int | None = None
    sent: list[float] = field(default_factory=list)   # seconds since the process started, per signal
    solving_at: float | None = None   # seconds since start when "solving" showed
    phase: str = ""                   # where the first signal landed: loading / solving / finished
    latency: float | None = None      # first signal -> process gone
    wrote: bool = False
    certify_rc: int | None = None
    said_nothing_written: bool = False
    stderr: str = ""
    certify_out: str = ""
    failures: list[str] = field(default_factory=list)

    @property
    def plan_certified(self) -> bool:
        """certify exit 0; or 4 (the plan certified, only the solver's bound not re-derived: what an
        uninterrupted CP-SAT or MILP run gets too), with the plan found feasible."""
        return self.certify_rc == 0 or (self.certify_rc == 4 and "plan feasible" in self.certify_out)

    @property
    def interrupted(self) -> bool:
        """The signal reached the run while it worked (it did not finish normally first)."""
        return bool(self.sent) and self.returncode != 0

    def repro(self) -> str:
        """A command sending the signal(s) at the same moments (after the "solving" line when the
        first one landed in the solve, else after the process start)."""
        cmd = ["python", "tests/test_interrupt_stress.py", "--instance", self.shot.instance, "--method",
               self.shot.method]
        if self.phase == "solving" and self.solving_at is not None:
            cmd += ["--after", f"{self.sent[0] - self.solving_at:.3f}"]
        else:
            cmd += ["--at", f"{self.sent[0] if self.sent else 0.0:.3f}"]
        if len(self.sent) > 1:
            cmd += ["--gap", f"{self.sent[1] - self.sent[0]:.3f}"]
        if self.shot.to_group:
            cmd += ["--group"]
        return shlex.join(cmd)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def shoot(shot: Shot, workdir: Path, expected_start: float, interpreter_start: float,
          at_s: float | None = None) -> Outcome:
    """Run one shot in `workdir`; `at_s`: the first signal exactly this long after the start."""
    workdir.mkdir(parents=True)
    out = workdir / "out.json"
    o = Outcome(shot)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONSTARTUP", None)
    stdout = open(workdir / "stdout.txt", "w")  # noqa: SIM115  (closed once the process is gone)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "wafopt", "solve", str(ROOT / shot.instance), "--method", shot.method,
         "--out", str(out), "--time-limit", TIME_LIMIT, "--seed", "0"],
        cwd=workdir, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    solving = threading.Event()

    def drain():
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("solving ") and not solving.is_set():
                o.solving_at = time.monotonic() - started
                solving.set()

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()

    def send() -> bool:
        if proc.poll() is not None:
            return False
        (os.killpg if shot.to_group else os.kill)(proc.pid, signal.SIGINT)
        o.sent.append(time.monotonic() - started)
        return True

    # the first signal
    if at_s is not None or shot.first == "before":
        moment = at_s if at_s is not None else \
            interpreter_start + shot.fraction * max(0.05, expected_start - interpreter_start)
        solving.wait(max(0.0, started + moment - time.monotonic()))   # early only if "solving" shows first
    else:
        while not solving.wait(0.05):
            if proc.poll() is not None or time.monotonic() - started > 180:
                break
        if solving.is_set():
            delay = shot.after_s if shot.first == "after" else shot.during_s
            time.sleep(max(0.0, o.solving_at + delay - (time.monotonic() - started)))
    o.phase = "loading" if not solving.is_set() else "solving"
    sent_wall = time.time()
    sent_at = time.monotonic()
    if not send():
        o.phase = "finished"
    elif shot.mode == "twice":
        time.sleep(shot.gap_s)
        send()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        o.failures.append("hung: still running 60 s after Ctrl-C (killed)")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if o.sent:
        o.latency = time.monotonic() - sent_at
    o.returncode = proc.returncode
    stdout.close()
    deadline = time.monotonic() + 3.0
    while _alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(proc.pid):
        o.failures.append("left processes of its group running 3 s after it exited (killed)")
        os.killpg(proc.pid, signal.SIGKILL)
    drainer.join(5)
    o.stderr = "".join(lines)
    (workdir / "stderr.txt").write_text(o.stderr)
    o.said_nothing_written = bool(NOTHING_WRITTEN.search(o.stderr))
    o.wrote = out.is_file()
    if o.wrote:
        done = subprocess.run([sys.executable, "-m", "wafopt", "certify", str(out)], cwd=workdir, env=env,
                              check=False, capture_output=True, text=True, timeout=300)
        o.certify_rc, o.certify_out = done.returncode, done.stdout + done.stderr
    judge(o, out, sent_wall)
    return o


def judge(o: Outcome, out: Path, sent_wall: float) -> None:
    f = o.failures
    exit_text = ("died by SIGINT (a shell shows 130, but no exit 130 of wafopt's own)"
                 if o.returncode == -signal.SIGINT else f"exit {o.returncode}")
    if "Traceback" in o.stderr:
        frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', o.stderr)
        ours = [f"{path[path.rindex('/wafopt/') + 1:]}:{line} {fn}" for path, line, fn in frames if "/wafopt/" in path]
        if any(path.endswith("wafopt/cli/__init__.py") and fn == "main" for path, _, fn in frames):
            where = "in wafopt.cli.main()"
        elif ours:
            where = "while Python imported wafopt (before wafopt.cli.main() runs)"
        else:
            where = "in the interpreter's own start (site), before any wafopt code"
        innermost = f" (innermost wafopt frame {ours[-1]})" if ours else ""
        f.append(f"{o.stderr.strip().splitlines()[-1]} traceback {where}, {exit_text}, "
                 f"no 'nothing written'{innermost}")
    if o.latency is not None and o.latency > CTRL_C_S:
        f.append(f"stopped {o.latency:.2f} s after Ctrl-C (> {CTRL_C_S:g} s)")
    if o.wrote and o.said_nothing_written:
        f.append("wrote a solution yet said nothing was written")
    if o.wrote and not o.plan_certified:
        f.append(f"the written plan does not certify: certify exit {o.certify_rc}")
    if list(out.parent.glob("*.tmp")) or list(out.parent.glob(".*tmp")):
        f.append("left a temporary file")
    if (out.parent / "solutions").exists():
        f.append("wrote into ./solutions despite --out")
    if not o.sent:   # done before any signal: only a normal run is asked for
        if o.returncode != 0 or not o.wrote:
            f.append(f"finished without a signal: exit {o.returncode}, wrote {o.wrote}")
        return
    if o.returncode == 130:
        if not o.wrote and not o.said_nothing_written:
            f.append("exit 130 with no solution file and no plain 'nothing written' message")
    elif o.returncode == 0:
        # allowed only when the signal came after the work was done: the plan is on disk before it
        if not o.wrote:
            f.append("exit 0 after Ctrl-C without a solution file")
        elif out.stat().st_mtime > sent_wall + 0.02:
            f.append(f"Ctrl-C ignored: exit 0, the plan written {out.stat().st_mtime - sent_wall:.2f} s after it")
    elif "Traceback" not in o.stderr:   # (a traceback was reported with its exit above)
        f.append(f"{exit_text} instead of 130")


# --- the report ---------------------------------------------------------------------------------------

def summary(outcomes: list[Outcome]) -> str:
    rows = []
    by = defaultdict(list)
    for o in outcomes:
        by[(o.shot.problem, o.shot.method)].append(o)
    head = (f"{'problem':10s} {'method':10s} {'runs':>4s}  {'exit codes':22s} {'130':>4s} {'plans':>5s} "
            f"{'certif':>6s} {'claim':>5s} {'nothing':>7s} {'done1st':>7s} {'maxlat':>7s} {'fail':>4s}")
    rows.append(head)
    rows.append("-" * len(head))

    def row(problem, method, group):
        codes = Counter(o.returncode for o in group)
        lat = [o.latency for o in group if o.latency is not None and o.returncode != 0]
        return (f"{problem:10s} {method:10s} {len(group):4d}  "
                f"{' '.join(f'{c}x{n}' for c, n in sorted(codes.items(), key=lambda kv: str(kv[0]))):22s} "
                f"{sum(o.returncode == 130 for o in group):4d} {sum(o.wrote for o in group):5d} "
                f"{sum(o.certify_rc == 0 for o in group):6d} {sum(o.certify_rc == 4 and o.plan_certified for o in group):5d} "
                f"{sum(o.said_nothing_written for o in group):7d} "
                f"{sum(o.returncode == 0 for o in group):7d} "
                f"{(f'{max(lat):.2f}s' if lat else '-'):>7s} {sum(bool(o.failures) for o in group):4d}")

    problems = list(dict.fromkeys(o.shot.problem for o in outcomes))
    for problem in sorted(problems, key=[t[0] for t in TARGETS].index):
        keys = [k for k in by if k[0] == problem]
        for key in sorted(keys, key=[(t[0], t[1]) for t in TARGETS].index):
            rows.append(row(*key, by[key]))
        rows.append(row(problem, "(all)", [o for k in keys for o in by[k]]))
        rows.append("")
    rows.append(row("TOTAL", "", outcomes))
    modes = Counter((o.shot.mode, o.phase) for o in outcomes)
    rows.append("signals landed (mode/phase): " + ", ".join(f"{m}/{p} {n}" for (m, p), n in sorted(modes.items())))
    rows.append("columns: 130 = exit 130; plans = solution files written; certif = certify exit 0; claim = certify exit 4 (plan "
                "certified, the solver's bound only claimed, as without Ctrl-C); nothing = "
                "'nothing written' said; done1st = exit 0 (finished before the signal took effect); maxlat = "
                "slowest stop after the (first) Ctrl-C of an interrupted run")
    return "\n".join(rows)


def failure_report(outcomes: list[Outcome]) -> str:
    kinds = defaultdict(list)
    for o in outcomes:
        for f in o.failures:
            kinds[re.sub(r"[\d.]+ s", "N s", re.sub(r" \(innermost wafopt frame [^)]*\)", "", f))].append(o)
    parts = []
    for kind, group in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        parts.append(f"\n=== {len(group)} run(s): {kind}")
        parts.append("    runs: " + ", ".join(f"#{o.shot.index} {o.shot.name} {o.shot.mode}" for o in group))
        o = group[0]
        at = ", ".join(f"{t:.3f}" for t in o.sent)
        solving = "-" if o.solving_at is None else f"{o.solving_at:.3f}"
        target = "group" if o.shot.to_group else "process"
        latency = "-" if o.latency is None else f"{o.latency:.2f}"
        parts.append(f"    first: #{o.shot.index} {o.shot.name} on {o.shot.instance}: mode {o.shot.mode} "
                     f"(first at {o.shot.first}), signal(s) to the {target} at {at} s after start, "
                     f"'solving' at {solving} s, landed {o.phase}, exit {o.returncode}, latency {latency} s")
        parts.append(f"    reproduce: {o.repro()}")
        parts.append(f"    rerun this schedule entry: WAFOPT_STRESS_PICK={o.shot.index} "
                     f"pytest -m slow -n 0 -s tests/test_interrupt_stress.py")
        parts.append("    stderr tail:\n      " + "\n      ".join(o.stderr.strip().splitlines()[-8:]))
        if o.certify_out and not o.plan_certified:
            parts.append("    certify:\n      " + "\n      ".join(o.certify_out.strip().splitlines()[-8:]))
    return "\n".join(parts)


def interpreter_start_s() -> float:
    """Seconds Python needs to start (site and the editable-install finder) before any wafopt code:
    'before' moments are drawn after it (a Ctrl-C inside Python's own start is no run of wafopt)."""
    times = []
    for _ in range(3):
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.monotonic() - t)
    return max(times)


def test_ctrl_c_at_random_moments_always_keeps_or_plainly_declines_the_plan(tmp_path, capsys):
    shots = schedule()
    if os.environ.get("WAFOPT_STRESS_PICK"):
        picked = {int(x) for x in os.environ["WAFOPT_STRESS_PICK"].split(",")}
        shots = [s for s in shots if s.index in picked]
    elif os.environ.get("WAFOPT_STRESS_RUNS"):
        shots = shots[:int(os.environ["WAFOPT_STRESS_RUNS"])]
    interpreter = interpreter_start_s()
    starts: dict[str, list[float]] = defaultdict(lambda: [2.0])   # seconds to "solving", per problem
    outcomes = []
    began = time.monotonic()
    for shot in shots:
        expected = statistics.median(starts[shot.problem][-9:])
        o = shoot(shot, tmp_path / f"run{shot.index:03d}", expected, interpreter)
        if o.solving_at is not None:
            starts[shot.problem].append(o.solving_at)
        outcomes.append(o)
        with capsys.disabled():
            print(f"#{shot.index:3d} {shot.name:20s} {shot.mode:6s}/{shot.first:6s} landed {o.phase:8s} "
                  f"exit {o.returncode} lat {o.latency if o.latency is None else round(o.latency, 2)} "
                  f"wrote {o.wrote} certify {o.certify_rc} nothing {o.said_nothing_written} "
                  f"{'FAIL: ' + '; '.join(o.failures) if o.failures else 'ok'}", flush=True)
    interrupted = sum(o.interrupted for o in outcomes)
    table = summary(outcomes) + (f"\ninterrupted (the signal reached a working run): {interrupted} of "
                                 f"{len(outcomes)}; finished first: {len(outcomes) - interrupted}")
    report = failure_report(outcomes)
    with capsys.disabled():
        print(f"\n{len(outcomes)} runs in {time.monotonic() - began:.0f} s "
              f"(interpreter start {interpreter:.2f} s)\n{table}\n{report}", flush=True)
    failed = [o for o in outcomes if o.failures]
    too_few = len(shots) == RUNS and interrupted < MIN_INTERRUPTED
    problems = []
    if failed:
        problems.append(f"{len(failed)} of {len(outcomes)} runs broke the Ctrl-C promise:\n{report}")
    if too_few:
        problems.append(f"only {interrupted} of {RUNS} runs were interrupted (< {MIN_INTERRUPTED}): the solves "
                        "end too soon for the test")
    assert not problems, "\n\n".join(problems) + f"\n\n{table}"

def main() -> int:
    """Reproduce one run: `python tests/test_interrupt_stress.py --instance I --method M --after S`."""
    import argparse
    import tempfile

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--instance", required=True)
    p.add_argument("--method", required=True)
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--after", type=float, help="Ctrl-C this many seconds after the 'solving' line")
    when.add_argument("--at", type=float, help="Ctrl-C this many seconds after the process start")
    p.add_argument("--gap", type=float, help="a second Ctrl-C this many seconds after the first")
    p.add_argument("--group", action="store_true", help="signal the process group (a terminal's Ctrl-C)")
    a = p.parse_args()
    problem = next((t[0] for t in TARGETS if t[2] == a.instance), "?")
    shot = Shot(0, problem, a.method, a.instance, "twice" if a.gap is not None else "during",
                "during" if a.after is not None else "before", 0.0, 0.0, a.after or 0.0, a.gap or 0.0, a.group)
    o = shoot(shot, Path(tempfile.mkdtemp(prefix="stress-repro-")) / "run", 0.0, 0.0, a.at)
    print(o.stderr, end="")
    print(f"signals at {', '.join(f'{t:.3f}' for t in o.sent)} s after start ('solving' at {o.solving_at}); "
          f"exit {o.returncode}; latency {o.latency}; wrote {o.wrote}; certify {o.certify_rc}")
    if o.certify_out and not o.plan_certified:
        print(o.certify_out, end="")
    print("FAIL: " + "; ".join(o.failures) if o.failures else "ok")
    return 1 if o.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
