"""What the leaderboard charts draw, computed from records: pure functions, plain data out.

The UI draws these in a few lines (Vega-Lite, app/leaderboard_charts.py); the numbers are tested here. No figure is ever
made up: a chart whose inputs are missing (no FLOPs, no measured peaks) says so instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from store.records import Record, Workload, target_short


def gflops_by_workload(records: Iterable[Record], names: dict[str, str]) -> list[dict]:
    """Per workload and source: the best GFLOPS (rankable records with known FLOPs only), for a
    grouped bar chart of manual vs search (vs import, default). Sorted by workload name."""
    best: dict[tuple[str, str], Record] = {}
    for r in records:
        if not r.ok or r.gflops is None:
            continue
        key = (r.workload_key, r.source)
        if key not in best or r.gflops > best[key].gflops:
            best[key] = r
    rows = [{"workload": names.get(k, k), "source": s, "gflops": r.gflops, "median_ms": r.median_s * 1e3,
             "id": r.id, "target": target_short(r.target), "hardware": r.hardware} for (k, s), r in best.items()]
    return sorted(rows, key=lambda row: (row["workload"], row["source"]))


def history_series(records: Iterable[Record]) -> dict:
    """Points of one workload's history in time order, and the best-so-far line.

    The metric is GFLOPS (higher is better) when every ranked record has it, else the median in
    ms (lower is better). Failed records are counted, not plotted."""
    ordered = sorted(records, key=lambda r: (r.created, r.id or 0))
    ranked = [r for r in ordered if r.ok]
    metric = "gflops" if ranked and all(r.gflops is not None for r in ranked) else "median_ms"
    points, line, best = [], [], None
    for r in ranked:
        value = r.gflops if metric == "gflops" else r.median_s * 1e3
        better = best is None or (value > best if metric == "gflops" else value < best)
        if better:
            best = value
        points.append({"created": r.created, "value": value, "source": r.source, "id": r.id, "record_best": better})
        line.append({"created": r.created, "value": best})
    return {"metric": metric, "points": points, "best_so_far": line, "failed": len(ordered) - len(ranked)}


def measured_peaks(records: Iterable[Record]) -> tuple[float, float] | None:
    """(peak GFLOPS, peak GB/s) from the newest record whose environment carries both (the
    Schedule page's calibration puts them there), else None."""
    newest = None
    for r in records:
        env = r.environment or {}
        if env.get("peak_gflops") and env.get("peak_gbps") and (newest is None or r.created > newest.created):
            newest = r
    if newest is None:
        return None
    return float(newest.environment["peak_gflops"]), float(newest.environment["peak_gbps"])


def compulsory_bytes(w: Workload) -> float | None:
    """Bytes a workload must move at least (``shapes["bytes"]`` or ``shapes["min_bytes"]``)."""
    shapes = w.shapes or {}
    value = shapes.get("bytes") or shapes.get("min_bytes")
    return float(value) if value else None


def roofline_ceiling(intensity: float, peak_gflops: float, peak_gbps: float) -> float:
    """GFLOPS the roofline allows at ``intensity`` FLOPs per byte: min(peak, intensity x bandwidth)."""
    return min(peak_gflops, intensity * peak_gbps)


# what a point's GFLOPS counts: mostly multiply-adds (the FMA units' figure, under the ceiling), or largely
# element-wise work beside them (an activation fused into a convolution: its count may read above the ceiling, which
# is the FMA units'; explorer.workload.product_flops)
PRODUCTS = "multiply-adds"
BESIDE_PRODUCTS = "largely element-wise ops"


def roofline(records: Iterable[Record], workloads: dict[str, Workload], peak_gflops: float,
             peak_gbps: float) -> dict:
    """Roofline data: one point per ranked record with FLOPs and bytes known (arithmetic
    intensity = FLOPs / compulsory bytes), and the ceiling min(peak, intensity x bandwidth)
    sampled on a log scale around the points and the ridge point. Each point says what its FLOPs
    count (``counted``: :data:`PRODUCTS` or :data:`BESIDE_PRODUCTS`, from the workload's
    ``shapes["beside_products"]``): a fused activation's element-wise ops run on other vector units
    than the FMAs, so such a point above the ceiling is no figure above the FMA units' peak."""
    points = []
    for r in records:
        w = workloads.get(r.workload_key)
        nbytes = compulsory_bytes(w) if w else None
        if not (r.ok and r.gflops is not None and w and w.flops and nbytes):
            continue
        beside = bool((w.shapes or {}).get("beside_products"))
        points.append({"workload": w.name, "intensity": w.flops / nbytes, "gflops": r.gflops, "source": r.source,
                       "id": r.id, "bound": roofline_ceiling(w.flops / nbytes, peak_gflops, peak_gbps),
                       "counted": BESIDE_PRODUCTS if beside else PRODUCTS})
    ridge = peak_gflops / peak_gbps
    xs = [p["intensity"] for p in points] + [ridge]
    lo, hi = math.log10(min(xs) / 4), math.log10(max(xs) * 4)
    grid = sorted({10 ** (lo + (hi - lo) * i / 60) for i in range(61)} | {ridge})
    ceiling = [{"intensity": x, "gflops": roofline_ceiling(x, peak_gflops, peak_gbps)} for x in grid]
    return {"points": points, "ceiling": ceiling, "ridge": ridge, "peak_gflops": peak_gflops, "peak_gbps": peak_gbps}


__all__ = ["BESIDE_PRODUCTS", "PRODUCTS", "compulsory_bytes", "gflops_by_workload", "history_series", "measured_peaks", "roofline", "roofline_ceiling"]
