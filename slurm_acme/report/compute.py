"""Assemble a :class:`Report` from the store's aggregates.

All heavy lifting is SQL behind :func:`slurm_acme.store.report.read_report`,
which hands back records; this module only adds up a few dozen aggregate
records into shares, means and CDFs. It never sees a database connection.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Protocol

from slurm_acme.errors import InputError
from slurm_acme.report import utilisation
from slurm_acme.report.findings import findings
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
from slurm_acme.report.trends import trends_section
from slurm_acme.store import Store
from slurm_acme.store import report as q
from slurm_acme.store.column_rollups import ALL_TYPES, OUTCOMES
from slurm_acme.store.report import (
    FailureGroup,
    JobAggregates,
    JobFilter,
    JobGroup,
    ReportReader,
    nearest_rank,
)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return float(num) / float(den)


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


class Quantiles(Protocol):
    """What a report reads off a distribution: its size, nearest-rank
    percentiles and how many values are ``<= x``. :class:`Distribution` knows
    every value; :class:`Figures` only the figures a rollup stored."""

    @property
    def n(self) -> int: ...

    def quantile(self, p: int) -> float | None: ...

    def at_most(self, x: float) -> int: ...


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
        """Only the stored points (``2**k`` seconds) can be read; any other
        ``x`` is a programming error, not a zero."""
        if not self.n:
            return 0
        if x not in self.counts_at_most:
            raise KeyError(f"the rollup stores counts <= 2**k only, not <= {x!r}")
        return self.counts_at_most[x]


@dataclass(frozen=True)
class Distributions:
    """One metric's distribution per workload type and over all types."""

    by_type: dict[str, Quantiles]
    overall: Quantiles

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
        found = figures.pop(ALL_TYPES, None)
        overall: Quantiles = found if found is not None else Distribution((), ())
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

    @classmethod
    def of_aggregates(cls, rows: Iterable[tuple], points: bool) -> Distributions:
        """From :class:`JobAggregates` ``run`` or ``queue`` rows."""
        return cls.of_points(rows) if points else cls.of(rows)

    def of_type(self, wtype: str) -> Quantiles:
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
    if q.cluster_exists(store, cluster):
        return
    known = q.known_clusters(store)
    raise InputError(
        f"--cluster {cluster!r} has no jobs in the store (known: {', '.join(known) or 'none'})"
    )


def _types_present(names: Iterable[str]) -> list[str]:
    extra = sorted({n for n in names if n not in WORKLOAD_TYPES})
    return [*WORKLOAD_TYPES, *extra]


@dataclass(frozen=True)
class JobSections:
    """The sections computed from a period's job aggregates alone."""

    overview: dict[str, Any]
    workload: dict[str, Any]
    durations: dict[str, Any]
    scale: dict[str, Any]
    states: dict[str, Any]


def job_sections(aggregates: JobAggregates, flt: JobFilter, period: Period) -> JobSections:
    """Overview, workload, durations, scale and states of ``aggregates``."""
    gpu = list(aggregates.groups)
    run = Distributions.of_aggregates(aggregates.run, aggregates.points)
    queue = Distributions.of_aggregates(aggregates.queue, aggregates.points)
    hist = _gpu_histogram(gpu)
    types = _types_present(g.wtype for g in gpu)
    return JobSections(
        overview=_overview(aggregates.total_jobs, gpu, hist, run, queue, flt, period),
        workload=_workload(gpu, hist, types),
        durations=_durations(run, queue, types),
        scale=_scale(hist),
        states=_states(gpu),
    )


def build_report(
    store: Store,
    flt: JobFilter,
    period: Period,
    *,
    tdp_watts: float,
    compare: bool,
) -> Report:
    """Ask the store for ``flt``'s aggregates and assemble every section.

    Whole-month reports without a user or type filter read the job sections
    off the store's monthly rollups when they are current, else the job rows;
    both give the same numbers."""
    with q.read_report(store, flt) as reader:
        jobs = job_sections(reader.jobs(), flt, period)
        utilisation, power = telemetry_sections(reader, tdp_watts)
        failures = failure_section(reader)
    sections = {
        "overview": jobs.overview, "workload": jobs.workload, "durations": jobs.durations,
        "scale": jobs.scale, "states": jobs.states, "utilisation": utilisation, "power": power,
        "failures": failures,
    }
    return Report(
        findings=findings(sections),
        overview=jobs.overview,
        trends=trends_section(store, flt, tdp_watts),
        workload=jobs.workload,
        durations=jobs.durations,
        scale=jobs.scale,
        states=jobs.states,
        utilisation=utilisation,
        power=power,
        failures=failures,
        compare=_compare(jobs.overview, jobs.states, flt) if compare else None,
    )


#: ``(type, GPUs per job, jobs, GPU time)`` per distinct type and GPU count.
Histogram = list[tuple[str, int, int, float]]


def _gpu_histogram(gpu: list[JobGroup]) -> Histogram:
    """``(type, gpus, jobs, gpu_time)`` per distinct GPU count, sorted."""
    merged: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0, 0.0])
    for g in gpu:
        cell = merged[(g.wtype, g.gpus)]
        cell[0] += g.jobs
        cell[1] += g.gtime
    return [(t, n, int(c[0]), c[1]) for (t, n), c in sorted(merged.items())]


def _jobs(groups: Iterable[JobGroup]) -> float:
    return float(sum(g.jobs for g in groups))


def _gtime(groups: Iterable[JobGroup]) -> float:
    return float(sum(g.gtime for g in groups))


def _overview(total_jobs: int, gpu: list[JobGroup], hist: Histogram, run: Distributions,
              queue: Distributions, flt: JobFilter, period: Period) -> dict[str, Any]:
    jobs = float(total_jobs)
    gpu_jobs = _jobs(gpu)
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
        "gpu_hours": _gtime(gpu) / 3600.0,
        "gpu_run_time_median_s": run.overall.quantile(50),
        "gpu_run_time_mean_s": _ratio(sum(g.dur_sum or 0.0 for g in gpu), sum(g.dur_n for g in gpu)),
        "gpu_run_time_max_s": _f(max((g.dur_max for g in gpu if g.dur_max is not None), default=None)),
        "gpu_queue_median_s": queue.overall.quantile(50),
        "gpu_queue_mean_s": _ratio(sum(g.que_sum or 0.0 for g in gpu), sum(g.que_n for g in gpu)),
        "gpu_num_mean": _ratio(sum(g.gpus * g.jobs for g in gpu), gpu_jobs),
        "gpu_num_median": histogram_quantile(sorted(by_gpus.items()), 50),
        "gpu_num_max": _f(max(by_gpus, default=None)),
    }


def _workload(gpu: list[JobGroup], hist: Histogram, types: list[str]) -> dict[str, Any]:
    total_jobs = _jobs(gpu)
    total_time = _gtime(gpu)
    out: dict[str, Any] = {}
    for wtype in types:
        rows = [g for g in gpu if g.wtype == wtype]
        demand = [(gpus, count) for t, gpus, count, _ in hist if t == wtype]
        out[wtype] = {
            "gpu_jobs": _jobs(rows),
            "gpu_job_share": _ratio(_jobs(rows), total_jobs),
            "gpu_time_share": _ratio(_gtime(rows), total_time),
            "gpu_demand": {f"p{p}": histogram_quantile(demand, p) for p in (25, 50, 75)},
        }
    return out


def _one_duration(dist: Quantiles, ks: tuple[int, ...]) -> dict[str, Any]:
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


def _scale(hist: Histogram) -> dict[str, Any]:
    total = sum(t for *_, t in hist)
    cdf = []
    for k in SCALE_CDF_KS:
        within = sum(t for _, gpus, _, t in hist if gpus <= 2**k)
        cdf.append({"gpus": float(2**k), "share": _ratio(within, total)})
    large = sum(t for _, gpus, _, t in hist if gpus >= LARGE_JOB_GPUS)
    return {"gpu_time_cdf": cdf, "share_gpu_time_ge_256": _ratio(large, total)}


def _states(gpu: list[JobGroup]) -> dict[str, Any]:
    jobs, time = _jobs(gpu), _gtime(gpu)
    by_count, by_time = {}, {}
    for outcome in OUTCOMES:
        rows = [g for g in gpu if g.outcome == outcome]
        by_count[outcome] = _ratio(_jobs(rows), jobs)
        by_time[outcome] = _ratio(_gtime(rows), time)
    return {"gpu_jobs": jobs, "gpu_time_s": time, "by_count": by_count, "by_gpu_time": by_time}


def telemetry_sections(reader: ReportReader, tdp_watts: float) -> tuple[dict | None, dict | None]:
    """The utilisation and power sections (both ``None`` without samples);
    computed by :mod:`slurm_acme.report.utilisation` from the rollups."""
    return utilisation.sections(reader.telemetry(), tdp_watts, cluster_scope=not reader.flt.narrows_jobs)


def _failure_rows(groups: list[FailureGroup]) -> list[dict[str, Any]]:
    total_time = sum(g.gpu_time for g in groups)
    rows = []
    for g in groups:
        row: dict[str, Any] = {"origin": g.origin}
        if g.category is not None:
            row["category"] = g.category
        row.update({
            "count": float(g.count),
            "gpu_time_share": _ratio(g.gpu_time, total_time),
            "mean_gpus": g.mean_gpus,
            "ttf_median_s": g.ttf_median_s,
            "recovery_median_s": g.recovery_median_s,
        })
        rows.append(row)
    return rows


def failure_section(reader: ReportReader) -> dict[str, Any] | None:
    """Failures per (origin, category), per origin and per node; ``None`` without any."""
    by_category = _failure_rows(reader.failures(by_category=True))
    if not by_category:
        return None
    return {
        "total": float(sum(r["count"] for r in by_category)),
        "by_category": by_category,
        "by_origin": _failure_rows(reader.failures(by_category=False)),
        "by_node": node_rows(reader),
    }


def node_rows(reader: ReportReader) -> list[dict[str, Any]]:
    """The per-node view from the node-health ledger: events, jobs hit, GPU time lost."""
    return [{"node": n.node, "events": float(n.events), "jobs_hit": float(n.jobs_hit),
             "gpu_hours_lost": n.gpu_time_lost_s / 3600.0, "categories": list(n.categories)}
            for n in reader.node_losses()]


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
