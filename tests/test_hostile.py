"""Hostile instance files: every one ends in exit 2 with one short message naming the field, or
validates and then solves to a solution that certifies. Never a traceback, a hang or a flood.

The property suite mutates the shipped instances of every problem kind (keys deleted and
renamed, wrong types, huge, negative, zero and non-finite numbers, deep nesting, aliases,
duplicate keys, odd bytes) with a fixed seed; `-m slow` runs the long profile. Explicit tests
cover each input limit (wafopt.core.limits).
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wafopt.cli import main
from wafopt.core import limits
from wafopt.core.errors import InstanceError
from wafopt.core.files import parse_text
from wafopt.problems import load, parse_instance

ROOT = Path(__file__).resolve().parent.parent
# libyaml's safe loader: the same documents as yaml.safe_load, several times faster at collection
SHIPPED = {str(p): yaml.load(p.read_text(), Loader=yaml.CSafeLoader)
           for p in sorted((ROOT / "instances").rglob("*.yaml"))}
BASES = {problem: [p for p, data in SHIPPED.items() if data.get("problem") == problem]
         for problem in ("plan", "placement", "recompute", "mem_pair", "tatp", "routing")}
CHEAP = {"plan": "megatron", "placement": "serpentine", "recompute": "full", "mem_pair": "greedy",
         "tatp": "snake", "routing": "xy"}
MESSAGE_CHARS = 500
EXAMPLE_SECONDS = 3.0
FAST_EXAMPLES = 350   # per problem kind: 2,100 in the default run
SLOW_EXAMPLES = 3400  # per problem kind: 20,400 with -m slow


class Hang(BaseException):
    """Raised by the alarm inside a hung example (a BaseException: the CLI does not catch it)."""


def _on_alarm(signum, frame):
    raise Hang()


def run_cli(*argv: str) -> tuple[int, str]:
    """wafopt in-process: (exit code, stdout + stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv))
    return code, out.getvalue()


def assert_short_message(code: int, text: str) -> None:
    assert "Traceback" not in text and "internal error" not in text, text[-2000:]
    for line in text.splitlines():
        assert len(line) <= MESSAGE_CHARS, f"{len(line)} characters: {line[:300]}..."


SOLVED: dict[str, str] = {}  # instance content (without its free text) -> outcome of solve + certify


def content_key(path: Path) -> str:
    """What solving depends on: the document without name, description and source."""
    data = load(path).data
    return json.dumps({k: v for k, v in data.items() if k not in ("name", "description", "source")},
                      sort_keys=True, default=repr)


def check_file(path: Path, problem: str, tmp: Path) -> str:
    """Validate, and for a valid file solve cheaply and certify. Returns what happened."""
    code, text = run_cli("validate", str(path))
    assert_short_message(code, text)
    if code == 2:
        assert text.startswith("invalid  ") and ": " in text, text  # names the file and the field
        return "invalid"
    assert code == 0, text
    key = content_key(path)
    if key not in SOLVED:  # the same instance solves the same way: solve each one once
        SOLVED[key] = solve_and_certify(path, problem, tmp)
    return SOLVED[key]


def solve_and_certify(path: Path, problem: str, tmp: Path) -> str:
    out = tmp / "solution.json"
    code, text = run_cli("solve", str(path), "--method", CHEAP[problem], "--time-limit", "1", "--quiet",
                         "--out", str(out))
    assert_short_message(code, text)
    if code == 2 and "needs a fixed layout" in text:   # a valid scenario, but the method needs `parallel:`
        return "no layout"
    assert code in (0, 3), text  # a plan, or none exists / none found (said in one line)
    if code == 3:
        return "no plan"
    code, text = run_cli("certify", str(out))
    assert_short_message(code, text)
    if code == 5 and "known optimum" in text:  # a mutated file whose recorded optimum is now false
        return "false known optimum"
    assert code in (0, 4), text
    return "solved"


# --- mutations -------------------------------------------------------------------------------

HOSTILE_VALUES = [
    0, -1, 1, 2, -0.5, 0.5, 1e-308, 5e-324, 1e308, -1e308, float("nan"), float("inf"), float("-inf"),
    10**40, -(10**40), 2**53 + 1, 2**63, 10**29, 1e18, 1e19, 9.0e15, True, False, None, "8", "", "x" * 5000,
    "\u00e9\u4e2d\U0001f600", [], {}, [[[[[[1]]]]]], [0] * 3, [[0, 0], [1, 1]], {"preset": "watos-config3"},
    {"a": 1}, "watos-config1", "gpt3-6.7b", 64, 4096, 4097, 256, 257, 100000, 3.5, "minimal", {"detour": 99},
]


def paths_of(data, prefix=()):
    """Every path to a value of the document, containers first."""
    yield prefix
    if isinstance(data, dict):
        for key, value in data.items():
            yield from paths_of(value, prefix + (key,))
    elif isinstance(data, list):
        for k, value in enumerate(data[:8]):  # long lists: their first items stand for the rest
            yield from paths_of(value, prefix + (k,))


def get(data, path):
    for part in path:
        data = data[part]
    return data


def mutate(data, op: str, pick: int, value):
    """Apply one mutation to a copy of the document; paths are chosen by `pick`."""
    data = json.loads(json.dumps(data))  # a deep copy, 10x faster than copy.deepcopy
    paths = [p for p in paths_of(data) if p]
    path = paths[pick % len(paths)]
    parent, key = get(data, path[:-1]), path[-1]
    old = parent[key]
    if op == "delete":
        del parent[key]
    elif op == "rename" and isinstance(parent, dict):
        parent[f"{key}_renamed" if pick % 2 else f"{key} "] = parent.pop(key)
    elif op == "replace":
        parent[key] = copy.deepcopy(value)
    elif op == "scale" and isinstance(old, (int, float)) and not isinstance(old, bool):
        factor = [2, 10, 1000, 10**6, -1, 0.5, 1e-9, 1e12][pick % 8]
        parent[key] = old * factor  # an int times a float becomes a float: a wrong type for counts
    elif op == "nudge" and isinstance(old, (int, float)) and not isinstance(old, bool):
        parent[key] = old + [1, -1, 0.5][pick % 3]
    elif op == "retype":
        parent[key] = str(old) if not isinstance(old, str) else [old]
    elif op == "grow" and isinstance(old, list) and old:
        parent[key] = old + old[: 1 + pick % len(old)]
    elif op == "shrink" and isinstance(old, list) and old:
        parent[key] = old[: pick % len(old)]
    elif op == "wrap":
        parent[key] = [old] if pick % 2 else {"value": old}
    return data


RAW_EDITS = ("none", "none", "dup_key", "bomb", "deep", "bad_utf8", "surrogate", "truncate", "flip",
             "nul", "anchor", "tabs")


def dump(data, fmt: str, raw_edit: str, pick: int) -> bytes:
    """The document as YAML or JSON bytes, with one optional byte-level edit."""
    if fmt == "json":
        text = json.dumps(data)
    else:
        text = yaml.dump(data, Dumper=yaml.CSafeDumper, default_flow_style=None, sort_keys=False,
                         allow_unicode=True, width=10**6)
    raw = text.encode("utf-8", "surrogatepass")
    first_key = next(iter(data), "problem") if isinstance(data, dict) and data else "problem"
    if raw_edit == "dup_key":
        raw = (raw[:-1] + f', "{first_key}": 1}}'.encode()) if fmt == "json" and raw.endswith(b"}") else \
            raw + f"\n{first_key}: 1\n".encode()
    elif raw_edit == "bomb" and fmt == "yaml":
        bomb = "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
            f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 10)}]\n" for k in range(1, 9))
        raw = bomb.encode() + raw
    elif raw_edit == "deep":
        depth = 60 + pick % 200
        nested = "[" * depth + "1" + "]" * depth
        raw = (raw[:-1] + f', "deep": {nested}}}'.encode()) if fmt == "json" and raw.endswith(b"}") else \
            raw + f"\ndeep: {nested}\n".encode()
    elif raw_edit == "bad_utf8":
        k = pick % max(1, len(raw))
        raw = raw[:k] + bytes([0xff, 0xc3]) + raw[k:]
    elif raw_edit == "surrogate":
        raw = raw + (b'\nname: "\\ud800x"\n' if fmt == "yaml" else b"")
        if fmt == "json" and raw.endswith(b"}"):
            raw = raw[:-1] + b', "name": "\\udc00"}'
    elif raw_edit == "truncate":
        raw = raw[: pick % max(1, len(raw))]
    elif raw_edit == "flip" and raw:
        k = pick % len(raw)
        raw = raw[:k] + bytes([raw[k] ^ (1 << (pick % 7))]) + raw[k + 1:]
    elif raw_edit == "nul":
        k = pick % max(1, len(raw))
        raw = raw[:k] + b"\x00" + raw[k:]
    elif raw_edit == "anchor" and fmt == "yaml":
        raw = raw.replace(b"\nmesh:", b"\nx_mesh: &m {rows: 2, cols: 2}\nmesh:", 1)
    elif raw_edit == "tabs":
        raw = raw.replace(b"  ", b"\t", 1)
    return raw


MUTATION = st.tuples(st.sampled_from(["delete", "rename", "replace", "replace", "scale", "nudge", "retype",
                                      "grow", "shrink", "wrap"]),
                     st.integers(0, 10**6), st.sampled_from(HOSTILE_VALUES))
EXAMPLE = st.tuples(st.integers(0, 10**6), st.lists(MUTATION, min_size=1, max_size=3),
                    st.sampled_from(["yaml", "yaml", "json"]), st.sampled_from(RAW_EDITS), st.integers(0, 10**6))


def hostile_example(problem: str, example, tmp: Path) -> str:
    base_pick, mutations, fmt, raw_edit, pick = example
    data = SHIPPED[BASES[problem][base_pick % len(BASES[problem])]]
    for op, k, value in mutations:
        data = mutate(data, op, k, value)
    path = tmp / f"hostile.{fmt}"
    path.write_bytes(dump(data, fmt, raw_edit, pick))
    # CPU time is held to EXAMPLE_SECONDS (wall time on a shared machine measures the neighbours);
    # a wall-clock alarm turns a hang, which burns no CPU, into a failure instead of a stuck suite
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 10 * EXAMPLE_SECONDS)
    start = time.process_time()
    try:
        outcome = check_file(path, problem, tmp)
    except Hang:
        pytest.fail(f"{problem} example hangs: {example}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.process_time() - start
    assert elapsed < EXAMPLE_SECONDS, f"{elapsed:.1f} s of CPU for {example}"
    return outcome


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """Import every solver and evaluator once, so that no example pays the import time, and
    build the CLI's parser once (argparse takes 20 ms to build it, more than most examples).
    The patch goes where main looks the builder up: wafopt.cli.app, not the package's re-export."""
    import wafopt.cli.app

    parser = wafopt.cli.app.build_parser()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wafopt.cli.app, "build_parser", lambda: parser)
        for problem, paths in BASES.items():
            check_file(Path(paths[0]), problem, tmp_path_factory.mktemp(problem))
        yield


def _property(examples: int):
    @pytest.mark.parametrize("problem", list(BASES))
    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.data_too_large])
    @given(example=EXAMPLE)
    def check(problem, example, tmp_path, warm):
        hostile_example(problem, example, tmp_path)
    return check


test_hostile_instances = _property(FAST_EXAMPLES)
test_hostile_instances_long = pytest.mark.slow(_property(SLOW_EXAMPLES))


# --- each limit, explicitly ---------------------------------------------------------------------

def refused(raw: bytes, kind: str = "yaml") -> str:
    """The reader's message for `raw` (it must refuse it)."""
    with pytest.raises(InstanceError) as err:
        parse_text(raw, kind, "f")
    message = str(err.value)
    assert len(message) <= limits.MAX_MESSAGE_CHARS + 20, message
    return message


def cli_refuses(tmp_path: Path, raw: bytes, name: str = "bad.yaml") -> str:
    """`wafopt validate` on a file: exit 2, one short line naming the file; returns the line."""
    path = tmp_path / name
    path.write_bytes(raw)
    code, text = run_cli("validate", str(path))
    assert code == 2, text
    assert_short_message(code, text)
    assert text.count("\n") == 1 and str(path) in text, text
    return text


MESH = b"problem: tatp\nmesh: {rows: 4, cols: 4}\ngroup_size: 4\ngroups: 2\n"


def test_alias_bomb_stops_at_the_value_budget(tmp_path):
    bomb = "lol0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"lol{k}: &l{k} [{', '.join([f'*l{k - 1}'] * 10)}]\n" for k in range(1, 10))  # 10^10 values
    start = time.perf_counter()
    line = cli_refuses(tmp_path, bomb.encode() + MESH)
    assert time.perf_counter() - start < 5  # stops as soon as the budget is spent, long before 10^10
    assert f"more than {limits.MAX_YAML_NODES:,} values" in line and "lol" in line
    # a few aliases within the budget are fine: anchors reuse a mapping
    data = parse_text(b"a: &m {rows: 2, cols: 2}\nb: *m\nc: [*m, *m]\n", "yaml", "f")
    assert data["c"] == [{"rows": 2, "cols": 2}] * 2


def test_recursive_alias_is_refused():
    assert "recursive" in refused(b"a: &x [1, *x]\n")


@pytest.mark.parametrize("kind", ["yaml", "json"])
def test_nesting_deeper_than_64_levels(kind):
    def nested(levels):  # the root mapping is level 1
        inner = "[" * (levels - 2) + "1" + "]" * (levels - 2)
        return (f'{{"a": {inner}}}' if kind == "json" else f"a: {inner}\n").encode()

    assert parse_text(nested(limits.MAX_DEPTH), kind, "f")["a"]
    assert f"a[0][0][0][0][0]...[0][0][0][0]: nesting deeper than {limits.MAX_DEPTH} levels" in \
        refused(nested(limits.MAX_DEPTH + 1), kind)
    assert "nesting deeper" in refused(nested(100_000), kind)  # no RecursionError, no crash


@pytest.mark.parametrize("raw, kind", [
    (b"mesh: {rows: 1, rows: 2}\n", "yaml"),
    (b"mesh:\n  rows: 1\n  cols: 2\n  rows: 3\n", "yaml"),
    (b'{"mesh": {"rows": 1, "rows": 2}}', "json"),
])
def test_duplicate_keys(raw, kind):
    assert "mesh.rows: duplicate key 'rows'" in refused(raw, kind)


def test_duplicate_key_in_a_file(tmp_path):
    assert "groups: duplicate key 'groups'" in cli_refuses(tmp_path, MESH + b"groups: 3\n")


@pytest.mark.parametrize("literal", ["1" * 31, "9" * 5000, "-" + "1" * 31, "0x" + "f" * 40, "1:" * 40 + "1"])
def test_integers_longer_than_30_digits(literal):
    # 5000 digits would hit Python's own int-from-string limit (4300 digits) as a ValueError
    for raw, kind in ((f"mesh: {{rows: {literal}}}\n", "yaml"), (f'{{"mesh": {{"rows": {literal}}}}}', "json")):
        if kind == "json" and not literal.lstrip("-").isdigit():
            continue
        message = refused(raw.encode(), kind)
        assert message.startswith("f: mesh.rows: integer") and "30" in message
    assert parse_text(f"n: {'9' * 30}\n".encode(), "yaml", "f")["n"] == int("9" * 30)


@pytest.mark.parametrize("raw, kind, shown", [
    (b"a: {b: .nan}\n", "yaml", "a.b: must be a finite number, got nan"),
    (b"a: [1, .inf]\n", "yaml", "a[1]: must be a finite number, got inf"),
    (b"a: [1, -.Inf]\n", "yaml", "a[1]: must be a finite number, got -inf"),
    (b"a: 1e999\n", "yaml", "a: must be a finite number, got inf"),
    (b'{"a": NaN}', "json", "a: must be a finite number, got NaN"),
    (b'{"a": [-Infinity]}', "json", "a[0]: must be a finite number, got -Infinity"),
    (b'{"a": [0.5, 1e400]}', "json", "a[1]: must be a finite number, got inf"),
])
def test_non_finite_numbers(raw, kind, shown):
    assert shown in refused(raw, kind)


def test_non_utf8_and_lone_surrogates(tmp_path):
    assert "not valid UTF-8 in field 'name': byte 0xff at line 2" in cli_refuses(
        tmp_path, b"problem: tatp\nname: caf\xc3\xa9\xff\n")
    assert "name: not valid Unicode (lone surrogate)" in refused(b'{"name": "a\\ud800b"}', "json")
    assert "not valid UTF-8" in refused(b"name: \xed\xa0\x80\n")  # a surrogate encoded in UTF-8 bytes
    assert "malformed YAML" in refused(b'name: "\\ud800"\n')      # libyaml refuses the escape itself
    assert "control characters" in refused(b"name: a\x00b\n")


@pytest.mark.parametrize("raw", [b"", b"# a comment only\n", b"---\n"])
def test_an_empty_file_is_called_empty(tmp_path, raw):
    assert "the file is empty" in cli_refuses(tmp_path, raw)


def test_oversized_file(tmp_path):
    huge = b"problem: tatp\ndescription: '" + b"x" * limits.MAX_FILE_BYTES + b"'\n"
    assert f"exceeds the limit of {limits.MAX_FILE_BYTES:,} bytes" in cli_refuses(tmp_path, huge)


def test_only_plain_types():
    assert "name: date values are not allowed" in refused(b"name: 2024-01-01\n")
    assert "a: set values are not allowed" in refused(b"a: !!set {x, y}\n")
    assert "key 1 is not a string" in refused(b"1: x\n")
    assert "malformed YAML" in refused(b"a: !!python/object:os.system x\n")


def kernel(problem: str, **fields) -> dict:
    """A small valid instance of a kernel problem with `fields` replaced (None deletes)."""
    base = {
        "placement": {"mesh": {"rows": 2, "cols": 2}, "flows": [[0, 1, 5.0], [1, 2, 3.0]]},
        "recompute": {"microbatches": 4, "units": [{"name": "a", "mem": 1.0, "recompute": 0.1}],
                      "stages": [{"layers": 2, "inflight": 2, "state": 4.0, "capacity": 10.0, "compute": 1.0}]},
        "mem_pair": {"mesh": {"rows": 2, "cols": 2}, "senders": [{"die": [0, 0], "overflow": 2.0}],
                     "helpers": [{"die": [1, 1], "spare": 3.0}]},
        "tatp": {"mesh": {"rows": 4, "cols": 4}, "group_size": 4, "groups": 2},
        "routing": {"mesh": {"rows": 3, "cols": 3}, "flows": [{"src": [0, 0], "dst": [2, 2], "volume": 1.0}]},
    }[problem]
    data = {"problem": problem, **copy.deepcopy(base)}
    for key, value in fields.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return data


def message_of(data: dict) -> str:
    with pytest.raises(InstanceError) as err:
        parse_instance(data)
    message = str(err.value)
    assert len(message) <= limits.MAX_MESSAGE_CHARS, message
    return message


@pytest.mark.parametrize("data, shown", [
    (kernel("tatp", mesh={"rows": 257, "cols": 1}), "mesh.rows: must be <= 256 (limit), got 257"),
    (kernel("tatp", mesh={"rows": 65, "cols": 64}), "65 x 64 = 4,160 dies, more than the limit of 4,096"),
    (kernel("tatp", mesh={"rows": 10**12, "cols": 10**12}), "mesh.rows: must be <= 256 (limit)"),
    (kernel("placement", stages=limits.MAX_STAGES + 1), "stages: must be <= 1,024 (limit)"),
    (kernel("recompute", stages=[{"layers": 1, "inflight": 1, "state": 0, "capacity": 1, "compute": 1}] * 1025),
     "stages: must have at most 1,024 items (limit)"),
    (kernel("recompute", microbatches=10**7), "microbatches: must be <= 1,000,000 (limit)"),
    (kernel("routing", paths={"detour": 50}), "paths.detour: must be <= 8 (limit), got 50"),
    (kernel("placement", flows=[[0, 1, 2.0**53 + 2]]), "flows[0]: volume must be <= 2^53 (limit)"),
    (kernel("placement", flows=None, flow_matrix=[[0, 2**54], [0, 0]]), "flow_matrix[0][1]: must be <= 9.0072e+15"),
    (kernel("placement", flows=[[0, 1, -1]]), "flows[0]: volume must be a finite number >= 0, got -1"),
    (kernel("routing", flows=[{"src": [0, 0], "dst": [1, 1], "volume": 0}]), "flows[0].volume: must be positive, got 0"),
    (kernel("mem_pair", chunk=0), "chunk: must be positive, got 0"),
    (kernel("mem_pair", chunk=1e-300), "instance: senders[0].overflow / chunk = 2e+300 chunks, more than the limit "
                                       "of 2^40: use a larger chunk"),
    (kernel("mem_pair", helpers=[{"die": [1, 1], "spare": 1e308}]), "helpers[0].spare: must be <= 1e+18 (limit)"),
    (kernel("recompute", stages=[{"layers": 1, "inflight": 1, "state": 0, "capacity": 0, "compute": 1}]),
     "stages[0].capacity: must be positive, got 0"),
    (kernel("recompute", stages=[{"layers": 1, "inflight": 1, "state": 1e308, "capacity": 1, "compute": 1}]),
     "stages[0].state: must be <= 1e+18 (limit)"),
    (kernel("routing", mesh={"rows": 3, "cols": 3, "link_bandwidth": 1e-300}),
     "mesh.link_bandwidth: must be at least 1e-09"),
    (kernel("tatp", group_size=True), "group_size: must be an integer, got True"),
    (kernel("tatp", group_size="4"), "group_size: must be an integer, got '4'"),
    (kernel("tatp", name="x" * 5000), "name: must be at most 200 characters (limit)"),
    (kernel("tatp", colour="red"), "colour: unknown key 'colour' (allowed: description, group_size, groups, "),
    (kernel("routing", paths="shortest"), "paths: must be 'minimal' or {detour: k}, got 'shortest'"),
    (kernel("recompute", mode="shared"), "mode: must be one of local, pooled; got 'shared'"),
    (kernel("placement", tile=[0, 1]), "tile: expected a tile shape [h, w] of two positive integers, got [0, 1]"),
])
def test_kernel_limits_name_the_field(data, shown):
    assert shown in message_of(data)


SCENARIO = {"problem": "plan", "wafer": "watos-config3", "model": "gpt3-6.7b",
            "training": {"seq": 2048, "micro_batch": 1, "global_batch": 64}, "parallel": {"tp": 4, "pp": 4, "dp": 1}}


@pytest.mark.parametrize("change, shown", [
    ({"wafer": {"preset": "watos-config3", "rows": 300}}, "wafer.rows: must be <= 256 (limit), got 300"),
    ({"wafer": {"preset": "watos-config3", "rows": 100, "cols": 100}}, "100 x 100 = 10,000 dies, more than the limit"),
    ({"wafer": {"preset": "watos-config3", "dram_gb": 1e300}}, "wafer.dram_gb: must be <= 1e+09 (limit)"),
    ({"wafer": {"preset": "watos-config3", "link_bw_tbps": 1e-300}}, "wafer.link_bw_tbps: must be >= 1e-09 (limit)"),
    ({"model": {"preset": "gpt3-6.7b", "layers": 10**8}}, "model.layers: must be <= 10,000 (limit)"),
    ({"model": {"preset": "gpt3-6.7b", "hidden": 10**12}}, "model.hidden: must be <= 1,000,000,000 (limit)"),
    ({"model": {"preset": "gpt3-6.7b", "hidden": 10**40}}, "model.hidden: integer out of range (|n| must be < 10^30)"),
    ({"training": {"seq": 2048.5, "micro_batch": 1, "global_batch": 64}}, "training.seq: must be an integer, got 2048.5"),
    ({"parallel": {"tp": 5000, "pp": 1}}, "parallel.tp: must be <= 4,096 (limit), got 5000"),
    ({"parallel": {"tp": 4, "pp": 4, "dp": 1, "ep": 2}}, "parallel.ep: unknown key 'ep'"),
    ({"training": {"seq": 2048, "micro_batch": 1, "globl_batch": 64}}, "training.globl_batch: unknown key 'globl_batch'"),
    ({"wafer": 5}, "wafer: must be a string or a mapping, got 5"),
])
def test_scenario_limits_name_the_field(change, shown):
    assert shown in message_of({**SCENARIO, **change})


# --- the per-die fit check ---------------------------------------------------------------------

TINY = {"problem": "plan",
        "wafer": {"name": "tiny", "rows": 1, "cols": 4, "die_tflops": 100, "dram_gb": 1.0, "dram_bw_tbps": 2.0,
                  "link_bw_tbps": 1.0, "link_latency_us": 0.0},
        "model": {"name": "tiny", "layers": 4, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 1000},
        "training": {"seq": 2048, "micro_batch": 1, "global_batch": 8}, "parallel": {"tp": 1, "pp": 2, "dp": 1}}


def tiny(dram_gb: float, **model) -> dict:
    data = copy.deepcopy(TINY)
    data["wafer"]["dram_gb"] = dram_gb
    data["model"].update(model)
    return data


def test_a_stage_whose_state_overflows_its_own_dies_is_refused_even_if_the_wafer_pools_enough():
    # a large vocabulary puts the embedding on stage 0 and the LM head on stage 2: the middle stage
    # is light, so the pooled DRAM suffices, but stage 0's model state alone exceeds one die
    data = tiny(0.8, vocab=200_000)
    data["parallel"]["pp"] = 3
    data["training"]["seq"] = 128
    work = parse_instance({**data, "wafer": {**data["wafer"], "dram_gb": 100}}).instance.workload()
    assert sum(s.full_recompute_bytes() for s in work.stages) <= 3 * 0.8e9  # the pooled check alone passes
    assert work.stages[0].state_bytes > 0.8e9
    shown = message_of(data)
    assert "parallel: model tiny cannot fit with tp=1, pp=3, dp=1 even with full recomputation: stage 0's " \
           "model state and working memory" in shown and "offloading moves only activation checkpoints" in shown


def test_a_layout_that_fits_only_by_offloading_validates_and_gcmr_realizes_it(tmp_path):
    from wafopt.core.budget import SolveOptions
    from wafopt.run.runner import run

    loaded = parse_instance(tiny(0.212))  # stage 1 needs 0.214 GB per die with full recomputation
    work = loaded.instance.workload()
    assert max(s.full_recompute_bytes() for s in work.stages) > 0.212e9
    assert run(loaded, "megatron", SolveOptions(quiet=True)).plan is None
    solution = run(loaded, "gcmr", SolveOptions(quiet=True, time_limit=10))
    assert solution.status == "feasible" and solution.evaluation["feasible"]
    assert sum(o["bytes"] for o in solution.plan["offload"]) > 0


def test_a_pooled_shortfall_is_refused():
    # a 1 x 2 wafer: no idle die could take checkpoints, so the two stages' dies must hold them
    data = tiny(0.15)
    data["wafer"]["cols"] = 2
    assert "even with full recomputation: it needs" in message_of(data)


def test_idle_dies_count_toward_the_pooled_memory():
    # the same layout on a 1 x 4 wafer: checkpoints may go to the two idle dies, so it is not
    # refused; at 0.241 GB the planner realizes it (offloads to the idle dies)
    import wafopt

    assert parse_instance(tiny(0.15)).instance.parallel.dies == 2
    loaded = parse_instance(tiny(0.241, layers=8))
    result = wafopt.solve(loaded, "plan", time_limit=30)
    assert result.status.value in ("feasible", "optimal")
    layout_dies = {tuple(d) for pipe in result.plan["pipelines"] for stage in pipe for d in stage}
    assert any(tuple(o["helper"]) not in layout_dies for o in result.plan["offload"])


def splits(layers: int, stages: int):
    for cuts in itertools.combinations(range(1, layers), stages - 1):
        bounds = (0, *cuts, layers)
        yield [bounds[k + 1] - bounds[k] for k in range(stages)]


@pytest.mark.parametrize("layers, pp, vocab", [(4, 2, 1000), (6, 3, 50_000), (8, 2, 1000), (7, 3, 200_000)])
def test_the_fit_test_tries_every_layer_split(layers, pp, vocab):
    # the DP over splits agrees with trying every split on a sweep of capacities, and inside the
    # window where only an uneven split fits
    from dataclasses import replace

    from wafopt.costmodel.scenario import Choice
    from wafopt.problems.plan.instance import _even_split_shortfall, _some_split_fits

    data = tiny(1000, vocab=vocab, layers=layers)
    data["parallel"]["pp"] = pp
    data["wafer"]["cols"] = pp           # no idle dies
    roomy = parse_instance(data).instance

    def at(gb):
        return replace(roomy, wafer=replace(roomy.wafer, dram_capacity=gb * 1e9))

    def least_gb(fits):   # bisection: the least capacity that fits
        low, high = 0.01, 100.0
        for _ in range(50):
            mid = (low + high) / 2
            low, high = (low, mid) if fits(at(mid)) else (mid, high)
        return high

    even_gb = least_gb(lambda sc: _even_split_shortfall(sc) is None)
    some_gb = least_gb(_some_split_fits)
    assert some_gb < even_gb   # an uneven split needs less: the last stage also holds the LM head
    for gb in [*np.linspace(0.15, 2.5, 40), (some_gb + even_gb) / 2, some_gb * 0.999]:
        scenario = at(gb)
        brute = [_even_split_shortfall(scenario.with_choice(Choice(layers=s))) is None for s in splits(layers, pp)]
        assert _some_split_fits(scenario) == any(brute)
        data["wafer"]["dram_gb"] = float(gb)
        if any(brute):
            parse_instance(copy.deepcopy(data))            # accepted
        else:
            assert "even with full recomputation" in message_of(copy.deepcopy(data))


# --- published schemas -------------------------------------------------------------------------

@pytest.mark.parametrize("problem", list(BASES))
def test_schema_command_prints_a_json_schema_every_shipped_instance_meets(problem):
    import jsonschema

    code, text = run_cli("schema", problem)
    assert code == 0
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in BASES[problem]:
        validator.validate(json.loads(json.dumps(SHIPPED[path])))
    wrong = {**SHIPPED[BASES[problem][0]], "colour": "red"}
    assert not validator.is_valid(wrong)


def test_every_shipped_instance_validates():
    for path, data in SHIPPED.items():
        if data.get("problem") in BASES:
            load(path)


def test_every_problem_publishes_a_schema():
    from wafopt.core.registry import PROBLEMS
    from wafopt.problems import document_schema

    assert all(document_schema(problem) is not None for problem in PROBLEMS)


# --- cost at the limits (a benchmark: -m slow) ----------------------------------------------------

MEASURE = """
import resource, sys, time
from wafopt.core.errors import InstanceError
from wafopt.problems import load
start = time.process_time()
try:
    load(sys.argv[1])
except InstanceError:
    pass
print(time.process_time() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


@pytest.mark.slow
@pytest.mark.parametrize("name, document", [
    ("matrix.yaml", lambda n: {"problem": "placement", "mesh": {"rows": 18, "cols": 18},
                               "flow_matrix": [[(i * 7 + j * 13) % 1000 for j in range(n)] for i in range(n)]}),
    ("matrix.json", lambda n: {"problem": "placement", "mesh": {"rows": 18, "cols": 18},
                               "flow_matrix": [[(i * 7 + j * 13) % 1000 + 0.25 for j in range(n)] for i in range(n)]}),
    ("routing.json", lambda n: {"problem": "routing", "mesh": {"rows": 64, "cols": 64}, "flows": [
        {"src": [k % 64, k // 64 % 64], "dst": [(k + 1) % 64, k // 64 % 64], "volume": 1.0} for k in range(10_000)]}),
])
def test_validation_at_the_limits_takes_under_a_second_and_2_gb(tmp_path, name, document):
    import subprocess
    import sys

    data = document(315)
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else
                    yaml.dump(data, Dumper=yaml.CSafeDumper, default_flow_style=None, width=10**6))
    out = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True, check=True)
    cpu_seconds, peak_bytes = map(float, out.stdout.split())
    assert cpu_seconds < 1.0 and peak_bytes < 2e9, (cpu_seconds, peak_bytes)


def test_a_command_that_needs_a_fixed_layout_names_what_parallel_leaves_open(capsys):
    from wafopt.cli import main

    assert main(["tatp-report", str(ROOT / "instances/findings/temp-gpt3-6.7b-tatp8.yaml")]) == 2   # tp only
    assert "`parallel:` must give pp as well" in capsys.readouterr().err
