"""Enumerate the design space: edge arrangements, dies, wafers; deduplicate and prune.

Steps (the multi-fidelity DSE paper, Methods 1.1-1.2; WATOS Sec. III-A hardware template):
1. every arrangement of up to `max_units` units along one edge (ordered sequences);
2. deduplicate at the edge level: an edge's metrics do not depend on the order of its units, so
   permutations are one arrangement (a multiset), before edges are combined;
3. prune at the edge level: among arrangements with the same footprint (depth), drop one that
   another beats or equals in DRAM capacity, DRAM bandwidth and D2D bandwidth while using no
   more of the interface budget (strictly better somewhere);
4. combine four edges with each compute die into dies, within the interface budget: opposite edges
   pair up (N+S, E+W; mirror images are one), and among pairs that fit the same number of dies
   along their axis, a pair another dominates (no less DRAM, DRAM bandwidth or link bandwidth, no
   more budget) is dropped; dies with the same metrics are one;
5. tile each die on the wafer area, as many as fit, in a mesh; a square wafer makes a die and its
   transpose equivalent;
6. prune at the wafer level: drop a design that another strictly dominates, that is, has a mesh
   at least as large in both directions (so it contains this one's mesh) and at least as much
   per-die compute, DRAM capacity, DRAM bandwidth and link bandwidth, and more of one. Every plan
   of the dominated design runs on the other with no resource smaller, so the other's best plan is
   at least as fast under a cost model that never gets slower with more resources: the optimum
   survives. (Totals alone would not do: more compute spread over more, weaker dies can lose.)
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import Counter
from dataclasses import dataclass

from wafopt.explore.space import ComputeDie, EdgeUnit, Space

SIDES = ("N", "E", "S", "W")  # N/S edges run along the die's width, E/W along its height


@dataclass(frozen=True)
class EdgeConfig:
    units: tuple[str, ...]      # unit names, sorted (the canonical form of all their orders)
    length_mm: float            # along the edge
    depth_mm: float             # how far the units reach out: the die grows by this
    dram_gb: float
    dram_tbps: float
    d2d_tbps: float

    @property
    def budget_tbps(self) -> float:
        """Interface budget used: DRAM bandwidth plus half the D2D bandwidth (a link is shared by
        the two dies it joins)."""
        return self.dram_tbps + self.d2d_tbps / 2

    def dominates(self, other: "EdgeConfig") -> bool:
        """Same footprint; no worse anywhere and better somewhere (budget: less is better)."""
        if not math.isclose(self.depth_mm, other.depth_mm):
            return False
        mine = (self.dram_gb, self.dram_tbps, self.d2d_tbps, -self.budget_tbps)
        theirs = (other.dram_gb, other.dram_tbps, other.d2d_tbps, -other.budget_tbps)
        return all(a >= b for a, b in zip(mine, theirs)) and mine != theirs


@dataclass(frozen=True)
class Design:
    """One wafer: a compute die with its edges, tiled rows x cols."""

    id: str
    compute: str
    edges: tuple[tuple[str, ...], ...]   # units per side, N E S W
    die_w_mm: float
    die_h_mm: float
    rows: int                            # dies along y
    cols: int                            # dies along x
    die_tflops: float
    dram_gb: float                       # per die
    dram_tbps: float                     # per die
    link_tbps: float                     # per link and direction: the weaker axis
    link_latency_us: float

    @property
    def dies(self) -> int:
        return self.rows * self.cols

    @property
    def area_mm2(self) -> float:
        return self.die_w_mm * self.die_h_mm

    def metrics(self) -> tuple:
        return (self.rows, self.cols, self.die_tflops, self.dram_gb, self.dram_tbps, self.link_tbps)

    def to_dict(self) -> dict:
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["edges"] = [list(e) for e in self.edges]
        return {**out, "dies": self.dies, "area_mm2": self.area_mm2}


def _round(x: float) -> float:
    return round(x, 9)  # metrics are sums of decimal data: compare them at this resolution


def edge_sequences(units: tuple[EdgeUnit, ...], max_units: int, length_mm: float):
    """Every ordered arrangement of up to max_units units that fits along an edge of this length."""
    for k in range(max_units + 1):
        for seq in itertools.product(units, repeat=k):
            if sum(u.width_mm for u in seq) <= length_mm + 1e-9:
                yield seq


def edge_config(seq) -> EdgeConfig:
    dram = [u for u in seq if u.kind == "dram"]
    d2d = [u for u in seq if u.kind == "d2d"]
    return EdgeConfig(tuple(sorted(u.name for u in seq)), _round(sum(u.width_mm for u in seq)),
                      _round(max((u.depth_mm for u in seq), default=0.0)),
                      _round(sum(u.capacity_gb for u in dram)), _round(sum(u.bandwidth_tbps for u in dram)),
                      _round(sum(u.bandwidth_tbps for u in d2d)))


def edge_multisets(units: tuple[EdgeUnit, ...], max_units: int, length_mm: float):
    """(units, orders): every multiset of up to max_units units that fits along an edge of this
    length, with the number of ordered arrangements it stands for (edge_sequences, counted)."""
    for k in range(max_units + 1):
        for combo in itertools.combinations_with_replacement(range(len(units)), k):
            if sum(units[i].width_mm for i in combo) <= length_mm + 1e-9:
                orders = math.factorial(k)
                for c in Counter(combo).values():
                    orders //= math.factorial(c)
                yield tuple(units[i] for i in combo), orders


def _undominated(configs: list[EdgeConfig]) -> list[EdgeConfig]:
    """The configs no other of the same depth dominates (EdgeConfig.dominates, vectorized)."""
    import numpy as np

    keys = np.array([(c.dram_gb, c.dram_tbps, c.d2d_tbps, -c.budget_tbps) for c in configs], dtype=float)
    depth = np.array([c.depth_mm for c in configs], dtype=float)
    kept = []
    for k, c in enumerate(configs):
        same = np.isclose(depth, depth[k], rtol=1e-9, atol=0.0)   # math.isclose's default
        ge, gt = np.all(keys >= keys[k], axis=1), np.any(keys > keys[k], axis=1)
        if not np.any(same & ge & gt):
            kept.append(c)
    return kept


def edge_options(space: Space, length_mm: float, counts: dict, label: str) -> list[EdgeConfig]:
    """Deduplicated and pruned arrangements of one edge of the given length. The order of units
    never changes an edge's metrics, so arrangements are built as multisets and only counted."""
    ordered = 0
    unique = {}
    for combo, orders in edge_multisets(space.edge.units, space.edge.max_units, length_mm):
        ordered += orders
        cfg = edge_config(combo)
        unique.setdefault(cfg.units, cfg)
    kept = _undominated(list(unique.values()))
    counts[f"{label} edge arrangements"] = counts.get(f"{label} edge arrangements", 0) + ordered
    counts[f"{label} after dedup"] = counts.get(f"{label} after dedup", 0) + len(unique)
    counts[f"{label} after edge pruning"] = counts.get(f"{label} after edge pruning", 0) + len(kept)
    return sorted(kept, key=lambda c: c.units)


def _design_id(compute: str, edges) -> str:
    text = compute + "|" + "|".join(",".join(e) for e in edges)
    return f"{compute}-" + hashlib.sha256(text.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class AxisPair:
    """The two edges facing each other across one axis (N+S, or E+W): they add up in footprint,
    DRAM and budget; the links along that axis run at the weaker edge's D2D bandwidth."""

    a: EdgeConfig
    b: EdgeConfig
    depth_mm: float
    dram_gb: float
    dram_tbps: float
    link_tbps: float
    budget_tbps: float

    @classmethod
    def of(cls, a: EdgeConfig, b: EdgeConfig) -> "AxisPair":
        return cls(a, b, _round(a.depth_mm + b.depth_mm), _round(a.dram_gb + b.dram_gb),
                   _round(a.dram_tbps + b.dram_tbps), min(a.d2d_tbps, b.d2d_tbps),
                   _round(a.budget_tbps + b.budget_tbps))

    def key(self) -> tuple:
        return (self.dram_gb, self.dram_tbps, self.link_tbps, -self.budget_tbps)


def axis_pairs(edges: list[EdgeConfig], core_mm: float, wafer_mm: float) -> dict[int, list[AxisPair]]:
    """Pairs of opposite edges (unordered: the two sides are mirror images), grouped by how many
    dies fit along the axis; within a group only pairs no other pair dominates (at least as much
    DRAM, DRAM bandwidth and link bandwidth for no more budget) are kept: swapping in the
    dominating pair keeps every die within budget and no resource smaller, so the optimum survives."""
    groups: dict[int, dict[tuple, AxisPair]] = {}
    for a, b in itertools.combinations_with_replacement(edges, 2):
        pair = AxisPair.of(a, b)
        fits = int(wafer_mm // _round(core_mm + pair.depth_mm))
        if fits >= 1 and pair.link_tbps > 0:
            groups.setdefault(fits, {}).setdefault(pair.key(), pair)
    out = {}
    for fits, pairs in groups.items():
        keys = sorted(pairs, reverse=True)
        front: list[tuple] = []
        for k in keys:  # a dominating key sorts before the keys it dominates
            if not any(all(x >= y for x, y in zip(f, k)) for f in front):
                front.append(k)
        out[fits] = [pairs[k] for k in front]
    return out


def count_within_budget(ns: list[AxisPair], ew: list[AxisPair], budget: float) -> int:
    """How many (N+S, E+W) combinations fit the interface budget (counted, not built)."""
    import numpy as np

    costs = np.sort(np.array([p.budget_tbps for p in ew]))
    return int(sum(np.searchsorted(costs, budget - p.budget_tbps + 1e-9, side="right") for p in ns))


def dies_of(space: Space, die: ComputeDie, counts: dict) -> list[Design]:
    """The dies of this compute die within the interface budget, tiled on the wafer."""
    w, h = die.size_mm
    horizontal = edge_options(space, w, counts, "N/S")   # along the width
    vertical = edge_options(space, h, counts, "E/W")     # along the height
    budget = space.edge.budget_tbps
    all_ns = [AxisPair.of(a, b) for a, b in itertools.combinations_with_replacement(horizontal, 2)]
    all_ew = [AxisPair.of(a, b) for a, b in itertools.combinations_with_replacement(vertical, 2)]
    counts["dies within budget"] = counts.get("dies within budget", 0) + count_within_budget(all_ns, all_ew, budget)
    by_rows = axis_pairs(horizontal, h, space.wafer.height_mm)   # N+S depth sets the rows
    by_cols = axis_pairs(vertical, w, space.wafer.width_mm)      # E+W depth sets the columns
    out, seen = [], set()
    for rows, ns_pairs in by_rows.items():
        for cols, ew_pairs in by_cols.items():
            if rows * cols < space.min_dies:
                continue
            for ns in ns_pairs:
                for ew in ew_pairs:
                    if ns.budget_tbps + ew.budget_tbps > budget + 1e-9:
                        continue
                    metrics = (rows, cols, _round(ns.dram_gb + ew.dram_gb), _round(ns.dram_tbps + ew.dram_tbps),
                               min(ns.link_tbps, ew.link_tbps))
                    if metrics in seen:  # equal metrics: an equivalent die, already built
                        continue
                    seen.add(metrics)
                    edges = (ns.a.units, ew.a.units, ns.b.units, ew.b.units)
                    out.append(Design(_design_id(die.name, edges), die.name, edges,
                                      _round(w + ew.depth_mm), _round(h + ns.depth_mm), rows, cols,
                                      _round(die.peak_tflops), _round(ns.dram_gb + ew.dram_gb),
                                      _round(ns.dram_tbps + ew.dram_tbps), min(ns.link_tbps, ew.link_tbps),
                                      space.wafer.link_latency_us))
    counts["dies kept (axis pruning)"] = counts.get("dies kept (axis pruning)", 0) + len(out)
    return out


def design_of(space: Space, compute: str, edges: dict[str, list[str]]) -> Design:
    """The design with these units on each side (N, E, S, W), checked against the space's rules
    (units known, edges within length and unit count, die within the interface budget, at least one
    die on the wafer, links on every side): a way to ask whether a given wafer is a point of the space."""
    die = next((d for d in space.compute_dies if d.name == compute), None)
    if die is None:
        raise ValueError(f"no compute die {compute!r} in the space")
    units = {u.name: u for u in space.edge.units}
    w, h = die.size_mm
    cfg = {}
    for side in SIDES:
        names = edges.get(side, [])
        if any(n not in units for n in names):
            raise ValueError(f"side {side}: unknown unit in {names}")
        if len(names) > space.edge.max_units:
            raise ValueError(f"side {side}: {len(names)} units, at most {space.edge.max_units}")
        seq = [units[n] for n in names]
        length = w if side in ("N", "S") else h
        if sum(u.width_mm for u in seq) > length + 1e-9:
            raise ValueError(f"side {side}: units are {sum(u.width_mm for u in seq):g} mm long, the edge {length:g} mm")
        cfg[side] = edge_config(seq)
    ns, ew = AxisPair.of(cfg["N"], cfg["S"]), AxisPair.of(cfg["E"], cfg["W"])
    if ns.budget_tbps + ew.budget_tbps > space.edge.budget_tbps + 1e-9:
        raise ValueError(f"interface budget {ns.budget_tbps + ew.budget_tbps:g} TB/s exceeds {space.edge.budget_tbps:g}")
    die_w, die_h = _round(w + ew.depth_mm), _round(h + ns.depth_mm)
    rows, cols = int(space.wafer.height_mm // die_h), int(space.wafer.width_mm // die_w)
    link = min(ns.link_tbps, ew.link_tbps)
    if rows * cols < 1 or link <= 0:
        raise ValueError("no die fits the wafer, or a side has no link")
    key = tuple(cfg[s].units for s in SIDES)
    return Design(_design_id(compute, key), compute, key, die_w, die_h, rows, cols, _round(die.peak_tflops),
                  _round(ns.dram_gb + ew.dram_gb), _round(ns.dram_tbps + ew.dram_tbps), link,
                  space.wafer.link_latency_us)


def _canonical(design: Design, square_wafer: bool) -> tuple:
    rows, cols, *rest = design.metrics()
    if square_wafer:
        rows, cols = sorted((rows, cols))
    return (rows, cols, *rest)


def dominates(a: Design, b: Design, square_wafer: bool) -> bool:
    """a strictly dominates b: a mesh that contains b's, and no per-die resource smaller."""
    ra, ca, *ma = _canonical(a, square_wafer)
    rb, cb, *mb = _canonical(b, square_wafer)
    mine, theirs = (ra, ca, *ma), (rb, cb, *mb)
    return all(x >= y for x, y in zip(mine, theirs)) and mine != theirs


def enumerate_designs(space: Space) -> tuple[list[Design], dict]:
    """The designs that survive every step, and the count after each step."""
    counts: dict[str, int] = {}
    dies = [d for die in space.compute_dies for d in dies_of(space, die, counts)]
    square = math.isclose(space.wafer.width_mm, space.wafer.height_mm)
    unique: dict[tuple, Design] = {}
    for d in sorted(dies, key=lambda d: d.id):  # the same metrics: one design (the first id)
        unique.setdefault(_canonical(d, square), d)
    designs = list(unique.values())
    counts["wafers after dedup"] = len(designs)
    kept = pareto(designs, square)
    counts["wafers after wafer pruning"] = len(kept)
    return sorted(kept, key=lambda d: d.id), counts


def pareto(designs: list[Design], square_wafer: bool) -> list[Design]:
    """Designs no other design strictly dominates. Sorted so that a dominator comes first; each
    design is checked first against the front member that dominated the previous one (neighbours
    in this order are alike, so it usually does), then against the whole front at once (numpy)."""
    import numpy as np

    keyed = sorted(((_canonical(d, square_wafer), d) for d in designs), key=lambda kd: tuple(-x for x in kd[0]))
    front: list[Design] = []
    rows = np.empty((len(keyed), len(keyed[0][0]) if keyed else 0))
    n = 0
    last = None   # the key of the front member that dominated the previous design
    for key, d in keyed:
        if last is not None and all(x >= y for x, y in zip(last, key)) and last != key:
            continue
        k = np.asarray(key, dtype=float)
        if n:
            hit = np.all(rows[:n] >= k, axis=1) & np.any(rows[:n] > k, axis=1)
            if hit.any():
                last = tuple(rows[int(np.argmax(hit))])
                continue
        rows[n] = k
        n += 1
        front.append(d)
    return front
