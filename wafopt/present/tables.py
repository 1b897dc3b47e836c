"""The text of the command line: numbers, the result line of a solve, the compare and ablation
tables, an evaluation, the calibration summary (the text of the workload, TATP and simulation
reports: wafopt.present.reports)."""

from __future__ import annotations


def number(value, digits: int = 6) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def percent(value) -> str:
    return "-" if value is None else f"{100 * value:.3g}%"


def _aligned(headers: list[str], cells: list[list[str]], rule: bool = False) -> list[str]:
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    if rule:
        lines.append("  ".join("-" * w for w in widths))
    return lines + ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]


def _markdown(headers: list[str], cells: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers),
            *("| " + " | ".join(row) + " |" for row in cells)]


def result_line(result, unit: str = "") -> str:
    """status, objective and bound in `unit` (the bound with where it comes from), gap, time and
    solver of one run."""
    bound = result.bound
    unit = f" {unit}" if unit else ""
    objective = number(result.objective) + (unit if result.objective is not None else "")
    bound_value = number(bound and bound.value) + (unit if bound is not None else "")
    return (f"{result.status.value:10s} objective {objective}  bound {bound_value}"
            + (f" ({bound.provenance}: {bound.kind})" if bound else "")
            + f"  gap {percent(result.gap)}  {result.time_s:.2f} s  [{result.solution.solver}]")


COMPARE_HEADS = {"bound_provenance": "bound from", "gap_best_bound": "gap to best bound", "time_s": "time (s)",
                 "gap_known": "gap to known opt."}


def compare_tables(rows: list[dict], extra: list[str] = (), objective: str = "", markdown: bool = False) -> str:
    """One table per instance of `wafopt compare` rows, each followed by what the methods say."""
    columns = ["method", "status", "objective", "bound", "bound_provenance", "gap", "gap_best_bound", "time_s",
               *extra]
    if any(r["known_optimum"] is not None for r in rows):
        columns.append("gap_known")
    lines = []
    for name in dict.fromkeys(r["instance"] for r in rows):
        block = [r for r in rows if r["instance"] == name]
        known = block[0]["known_optimum"]
        title = f"{name}" + (f" — objective: {objective}" if objective else "") + \
            (f" (known optimum {number(known)})" if known is not None else "")
        cells = [[percent(r[c]) if c.startswith("gap") else
                  (f"{r[c]:.2f}" if c == "time_s" and r[c] is not None else number(r[c])) for c in columns]
                 for r in block]
        headers = [COMPARE_HEADS.get(c, c) for c in columns]
        if markdown:
            lines += ["", f"**{title}**", "", *_markdown(headers, cells)]
        else:
            lines += ["", title, *_aligned(headers, cells, rule=True)]
        for r in block:  # what each method says of its result explains most gaps
            if r["message"]:
                note = r["message"] if len(r["message"]) <= 200 else r["message"][:197] + "..."
                lines.append(f"{'- ' if markdown else '  '}{r['method']}: {note}")
    return "\n".join(lines)


def ablation_table(name: str, rows: list, markdown: bool = False) -> str:
    """The planner's ablation on one scenario: each step's layout, iteration time, throughput over
    MG-wafer and over Megatron, and bound."""
    heads = ["step", "layout", "iteration (s)", "throughput x MG-wafer", "throughput x Megatron", "bound (s)"]
    cells = [[r.step, r.layout, number(r.objective), "-" if r.ratio is None else f"{r.ratio:.3f}",
              "-" if r.ratio_megatron is None else f"{r.ratio_megatron:.3f}", number(r.bound)] for r in rows]
    if markdown:
        return "\n".join(["", f"**{name}**", "", *_markdown(heads, cells)])
    return "\n".join(["", name, *_aligned(heads, cells)])


def evaluation_text(evaluation) -> str:
    lines = [f"feasible: {'yes' if evaluation.feasible else 'no'}", f"objective: {number(evaluation.objective)}"]
    return "\n".join(lines + [f"violation: {v}" for v in evaluation.violations])


def calibration_line(row) -> str:
    """One calibrated plan: analytic and simulated iteration time and their difference."""
    return (f"{row.label}: analytic {row.analytic_s:.6g} s, simulated {row.simulated_s:.6g} s "
            f"({100 * row.time_error:+.3f} %)")


def calibration_summary(result: dict) -> str:
    t, m = result["iteration_time"], result["peak_memory"]
    return (f"iteration time: median {percent(t['median'])}, p95 {percent(t['p95'])}, max {percent(t['max'])} "
            f"(epsilon)\n"
            f"peak memory:    median {percent(m['median'])}, p95 {percent(m['p95'])}, max {percent(m['max'])}")


def fidelity_table(rows: list, summary: dict, markdown: bool = False) -> str:
    """Predicted against measured iteration time per published run, and the mean and largest error."""
    heads = ["run", "measured (s)", "predicted (s)", "error"]
    cells = [[r.run.name, f"{r.run.measured_s:.2f}", number(r.predicted_s),
              "-" if r.error is None else f"{100 * r.error:+.1f} %"] for r in rows]

    def line(stats, label):
        mean, most = stats["mean_abs_error"], stats["max_abs_error"]
        return (f"{label}{stats['predicted']} of {stats['runs']} runs predicted; mean absolute error "
                f"{'-' if mean is None else f'{100 * mean:.2f} %'}, largest {'-' if most is None else f'{100 * most:.2f} %'}")

    by_source = summary.get("by_source", {})
    tail = [line(summary, "all: " if len(by_source) > 1 else "")]
    if len(by_source) > 1:
        tail += [line(stats, f"{source}: ") for source, stats in by_source.items()]
    if markdown:
        return "\n".join([*_markdown(heads, cells), "", *(f"- {t}" for t in tail)])
    return "\n".join([*_aligned(heads, cells), *tail])


def layer_fidelity_table(rows: list, summary: dict, markdown: bool = False) -> str:
    """Predicted against measured forward and backward pass of single layers."""
    heads = ["layer", "forward measured (ms)", "predicted", "error", "backward measured (ms)", "predicted", "error"]
    cells = []
    for r in rows:
        fwd, bwd = r.errors
        cells.append([r.layer.name, f"{1e3 * r.layer.forward_s:.1f}", f"{1e3 * r.forward_s:.2f}", f"{100 * fwd:+.1f} %",
                      f"{1e3 * r.layer.backward_s:.1f}", f"{1e3 * r.backward_s:.2f}", f"{100 * bwd:+.1f} %"])
    mean, most = summary["mean_abs_error"], summary["max_abs_error"]
    tail = (f"{summary['passes']} passes of {summary['layers']} layers; mean absolute error "
            f"{'-' if mean is None else f'{100 * mean:.2f} %'}, largest {'-' if most is None else f'{100 * most:.2f} %'}")
    if markdown:
        return "\n".join([*_markdown(heads, cells), "", f"- {tail}"])
    return "\n".join([*_aligned(heads, cells), tail])


def _params(count: int) -> str:
    return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"


def presets_text(found: dict) -> str:
    """The presets of `wafopt presets`: one table per kind (models, wafers, clusters), each followed
    by the sources of its numbers."""
    def section(title: str, heads: list[str], cells: list[list[str]], entries: list[dict]) -> list[str]:
        return ["", title, *(line.rstrip() for line in _aligned(heads, cells, rule=True)), "sources:",
                *(f"  {e['name']}: {e['source']}" for e in entries)]

    models = found["models"]
    model_cells = [[m["name"], str(m["layers"]), str(m["hidden"]), f"{m['heads']}/{m['kv_heads']}",
                    str(m["ffn_hidden"]), str(m["vocab"]), m["mlp"],
                    _params(m["params"]) + (f" ({_params(m['active_params'])} active, {m['experts']} experts "
                                            f"top-{m['top_k']})" if m["experts"] > 1 else "")] for m in models]
    wafers = found["wafers"]
    wafer_cells = [[w["name"], f"{w['dies']} ({w['rows']}x{w['cols']})", number(w["die_tflops"]),
                    number(w["dram_gb"]), number(w["dram_tbps"]), number(w["link_tbps"]), w["parallel_rules"]]
                   for w in wafers]
    clusters = found["clusters"]
    cluster_cells = [[c["name"], f"{c['nodes']} x {c['gpus_per_node']}", number(c["gpu_tflops"]),
                      number(c["hbm_gb"]), number(c["hbm_tbps"]), number(c["nvlink_gbps"]),
                      number(c["network_gbps"])] for c in clusters]
    lines = section("models (model: NAME)", ["name", "layers", "hidden", "heads/kv", "FFN", "vocab", "MLP",
                                             "params"], model_cells, models)
    lines += section("wafers (wafer: NAME; per die, links per direction)",
                     ["name", "dies", "TFLOPS/die", "DRAM GB", "DRAM TB/s", "link TB/s", "parallel_rules"],
                     wafer_cells, wafers)
    lines += section("clusters (cluster: NAME; per GPU, per direction; a scenario sets nodes)",
                     ["name", "nodes x GPUs", "TFLOPS/GPU", "HBM GB", "HBM TB/s", "NVLink GB/s", "network GB/s"],
                     cluster_cells, clusters)
    return "\n".join(lines[1:])
