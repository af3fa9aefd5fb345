"""Assemble a :class:`Report` from the store's aggregates.

All heavy lifting is SQL in :mod:`slurm_acme.store.report`; this module only
adds up a few dozen aggregate rows into shares, means and CDFs.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from sqlalchemy import Connection

from slurm_acme.errors import InputError
from slurm_acme.report.model import (
    LARGE_JOB_GPUS,
    PERCENTILES,
    QUEUE_CDF_KS,
    RUN_CDF_KS,
    SCALE_CDF_KS,
    WORKLOAD_TYPES,
    Report,
)
from slurm_acme.report.period import Period
from slurm_acme.report.reference import reference_rows
from slurm_acme.store import Store
from slurm_acme.store import report as q
from slurm_acme.store.report import OUTCOMES, JobFilter, nearest_rank


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return float(num) / float(den)


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Distribution:
    """A discrete distribution as sorted distinct values and cumulative counts."""

    values: tuple[float, ...]
    cumulative: tuple[int, ...]

    @classmethod
    def of(cls, pairs: list[tuple[float, int]]) -> Distribution:
        """From ``(value, count)`` pairs with distinct values, in any order."""
        if not pairs:
            return cls((), ())
        pairs.sort()
        values, counts = zip(*pairs, strict=False)
        return cls(values, tuple(accumulate(counts)))

    @property
    def n(self) -> int:
        return self.cumulative[-1] if self.cumulative else 0

    def quantile(self, p: int) -> float | None:
        """Nearest rank: the value at rank ``ceil(p * n / 100)``."""
        if not self.n:
            return None
        return self.values[bisect_left(self.cumulative, nearest_rank(p, self.n))]

    def at_most(self, x: float) -> int:
        """How many values are ``<= x``."""
        i = bisect_right(self.values, x)
        return self.cumulative[i - 1] if i else 0


@dataclass(frozen=True)
class Figures:
    """A distribution known only by the figures a report reads off it (the
    store's precomputed ``n``, whole-percent quantiles and counts ``<= x``),
    with :class:`Distribution`'s interface."""

    n: int
    quantiles: dict[int, float]
    counts_at_most: dict[float, int]

    def quantile(self, p: int) -> float | None:
        return self.quantiles[p] if self.n else None

    def at_most(self, x: float) -> int:
        return self.counts_at_most[x] if self.n else 0


@dataclass(frozen=True)
class Distributions:
    """One metric's distribution per workload type and over all types."""

    by_type: dict[str, Distribution | Figures]
    overall: Distribution | Figures

    @classmethod
    def of_points(cls, rows: Iterable[tuple[str, str, float, float]]) -> Distributions:
        """From ``(type, kind, x, value)`` rows (``type`` ``'*'`` = all types)."""
        parts: dict[str, tuple[list, dict, dict]] = defaultdict(lambda: ([0], {}, {}))
        for wtype, kind, x, value in rows:
            n, quantiles, at_most = parts[wtype]
            if kind == "n":
                n[0] = int(value)
            elif kind == "p":
                quantiles[int(x)] = float(value)
            else:
                at_most[float(x)] = int(value)
        figures = {t: Figures(n[0], qs, le) for t, (n, qs, le) in parts.items()}
        overall = figures.pop(q.ALL_TYPES, None) or Distribution((), ())
        return cls({t: f for t, f in figures.items() if f.n}, overall)

    @classmethod
    def of(cls, rows: Iterable[tuple[str, float, int]]) -> Distributions:
        """From ``(type, value, count)`` rows, one per distinct (type, value)."""
        per_type: dict[str, list[tuple[float, int]]] = defaultdict(list)
        total: dict[float, int] = defaultdict(int)
        for wtype, value, count in rows:
            per_type[wtype].append((value, count))
            total[value] += count
        return cls({t: Distribution.of(p) for t, p in per_type.items()}, Distribution.of(list(total.items())))

    def of_type(self, wtype: str) -> Distribution | Figures:
        return self.by_type.get(wtype) or Distribution((), ())


def histogram_quantile(pairs: Iterable[tuple[int, int]], p: int) -> float | None:
    """Nearest-rank percentile from ``(value, count)`` pairs sorted by value."""
    pairs = list(pairs)
    n = sum(c for _, c in pairs)
    if n == 0:
        return None
    rank, seen = nearest_rank(p, n), 0
    for value, count in pairs:
        seen += count
        if seen >= rank:
            return float(value)
    raise AssertionError("rank beyond histogram")  # pragma: no cover


def canonical_type(name: str) -> str:
    """``--type sft`` -> ``SFT``; anything else is a one-line error."""
    for wtype in WORKLOAD_TYPES:
        if wtype.lower() == name.strip().lower():
            return wtype
    raise InputError(f"--type {name!r} is not a workload type (one of {', '.join(WORKLOAD_TYPES)})")


def check_cluster(store: Store, cluster: str) -> None:
    """``--cluster`` must name a cluster with jobs in the store."""
    with store.engine.connect() as conn:
        if q.cluster_exists(conn, cluster):
            return
        known = q.known_clusters(conn)
    raise InputError(
        f"--cluster {cluster!r} has no jobs in the store (known: {', '.join(known) or 'none'})"
    )


def _types_present(names: Iterable[str]) -> list[str]:
    extra = sorted({n for n in names if n not in WORKLOAD_TYPES})
    return [*WORKLOAD_TYPES, *extra]


def build_report(
    store: Store,
    flt: JobFilter,
    period: Period,
    *,
    tdp_watts: float,
    compare: bool,
) -> Report:
    """Run the aggregates for ``flt`` and assemble every section.

    Whole-month reports without a user or type filter read the job sections
    off the store's monthly rollups when they are current, else the job rows;
    both give the same numbers."""
    with store.engine.connect() as conn:
        try:
            total_jobs = q.count_jobs(conn, flt)
            rolled = q.rolled_up_jobs(conn, flt, total_jobs)
            if rolled is None:
                q.select_jobs(conn, flt)
                gpu = q.job_groups(conn)
                run = Distributions.of(q.value_histogram(conn, "dur"))
                queue = Distributions.of(q.value_histogram(conn, "que"))
            elif rolled.points:
                gpu, run, queue = rolled.gpu, Distributions.of_points(rolled.run), Distributions.of_points(rolled.queue)
            else:
                gpu, run, queue = rolled.gpu, Distributions.of(rolled.run), Distributions.of(rolled.queue)
            utilisation, power = _telemetry(conn, flt, tdp_watts)
            failures = _failures(conn, flt)
        finally:
            q.release_jobs(conn)
            conn.rollback()
    hist = _gpu_histogram(gpu)
    types = _types_present(g["wtype"] for g in gpu)
    overview = _overview(total_jobs, gpu, hist, run, queue, flt, period)
    states = _states(gpu)
    return Report(
        overview=overview,
        workload=_workload(gpu, hist, types),
        durations=_durations(run, queue, types),
        scale=_scale(hist),
        states=states,
        utilisation=utilisation,
        power=power,
        failures=failures,
        compare=_compare(overview, states, flt) if compare else None,
    )


def _gpu_histogram(gpu: list[dict[str, Any]]) -> list[tuple[str, int, int, float]]:
    """``(type, gpus, jobs, gpu_time)`` per distinct GPU count, sorted."""
    merged: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0, 0.0])
    for g in gpu:
        cell = merged[(g["wtype"], int(g["gpus"]))]
        cell[0] += g["jobs"]
        cell[1] += float(g["gtime"] or 0.0)
    return [(t, n, int(c[0]), c[1]) for (t, n), c in sorted(merged.items())]


def _sum(rows: Iterable[dict[str, Any]], key: str) -> float:
    return float(sum(r[key] or 0 for r in rows))


def _overview(total_jobs: int, gpu, hist, run: Distributions, queue: Distributions,  # type: ignore[no-untyped-def]
              flt: JobFilter, period: Period) -> dict[str, Any]:
    jobs = float(total_jobs)
    gpu_jobs = _sum(gpu, "jobs")
    by_gpus: dict[int, int] = defaultdict(int)
    for _, gpus, count, _ in hist:
        by_gpus[gpus] += count
    return {
        "period": {"label": period.label, "since": period.since_ts, "until": period.until_ts},
        "cluster": flt.cluster,
        "user": flt.user,
        "type": flt.workload_type,
        "empty": jobs == 0,
        "jobs": jobs,
        "cpu_jobs": jobs - gpu_jobs,
        "gpu_jobs": gpu_jobs,
        "gpu_hours": _sum(gpu, "gtime") / 3600.0,
        "gpu_run_time_median_s": run.overall.quantile(50),
        "gpu_run_time_mean_s": _ratio(_sum(gpu, "dur_sum"), _sum(gpu, "dur_n")),
        "gpu_run_time_max_s": _f(max((g["dur_max"] for g in gpu if g["dur_max"] is not None), default=None)),
        "gpu_queue_median_s": queue.overall.quantile(50),
        "gpu_queue_mean_s": _ratio(_sum(gpu, "que_sum"), _sum(gpu, "que_n")),
        "gpu_num_mean": _ratio(sum(g["gpus"] * g["jobs"] for g in gpu), gpu_jobs),
        "gpu_num_median": histogram_quantile(sorted(by_gpus.items()), 50),
        "gpu_num_max": _f(max(by_gpus, default=None)),
    }


def _workload(gpu, hist, types: list[str]) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    total_jobs = _sum(gpu, "jobs")
    total_time = _sum(gpu, "gtime")
    out: dict[str, Any] = {}
    for wtype in types:
        rows = [g for g in gpu if g["wtype"] == wtype]
        demand = [(gpus, count) for t, gpus, count, _ in hist if t == wtype]
        out[wtype] = {
            "gpu_jobs": _sum(rows, "jobs"),
            "gpu_job_share": _ratio(_sum(rows, "jobs"), total_jobs),
            "gpu_time_share": _ratio(_sum(rows, "gtime"), total_time),
            "gpu_demand": {f"p{p}": histogram_quantile(demand, p) for p in (25, 50, 75)},
        }
    return out


def _one_duration(dist: Distribution, ks: tuple[int, ...]) -> dict[str, Any]:
    n = float(dist.n)
    return {
        "n": n,
        **{f"p{p}": dist.quantile(p) for p in PERCENTILES},
        "cdf": [{"le_s": float(2**k), "share": _ratio(dist.at_most(2.0**k), n)} for k in ks],
    }


def _durations(run: Distributions, queue: Distributions, types: list[str]) -> dict[str, Any]:
    out = {"overall": {"run_time": _one_duration(run.overall, RUN_CDF_KS),
                       "queue": _one_duration(queue.overall, QUEUE_CDF_KS)}}
    for wtype in types:
        out[wtype] = {"run_time": _one_duration(run.of_type(wtype), RUN_CDF_KS),
                      "queue": _one_duration(queue.of_type(wtype), QUEUE_CDF_KS)}
    return out


def _scale(hist) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    total = sum(t for *_, t in hist)
    cdf = []
    for k in SCALE_CDF_KS:
        within = sum(t for _, gpus, _, t in hist if gpus <= 2**k)
        cdf.append({"gpus": float(2**k), "share": _ratio(within, total)})
    large = sum(t for _, gpus, _, t in hist if gpus >= LARGE_JOB_GPUS)
    return {"gpu_time_cdf": cdf, "share_gpu_time_ge_256": _ratio(large, total)}


def _states(gpu) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    jobs, time = _sum(gpu, "jobs"), _sum(gpu, "gtime")
    by_count, by_time = {}, {}
    for outcome in OUTCOMES:
        rows = [g for g in gpu if g["outcome"] == outcome]
        by_count[outcome] = _ratio(_sum(rows, "jobs"), jobs)
        by_time[outcome] = _ratio(_sum(rows, "gtime"), time)
    return {"gpu_jobs": jobs, "gpu_time_s": time, "by_count": by_count, "by_gpu_time": by_time}


def _telemetry(conn: Connection, flt: JobFilter, tdp_watts: float) -> tuple[dict | None, dict | None]:
    stats = q.gpu_sample_stats(conn, flt, tdp_watts)
    cluster_scope = not flt.narrows_jobs
    node_n = q.node_sample_count(conn, flt) if cluster_scope else 0
    if not stats["samples"] and not node_n:
        return None, None
    medians = q.gpu_sample_medians(conn, flt)
    nodes = q.node_sample_medians(conn, flt) if cluster_scope else {"cpu": None, "mem": None}
    utilisation = {
        "gpu_samples": float(stats["samples"]),
        "node_samples": float(node_n),
        "zero_util_share": _ratio(stats["util_zero"], stats["util_n"]),
        "util_median": medians["util"],
        "sm_active_median": medians["sm_active"],
        "fb_ge_75_share": _ratio(stats["fb_high"], stats["fb_n"]),
        "cpu_median": nodes["cpu"],
        "mem_median": nodes["mem"],
    }
    share = None
    if cluster_scope:
        gpu_w, node_w = q.power_by_node(conn, flt)
        both = sorted(set(gpu_w) & set(node_w))
        share = _ratio(sum(gpu_w[k] for k in both), sum(node_w[k] for k in both))
    power = {
        "tdp_w": float(tdp_watts),
        "idle_gpu_power_median_w": medians["idle_power"],
        "over_tdp_share": _ratio(stats["power_over_tdp"], stats["power_n"]),
        "gpu_share_of_server_power": share,
    }
    return utilisation, power


def _failure_rows(conn: Connection, flt: JobFilter, by_category: bool) -> list[dict[str, Any]]:
    groups = q.failure_groups(conn, flt, by_category)
    medians = q.failure_medians(conn, flt, by_category)
    total_time = sum(float(g["gpu_time"]) for g in groups)
    rows = []
    for g in groups:
        key = (g["origin"], g["category"]) if by_category else (g["origin"],)
        row = {"origin": g["origin"]}
        if by_category:
            row["category"] = g["category"]
        row.update({
            "count": float(g["count"]),
            "gpu_time_share": _ratio(g["gpu_time"], total_time),
            "mean_gpus": _f(g["mean_gpus"]),
            "ttf_median_s": medians["ttf"].get(key, {}).get(50),
            "recovery_median_s": medians["recovery"].get(key, {}).get(50),
        })
        rows.append(row)
    return rows


def _failures(conn: Connection, flt: JobFilter) -> dict[str, Any] | None:
    by_category = _failure_rows(conn, flt, by_category=True)
    if not by_category:
        return None
    return {
        "total": float(sum(r["count"] for r in by_category)),
        "by_category": by_category,
        "by_origin": _failure_rows(conn, flt, by_category=False),
    }


def _compare(overview: dict[str, Any], states: dict[str, Any], flt: JobFilter) -> list[dict[str, Any]]:
    count, time = states["by_count"], states["by_gpu_time"]
    mine = {
        "cluster": flt.cluster or "this store",
        "source": "this report",
        "job_num": overview["jobs"],
        "cpu_job_num": overview["cpu_jobs"],
        "gpu_job_num": overview["gpu_jobs"],
        "avg_run_time_gpu": overview["gpu_run_time_mean_s"],
        "avg_que_time_gpu": overview["gpu_queue_mean_s"],
        "avg_gpu_num": overview["gpu_num_mean"],
        "med_run_time_gpu": overview["gpu_run_time_median_s"],
        "med_que_time_gpu": overview["gpu_queue_median_s"],
        "med_gpu_num": overview["gpu_num_median"],
        "max_run_time_gpu": overview["gpu_run_time_max_s"],
        "max_gpu": overview["gpu_num_max"],
        "complete_rate_gpu": count["completed"],
        "cancel_rate_gpu": count["cancelled"],
        "fail_rate_gpu": count["failed"],
        "complete_rate_gpu_time": time["completed"],
        "cancel_rate_gpu_time": time["cancelled"],
        "fail_rate_gpu_time": time["failed"],
    }
    return [mine, *reference_rows()]
