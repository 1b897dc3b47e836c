"""What the joint planner shows: its candidates table and the convergence of incumbent and bound."""

from __future__ import annotations

from collections import Counter

from wafopt.present.draw import write_figure
from wafopt.present.tables import number

INFEASIBLE_REASONS = (("model state", "model state over a die's DRAM"),
                      ("keeps at least", "state, gradients and buffers over a die's DRAM"),
                      ("full recomputation", "over the pooled DRAM even with full recomputation"),
                      ("cannot be modelled", "not a valid layout"))


def candidates_text(stats: dict, limit: int = 12) -> str:
    """The candidates table (layout, bound, best plan, status), best bounds first; the layouts
    proven infeasible are summarized by reason."""
    rows = stats.get("candidates") or []
    if not rows:
        return ""
    shown = [r for r in rows if r["status"] != "infeasible"][:limit]
    heads = ["layout", "bound (s)", "best plan (s)", "status", "s", "how / why"]
    cells = [[r["layout"], number(r["bound"]) + (f" ({r['bound_tier']})" if r.get("bound_tier") and r["bound"] is not None
                                                 else ""), number(r["objective"]), r["status"],
              "-" if r.get("seconds") is None else f"{r['seconds']:.1f}", (r.get("note") or "")[:70]] for r in shown]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["candidates (layouts in order of bound):",
             "  ".join(h.ljust(w) for h, w in zip(heads, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths)) for c in cells]
    rest = Counter(r["status"] for r in rows if r["status"] != "infeasible") - Counter(r["status"] for r in shown)
    if rest:
        lines.append(f"... {rest.total()} more layouts ({', '.join(f'{n} {s}' for s, n in rest.items())})")
    reasons: dict[str, int] = {}
    for r in rows:
        if r["status"] == "infeasible":
            note = r.get("note") or ""
            key = next((short for text, short in INFEASIBLE_REASONS if text in note), note[:60])
            reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        lines.append("infeasible: " + "; ".join(f"{n} x {why}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])))
    return "\n".join(lines)


def convergence_png(stats: dict, path: str, title: str = "") -> None:
    """Incumbent (best plan) and certified bound over time."""
    import matplotlib  # loads only when a picture is drawn (start-up time)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = stats.get("convergence") or []
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    t_inc = [p[0] for p in points if p[1] is not None]
    inc = [p[1] for p in points if p[1] is not None]
    t_bnd = [p[0] for p in points if p[2] is not None]
    bnd = [p[2] for p in points if p[2] is not None]
    if inc:
        ax.step(t_inc, inc, where="post", label="best plan (incumbent)", color="tab:blue")
    if bnd:
        ax.step(t_bnd, bnd, where="post", label="certified lower bound", color="tab:green", linestyle="--")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("iteration time (s)")
    ax.set_title(title or "planner convergence")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    write_figure(fig, path, dpi=120)
