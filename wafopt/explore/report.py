"""What an exploration shows: the ranked table, the counts, and pictures (funnel, Pareto front,
S-curve)."""

from __future__ import annotations

from pathlib import Path

from wafopt.present.tables import number


def render(out: dict, top: int = 15) -> str:
    lines = [f"objective: {out['objective']}; model error epsilon {out['epsilon']:.3g}"]
    lines.append("designs after each step: " + ", ".join(f"{k} {v}" for k, v in out["counts"].items()))
    ev = out["evaluations"]
    cpu = out.get("cpu_seconds", {})
    lines.append("evaluations run: " + ", ".join(f"{k} {ev[k]} ({out['seconds'][k]:.1f} s"
                                                 + (f", {cpu[k]:.1f} CPU s" if cpu.get(k) else "") + ")" for k in ev))
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
        beyond = max(-err["largest_under"], err["largest_over"]) > out["epsilon"]
        lines.append(f"simulated against analytic, {err['count']} plans: {100 * err['largest_under']:+.2f} % to "
                     f"{100 * err['largest_over']:+.2f} %" + (" (beyond epsilon: the pruning is not proven "
                                                               "safe on this space; recalibrate)" if beyond else ""))
    lines.append("Pareto set (simulated value vs DRAM capacity): " + ", ".join(out["pareto"]))
    return "\n".join(lines)


def plot(out: dict, directory: str | Path) -> list[Path]:
    """funnel.png, pareto.png, s-curve.png in `directory`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = list(out["counts"].items()) + [("simulated (F3)", out["evaluations"]["F3"] // max(1, _workloads(out)))]
    names, values = [k for k, _ in steps], [max(v, 1) for _, v in steps]
    ax.barh(range(len(steps)), values, color="#4c72b0")
    ax.set_yticks(range(len(steps)), names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    for i, (_, v) in enumerate(steps):
        ax.text(max(v, 1), i, f" {v}", va="center", fontsize=8)
    ax.set_xlabel("designs (log scale)")
    ax.set_title("Design-space funnel: designs left after each step")
    fig.tight_layout()
    paths.append(_save(fig, d / "funnel.png"))

    fig, ax = plt.subplots(figsize=(6, 4.5))
    sim = [r for r in out["table"] if r["value"] is not None]
    ax.scatter([r["rows"] * r["cols"] * r["dram_gb"] / 1000 for r in sim], [r["value"] for r in sim],
               s=14, color="#999999", label="simulated designs")
    front = [r for r in sim if r["design"] in set(out["pareto"])]
    front.sort(key=lambda r: r["rows"] * r["cols"] * r["dram_gb"])
    ax.plot([r["rows"] * r["cols"] * r["dram_gb"] / 1000 for r in front], [r["value"] for r in front],
            "o-", color="#c44e52", label="Pareto set")
    if out["best"]:
        b = next(r for r in sim if r["design"] == out["best"]["design"])
        ax.scatter([b["rows"] * b["cols"] * b["dram_gb"] / 1000], [b["value"]], marker="*", s=160,
                   color="#dd8452", zorder=5, label="best")
    ax.set_xlabel("wafer DRAM capacity (TB)")
    ax.set_ylabel(out["objective"].split(";")[0])
    ax.set_title("Pareto front")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(_save(fig, d / "pareto.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    curve = out["s_curve"]
    ax.plot([100 * p["error"] for p in curve], [p["potentially_optimal"] for p in curve], color="#4c72b0")
    ax.axvline(100 * out["epsilon"], color="#c44e52", linestyle="--", label=f"calibrated epsilon {out['epsilon']:.1%}")
    ax.set_xlabel("assumed model error (%)")
    ax.set_ylabel("designs that could be the optimum")
    ax.set_title("Accuracy-confidence S-curve")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(_save(fig, d / "s-curve.png"))
    return paths


def _workloads(out: dict) -> int:
    return max(1, out.get("workloads", 1))


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
