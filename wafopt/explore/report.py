"""What an exploration shows as text: the counts, the work per fidelity, the ranked table, the
verdict (its pictures: wafopt.present.exploration)."""

from __future__ import annotations

from wafopt.present.tables import number


def render(out: dict, top: int = 15) -> str:
    lines = [f"objective: {out['objective']}; model error epsilon {out['epsilon']:.3g}"]
    lines.append("designs after each step: " + ", ".join(f"{k} {v}" for k, v in out["counts"].items()))
    ev = out["evaluations"]
    needed = out.get("needed", ev)
    cpu = out.get("cpu_seconds", {})
    lines.append("evaluations needed (run now + from the store): "
                 + ", ".join(f"{k} {needed.get(k, ev[k])} ({ev[k]} + {needed.get(k, ev[k]) - ev[k]}; "
                             f"{out['seconds'][k]:.1f} s" + (f", {cpu[k]:.1f} CPU s" if cpu.get(k) else "") + ")"
                             for k in ev))
    head = ["design", "mesh", "die mm", "TFLOPS", "DRAM GB", "DRAM TB/s", "link TB/s", "bound", "analytic",
            "simulated", "fidelity", "status"]
    rows = []
    for r in out["table"][:top]:
        rows.append([r["design"], f"{r['rows']}x{r['cols']}", f"{r['die_mm'][0]:.1f}x{r['die_mm'][1]:.1f}",
                     number(r["die_tflops"], 4), number(r["dram_gb"], 4), number(r["dram_tbps"], 4), number(r["link_tbps"], 4),
                     number(r["bound"], 4), number(r["analytic"], 4), number(r["value"], 4), r["fidelity"], r["status"]])
    widths = [max(len(h), *(len(x[i]) for x in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines += ["", "  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    if len(out["table"]) > top:
        lines.append(f"... {len(out['table']) - top} more (--json for all)")
    best = out["best"]
    lines.append("")
    if best is None and out["remaining"]:
        lines.append(f"stopped before any design was simulated: {len(out['remaining'])} designs remain")
    elif best is None:
        lines.append("no design has a feasible plan for every workload")
    else:
        lines.append(f"best design {best['design']}: {number(best['value'], 6)}"
                     + (" (proven: no other design can be better within epsilon)" if out["proven"] else ""))
    if out.get("confidence"):
        c = out["confidence"]
        lines.append(f"stopped before proving it: probability that it is optimal {c['probability_best_is_optimal']:.3f} "
                     f"(Monte Carlo over {len(c['remaining'])} remaining designs with the calibration's errors)")
        lines.append("remaining: " + ", ".join(r["design"] for r in c["remaining"][:20]))
    err = out.get("model_error") or {}
    if err.get("count"):
        # the pruning relies on one side only: the simulator never more than epsilon faster
        beyond = -err["largest_under"] > out["epsilon"]
        lines.append(f"simulated against analytic, {err['count']} plans: {100 * err['largest_under']:+.2f} % to "
                     f"{100 * err['largest_over']:+.2f} %" + (" (the simulator was more than epsilon faster: the "
                                                               "pruning is not proven safe on this space; recalibrate)"
                                                               if beyond else ""))
    lines.append("Pareto set (simulated value vs DRAM capacity): " + ", ".join(out["pareto"]))
    return "\n".join(lines)
