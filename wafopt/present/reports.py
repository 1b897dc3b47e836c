"""The text of the scenario reports: the workload table, the TATP mapping and routing table, and
a simulated iteration."""

from __future__ import annotations


def workload_text(rep: dict) -> str:
    """`wafopt workload`: the report of wafopt.costmodel.report.workload_report as text."""
    lay, tr = rep["layout"], rep["training"]
    cluster = rep.get("system") == "cluster"
    device, memory, rings = ("GPU", "HBM", "on NVSwitch") if cluster else ("die", "DRAM", "on 1-hop rings")
    lines = [f"{rep['model']} on {rep['wafer']}: tp={lay['tp']} pp={lay['pp']} dp={lay['dp']} "
             f"({lay['tp_scheme']}), m={lay['microbatches']}, seq={tr['seq']}, micro_batch={tr['micro_batch']}, "
             f"{tr['attention']} attention, SP {'on' if tr['sequence_parallel'] else 'off'}, "
             f"recompute {rep['recompute']}, {tr['state_bytes_per_param']:g} B/param of state",
             f"per {device}, per micro-batch; seconds are compute rooflines"]
    for kind, v in rep["layers"].items():
        lines += ["", f"{kind} layer ({v['count']} of them):",
                  f"  {'operator':18s} {'fwd us':>9s} {'bwd us':>9s} {'rec us':>9s} {'fwd GFLOP':>10s} "
                  f"{'fwd MB':>9s} {'stored MB':>10s} {'TP MB':>8s}"]
        for r in v["operators"]:
            lines.append(f"  {r['name']:18s} {r['fwd_s'] * 1e6:9.1f} {r['bwd_s'] * 1e6:9.1f} "
                         f"{r['recompute_s'] * 1e6:9.1f} {r['fwd_flops'] / 1e9:10.2f} {r['fwd_bytes'] / 1e6:9.1f} "
                         f"{r['stored_bytes'] / 1e6:10.1f} {r['tp_bytes'] / 1e6:8.1f}")
    p = rep["per_layer"]
    lines += ["", "per layer (mean): "
              f"fwd {p['fwd_s'] * 1e3:.3f} ms, bwd {p['bwd_s'] * 1e3:.3f} ms, recompute {p['recompute_s'] * 1e3:.3f} ms, "
              f"fwd {p['fwd_flops'] / 1e12:.3f} TFLOP, TP {p['tp_bytes'] / 1e6:.1f} MB sent "
              f"({p['tp_comm_s'] * 1e3:.3f} ms {rings}), activations kept {p['activation_bytes'] / 1e6:.1f} MB",
              "", f"  {'stage':>5s} {'layers':>6s} {'inflight':>8s} {'state GB':>9s} {'activ. GB':>9s} "
              f"{'transient GB':>12s} {'total GB':>9s} {'fwd ms':>8s} {'bwd ms':>8s} {'rec ms':>8s}"]
    for s in rep["per_stage"]:
        lines.append(f"  {s['stage']:5d} {s['layers']:6d} {s['inflight']:8g} {s['state_bytes'] / 1e9:9.2f} "
                     f"{s['activation_bytes'] / 1e9:9.2f} {s['transient_bytes'] / 1e9:12.3f} "
                     f"{s['memory_bytes'] / 1e9:9.2f} {s['fwd_s'] * 1e3:8.2f} {s['bwd_s'] * 1e3:8.2f} "
                     f"{s['recompute_s'] * 1e3:8.2f}")
    lines.append(f"  {memory} per {device} {rep['dram_capacity'] / 1e9:.1f} GB")
    return "\n".join(lines)


def tatp_text(rep: dict) -> str:
    """`wafopt tatp-report`: the report of wafopt.run.tatp_report.report as a markdown table."""
    head = (f"TATP N={rep['N']}, G={rep['G']}, streams sub-{rep['streamed']}s of {rep['ring_bytes'] / 1e6:.1f} MB"
            f", DP {rep['dp_bytes_per_round'] / 1e6:.1f} MB per round\n")
    lines = ["| mapping + routing | ring cost | physical rings | tail hops | peak link MB | round comm us "
             "| round compute us | layer time us |", "|---|---|---|---|---|---|---|---|"]
    for r in rep["rows"]:
        lines.append(f"| {r['mapping']} + {r['routing']} | {r['ring_cost']:g} | {r['physical_rings']}/{r['groups']}"
                     f" | {r['tail_hops']} | {r['peak_link_bytes'] / 1e6:.1f} | {r['round_comm_s'] * 1e6:.1f} "
                     f"| {r['round_compute_s'] * 1e6:.1f} | {r['layer_time_s'] * 1e6:.1f} |")
    return head + "\n".join(lines)


def simulation_text(sim, analytic_s: float | None = None) -> str:
    """`wafopt simulate`: a wafopt.simulate.engine.Simulation as text."""
    lines = [f"iteration time: {sim.iteration_s:.6g} s (simulated, contention "
             f"{'on' if sim.contention else 'off'})"]
    if analytic_s is not None:
        lines.append(f"analytic:       {analytic_s:.6g} s ({100 * (sim.iteration_s / analytic_s - 1):+.3f} %)")
    lines.append(f"peak memory:    {sim.peak_memory_bytes / 1e9:.4g} GB of {sim.die_capacity / 1e9:.4g} GB per die")
    lines += ["", "die        compute s   comm s    idle s   busy   peak GB"]
    for row in sim.to_dict()["dies"]:
        busy = (row["compute_s"] + row["comm_s"]) / sim.iteration_s if sim.iteration_s else 0.0
        lines.append(f"{str(row['die']):9s} {row['compute_s']:9.4g} {row['comm_s']:8.4g} {row['idle_s']:9.4g} "
                     f"{100 * busy:5.1f}% {row['peak_memory_bytes'] / 1e9:9.4g}")
    util = sim.link_utilization()
    top = sorted(util.items(), key=lambda kv: -kv[1])[:10]
    if top:
        lines += ["", "busiest links (utilization = bytes / (bandwidth x iteration time))"]
        lines += [f"{list(a)} -> {list(b)}  {100 * u:6.2f}%  {sim.link_bytes[(a, b)] / 1e9:.4g} GB"
                  for (a, b), u in top]
    return "\n".join(lines)
