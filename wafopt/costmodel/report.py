"""`wafopt workload`: the per-operator cost table of a layout, per layer and per stage.

Per die and per micro-batch. Seconds are compute (per-operator rooflines); communication time
depends on the placement, so the table gives the bytes and, for reference, the time of the
layer's collectives on a ring of 1-hop steps without contention: `tp_transfer_s` in all and
`exposed_tp_s` (= `tp_comm_s`), the part not hidden under compute (TATP streams overlap their
operator's other rounds; Megatron's collectives are on the critical path, its asynchronous
backward ones as far as the system's `async_overlap` leaves them). `forward_pass_s` and
`backward_pass_s` are one layer's passes as a profiler times them: compute plus exposed TP time,
the backward with what it recomputes.
"""

from __future__ import annotations

from wafopt.costmodel.model import LayoutWorkload, build_workload
from wafopt.costmodel.network import least_collective_s
from wafopt.costmodel.operators import (
    REGATHER,
    SELECTIVE_UNITS,
    Collective,
    LayerTable,
    Roofline,
)
from wafopt.costmodel.stage import FULL, CommStep, recompute_row
from wafopt.costmodel.training import Training
from wafopt.hardware.catalog import LLM, Wafer


def _ideal_comm_s(c: Collective, hidden_s: float, wafer: Wafer) -> float:
    """A collective on a ring of 1-hop steps with no contention (WATOS Eq. 1 per step), less the
    compute it runs under: the part on the critical path."""
    return least_collective_s(CommStep(c, hidden_s), wafer)


def _operator_rows(table: LayerTable, wafer: Wafer, policy: str) -> list[dict]:
    roofline = Roofline(wafer)
    units = {u.name: u for u in table.units}
    selective = {n for n in SELECTIVE_UNITS if n in units}
    rows = []
    for op in table.ops:
        fwd_s, bwd_s = roofline(op.fwd), roofline(op.bwd)
        fwd_comm = [c for c in table.collectives("forward") if c.op == op.name]
        bwd_comm = [c for c in table.collectives("backward") if c.op == op.name]
        if policy == FULL:
            share, rec_comm = 1.0, fwd_comm
        elif policy == "selective":
            share = sum(dict(units[n].producers).get(op.name, 0.0) for n in selective)
            rec_comm = []
        else:
            share, rec_comm = 0.0, []
        stored = sum(units[n].bytes for n in op.stores)
        kept = sum(units[n].bytes for n in op.stores
                   if (policy == "none") or (policy == "selective" and n not in selective)
                   or (policy == FULL and not units[n].recomputable))
        rows.append({
            "name": op.name, "fwd_s": fwd_s, "bwd_s": bwd_s, "recompute_s": share * fwd_s,
            "fwd_flops": op.fwd.flops, "bwd_flops": op.bwd.flops, "recompute_flops": share * op.fwd.flops,
            "fwd_bytes": op.fwd.bytes, "bwd_bytes": op.bwd.bytes, "weights": op.weights,
            "stored_bytes": stored, "activation_bytes": kept,
            "tp_bytes": sum(c.bytes_sent for c in fwd_comm + bwd_comm + rec_comm),
            "collectives": [f"{c.kind} {c.tensor_bytes / 1e6:.3g} MB ({c.purpose})" for c in fwd_comm + bwd_comm],
        })
    return rows


def _layer_summary(table: LayerTable, work: LayoutWorkload, policy: str) -> dict:
    wafer = work.wafer
    ops = _operator_rows(table, wafer, policy)
    roofline = Roofline(wafer)
    total = {key: sum(r[key] for r in ops) for key in ("fwd_s", "bwd_s", "recompute_s", "fwd_flops", "bwd_flops",
                                                       "recompute_flops", "fwd_bytes", "bwd_bytes", "tp_bytes",
                                                       "activation_bytes", "stored_bytes")}
    exposed, whole = {"forward": 0.0, "backward": 0.0}, {"forward": 0.0, "backward": 0.0}
    for phase in ("forward", "backward"):
        for c in table.collectives(phase):
            if policy == FULL and c.purpose == REGATHER:
                continue   # the recomputed forward has just gathered the input
            op = table.op(c.op)
            cost = op.fwd if phase == "forward" else op.bwd
            exposed[phase] += _ideal_comm_s(c, roofline.hidden_s(c, cost), wafer)
            whole[phase] += _ideal_comm_s(c, 0.0, wafer)
    repeats = 2 if policy == FULL else 1   # full recomputation repeats the forward's collectives
    total["tp_transfer_s"] = repeats * whole["forward"] + whole["backward"]
    total["exposed_tp_s"] = repeats * exposed["forward"] + exposed["backward"]
    total["tp_comm_s"] = total["exposed_tp_s"]
    # the passes as a profiler times one layer (Korthikanti et al. 2022, Table 4): compute plus
    # exposed TP; the backward includes what it recomputes
    total["forward_pass_s"] = total["fwd_s"] + exposed["forward"]
    total["backward_pass_s"] = (total["bwd_s"] + total["recompute_s"] + exposed["backward"]
                                + (repeats - 1) * exposed["forward"])
    total["gradient_peak_bytes"] = table.gradient_peak_bytes()
    return {"operators": ops, **total}


def workload_report(llm: LLM, training: Training, wafer: Wafer, tp: int, pp: int, dp: int = 1,
                    policy: str = "none", scheme: str = "megatron", interleave: int = 1) -> dict:
    work = build_workload(llm, training, wafer, tp, pp, dp, scheme, interleave=interleave)
    recompute_row(work.stages[0], policy)   # checks the policy name
    kinds: dict[str, tuple[LayerTable, int]] = {}
    for s in work.stages:
        for table, count in s.tables:
            name = "moe" if any(o.name == "router" for o in table.ops) else "dense"
            kinds[name] = (table, kinds.get(name, (table, 0))[1] + count)
    layers = {name: dict(_layer_summary(table, work, policy), count=count) for name, (table, count) in kinds.items()}
    keys = [k for k in next(iter(layers.values())) if k not in ("operators", "count")]
    per_layer = {k: sum(v[k] * v["count"] for v in layers.values()) / llm.layers for k in keys}
    stages = []
    for s in work.stages:
        row = recompute_row(s, policy)
        stages.append({
            "stage": s.index, "layers": s.layers, "inflight": s.inflight, "params": s.params,
            "state_bytes": s.state_bytes, "activation_bytes": s.inflight_bytes(row),
            "transient_bytes": s.transient_bytes(row), "memory_bytes": s.memory_bytes(row),
            "fwd_s": s.fwd_s, "bwd_s": s.bwd_s, "recompute_s": s.recompute_seconds(row),
            "optimizer_s": s.optimizer_s, "tp_bytes_per_layer": s.tp_bytes_per_layer(row)})
    return {
        "model": llm.name, "wafer": wafer.name, "system": wafer.system,
        "layout": {"tp": tp, "pp": pp, "dp": dp, "interleave": interleave, "microbatches": work.microbatches,
                   "tp_scheme": scheme},
        "training": {"seq": training.seq, "micro_batch": training.micro_batch,
                     "global_batch": training.global_batch, "attention": training.attention,
                     "sequence_parallel": training.sequence_parallel,
                     "state_bytes_per_param": training.states.total,
                     "distributed_optimizer": training.distributed_optimizer},
        "recompute": policy,
        "layers": {name: {"count": v["count"], "exposed_tp_s": v["exposed_tp_s"], "tp_transfer_s": v["tp_transfer_s"],
                          "forward_pass_s": v["forward_pass_s"], "backward_pass_s": v["backward_pass_s"],
                          "operators": v["operators"]} for name, v in layers.items()},
        "per_layer": per_layer,
        "per_stage": stages,
        "dram_capacity": wafer.dram_capacity,
        "model_flops_per_iteration": work.model_flops_per_iteration,
    }
