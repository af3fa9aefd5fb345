"""Month by month: the ``trends`` section of a report that spans several months.

Admins watch a cluster month over month, and the paper's figures span six
months. Each month (UTC, clipped to the period) is computed exactly as a
one-month report would be, through the same store reader, so a whole month
without a user or type filter reads the monthly rollups and a six-month
range costs six small rollup reads, not six scans of the job rows.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from slurm_acme.report.period import Period
from slurm_acme.store import Store
from slurm_acme.store import report as q
from slurm_acme.store.report import JobFilter


def month_bounds(since_ts: float, until_ts: float) -> list[tuple[float, float]]:
    """``[since, until)`` cut at each UTC month start: ``(start, end)`` pairs."""
    out = []
    start = since_ts
    while start < until_ts:
        end = min(q.next_month(q.month_start(start)), until_ts)
        out.append((start, end))
        start = end
    return out


def _label(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m")


def _span(store: Store, flt: JobFilter) -> tuple[float, float] | None:
    """The period's bounds, open ends closed by the first and last job."""
    if flt.since_ts is not None and flt.until_ts is not None:
        return flt.since_ts, flt.until_ts
    found = q.submit_span(store, flt)
    if found is None:
        return None
    since = flt.since_ts if flt.since_ts is not None else q.month_start(found[0])
    until = flt.until_ts if flt.until_ts is not None else q.next_month(q.month_start(found[1]))
    return (since, until) if since < until else None


def trends_section(store: Store, flt: JobFilter, tdp_watts: float) -> dict[str, Any] | None:
    """One row per month, or ``None`` when the period lies within one month."""
    from slurm_acme.report.compute import job_sections, telemetry_sections  # compute imports this module

    span = _span(store, flt)
    if span is None:
        return None
    try:
        months = month_bounds(*span)
    except (OverflowError, OSError, ValueError):
        return None  # absurd submit times: no calendar to cut them by
    if len(months) < 2:
        return None
    rows = []
    for since, until in months:
        mflt = replace(flt, since_ts=since, until_ts=until)
        with q.read_report(store, mflt) as reader:
            jobs = job_sections(reader.jobs(), mflt, Period(since, until, _label(since)))
            utilisation, _ = telemetry_sections(reader, tdp_watts)
        o, w = jobs.overview, jobs.workload
        rows.append({
            "month": _label(since),
            "since": since,
            "until": until,
            "partial": q.month_start(since) != since or q.next_month(q.month_start(since)) != until,
            "jobs": o["jobs"],
            "gpu_jobs": o["gpu_jobs"],
            "gpu_hours": o["gpu_hours"],
            "workload": {t: {"gpu_job_share": v["gpu_job_share"], "gpu_time_share": v["gpu_time_share"]}
                         for t, v in w.items()},
            "gpu_run_time_median_s": o["gpu_run_time_median_s"],
            "gpu_queue_median_s": o["gpu_queue_median_s"],
            "failed_gpu_time_share": jobs.states["by_gpu_time"]["failed"],
            "util_median": utilisation["util_median"] if utilisation else None,
            "sm_active_median_pct": utilisation["sm_active_median_pct"] if utilisation else None,
        })
    return {"months": rows}
