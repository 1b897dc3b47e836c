"""What a parallel layout may be: the rules a Megatron-LM run enforces, and WATOS's even-TP rule.

One place for them: scenario validation (a fixed `parallel:`), the evaluator, the planner's
layout space (and so its bounds) and `certify` all ask `layout_violation`. Sources:
docs/workload.md, "Legal layouts".

- Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, Sec. 3; Narayanan et al. 2021,
  Sec. 2.3): tp divides the attention heads, the hidden size and the MLP width (every expert's),
  so every die holds whole heads and whole column / row blocks. With grouped-query attention tp
  divides the KV heads or is a multiple of them; KV heads are then replicated (`kv_heads_per_die`).
  The vocabulary is padded to a multiple of 128 x tp (Megatron-LM's `make-vocab-size-divisible-by`
  default), so it never breaks a layout.
- TATP (TEMP Sec. V) splits the sequence and the reduction dimension, not heads: every die holds
  whole tokens of every head and attention streams the other dies' K/V around the ring
  (`wafopt.costmodel.operators`), so any degree up to the hidden size is legal.
- Sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2) splits the sequence dimension of the
  layer norms and dropouts over the tp group: the sequence length is a multiple of tp.
- GPU clusters: a TP group stays inside one node (its NVSwitch domain), and TATP, a ring of wafer
  dies, does not apply (`system_violation`).
- `parallel_rules: watos` (a wafer option, on for the WATOS presets): WATOS Alg. 1 iterates TP sizes
  so that "the TP instance consists of an even number of dies"; tp is 1 or even.
- Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2): with v > 1 virtual stages per device,
  the layers split into pp x v equal chunks and the micro-batches per pipeline are a multiple of pp.
"""

from __future__ import annotations

import math

from wafopt.hardware.catalog import PARALLEL_RULES  # noqa: F401  (megatron; watos = megatron + even tp)

VOCAB_MULTIPLE = 128                     # Megatron-LM's make-vocab-size-divisible-by default


def padded_vocab(vocab: int, tp: int) -> int:
    """The vocabulary Megatron-LM allocates: `vocab` rounded up to a multiple of 128 x tp."""
    multiple = VOCAB_MULTIPLE * tp
    return math.ceil(vocab / multiple) * multiple


def busiest_count(n: int, t: int) -> int:
    """Whole items (tokens, weight rows) on the die that holds the most of them when t dies split
    `n` of them: ceil(n / t)."""
    return -(-n // t)


def busiest_share(n: int, t: int) -> float:
    """busiest_count as a share of n: exactly 1 / t where t divides n."""
    return busiest_count(n, t) / n


def kv_heads_per_die(llm, tp: int) -> int:
    """KV heads one die of a tp group holds: kv_heads / tp, or one replicated head when tp > kv_heads."""
    return max(llm.kv_heads // tp, 1)


def tp_violation(llm, tp: int, parallel_rules: str = "megatron", scheme: str = "megatron") -> str | None:
    """Why tensor-parallel degree `tp` cannot split `llm` with `scheme`, or None."""
    if tp == 1:
        return None
    if parallel_rules == "watos" and tp % 2:
        return (f"tp {tp} is odd: the wafer's parallel_rules: watos allow only even tensor-parallel groups "
                "(WATOS Alg. 1)")
    if scheme == "tatp":   # sequence and reduction split: whole tokens and rows, any degree
        return None if tp <= llm.hidden else f"tp {tp} exceeds the hidden size {llm.hidden} (TATP)"
    if llm.heads % tp:
        return f"tp {tp} does not divide {llm.heads} attention heads"
    if llm.kv_heads % tp and tp % llm.kv_heads:
        return f"tp {tp} neither divides nor is a multiple of {llm.kv_heads} KV heads"
    if llm.hidden % tp:
        return f"tp {tp} does not divide the hidden size {llm.hidden}"
    widths = {llm.ffn_hidden} | ({llm.expert_ffn} if llm.is_moe else set())
    for width in sorted(widths):
        if width % tp:
            return f"tp {tp} does not divide the MLP width {width}"
    return None


def sequence_parallel_violation(seq: int, tp: int) -> str | None:
    """Why sequence parallelism cannot split a `seq`-token sequence over `tp` devices, or None."""
    if tp > 1 and seq % tp:
        return (f"sequence parallelism splits the {seq}-token sequence over tp {tp}: the sequence length must be "
                "a multiple of tp")
    return None


def system_violation(system, tp: int, scheme: str = "megatron") -> str | None:
    """Why a tp group of `scheme` cannot run on `system`, or None: on a GPU cluster a TP group stays
    inside one node's NVSwitch domain (Narayanan et al. 2021, Sec. 3.2; tp divides the GPUs per
    node, so Megatron-LM's rank order never splits a group) and TATP, a ring of
    neighbouring dies on a wafer mesh, does not apply."""
    if getattr(system, "system", "wafer") != "cluster":
        return None
    if scheme == "tatp":
        return "tp_scheme tatp streams around a ring of wafer dies: it does not apply to a cluster (use megatron)"
    if system.cols % tp:
        return (f"tp {tp} does not divide the {system.cols} GPUs of a node: a tensor-parallel group stays inside "
                "one node")
    return None


def group_violation(system, devices) -> str | None:
    """Why one placed tensor-parallel group cannot run on `system` ([node, gpu] devices on a
    cluster: all in one node, as `system_violation` requires of tp), or None."""
    nodes = sorted({node for node, _ in devices})
    if getattr(system, "system", "wafer") == "cluster" and len(nodes) > 1:
        return f"spans nodes {nodes}: a tensor-parallel group stays inside one node"
    return None


def legal_schemes(llm, tp: int, parallel_rules: str = "megatron", system=None) -> tuple[str, ...]:
    """The tensor-parallel schemes that can split `llm` over `tp` dies (one suffices without TP);
    with `system`, only those that run on it."""
    if tp == 1:
        return ("megatron",)
    return tuple(s for s in ("megatron", "tatp") if tp_violation(llm, tp, parallel_rules, s) is None
                 and system_violation(system, tp, s) is None)


def interleave_violation(llm, pp: int, interleave: int, microbatches: int | None = None) -> str | None:
    """Why `interleave` virtual stages per device cannot run, or None (`microbatches` per pipeline,
    when known)."""
    if interleave == 1:
        return None
    if pp == 1:
        return f"interleave {interleave} needs pipeline parallelism (pp > 1)"
    if llm.layers % (pp * interleave):
        return (f"interleave {interleave} with pp {pp} needs the {llm.layers} layers to split into "
                f"pp x interleave = {pp * interleave} equal chunks")
    if microbatches is not None and microbatches % pp:
        return f"interleave {interleave} needs the {microbatches} micro-batches per pipeline to be a multiple of pp {pp}"
    return None


def legal_interleaves(llm, pp: int, microbatches: int | None, fixed: int | None = None) -> list[int]:
    """The virtual stages per device a pipeline of pp stages may run: `fixed` where a scenario
    fixes it (if legal), else every v the interleave rule allows (1 always)."""
    options = [fixed] if fixed else range(1, llm.layers // pp + 1)
    return [v for v in options if not interleave_violation(llm, pp, v, microbatches)]


def layout_violation(llm, parallel_rules: str, tp: int, pp: int = 1, interleave: int = 1,
                     microbatches: int | None = None, schemes=("megatron",), system=None) -> str | None:
    """The first rule a layout breaks with these tensor-parallel schemes (on `system`, if given), or None."""
    for scheme in dict.fromkeys(schemes):
        why = system_violation(system, tp, scheme) or tp_violation(llm, tp, parallel_rules, scheme)
        if why:
            return why if scheme == "megatron" else f"{why} ({scheme})"
    return interleave_violation(llm, pp, interleave, microbatches)


def any_scheme_violation(llm, tp: int, parallel_rules: str) -> str | None:
    """Why no scheme can split `llm` over `tp` dies (the Megatron reason), or None."""
    return None if legal_schemes(llm, tp, parallel_rules) else tp_violation(llm, tp, parallel_rules)

