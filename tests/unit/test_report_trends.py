"""The ``trends`` section: a range over several months gets one row per month,
each against an independent computation from the generated rows, and a
six-month range reads the monthly rollups (SQLite and Postgres)."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest
from test_report_compute import TDP, TYPES, assert_matches, gtime, in_bin, load_unique, nearest, outcome, share

from slurm_acme.report.compute import build_report
from slurm_acme.report.period import Period, month_period, resolve_period
from slurm_acme.report.synthetic import synthetic_jobs
from slurm_acme.store.report import JobFilter, read_report, refresh_job_rollups

MARCH = month_period("2023-03")
SEPTEMBER = month_period("2023-09")


def six_months() -> dict[str, list[dict]]:
    """Jobs of two clusters submitted over March-August 2023 (and a few outside),
    GPU samples across the months, no failures."""
    rng = random.Random(23)
    span = SEPTEMBER.since_ts - MARCH.since_ts
    jobs = list(synthetic_jobs(1500, seed=23, start_ts=MARCH.since_ts - 5 * 86400, span_s=span + 10 * 86400,
                               cluster="seren"))
    jobs += list(synthetic_jobs(200, seed=24, start_ts=MARCH.since_ts, span_s=span, cluster="kalos"))
    samples = []
    for i in range(900):
        ts = float(int(MARCH.since_ts + rng.random() * span))
        samples.append({"cluster": "seren" if i % 5 else "kalos", "node": f"n{i % 7}", "ts": ts, "gpu_index": i % 8,
                        "job_id": None, "util_percent": float(rng.choice([0, 10, 50, 90, 100])),
                        "sm_active": round(rng.random(), 3), "mem_used_bytes": None, "mem_total_bytes": None,
                        "power_w": float(rng.choice([60, 300, 450]))})
    return {"jobs": jobs, "gpu_samples": samples, "node_samples": [], "failures": []}


def month_label(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m")


def expected_months(data: dict, flt: JobFilter, bounds: list[tuple[float, float]]) -> list[dict]:
    rows = []
    for since, until in bounds:
        sel = [j for j in data["jobs"] if since <= j["submit_ts"] < until
               and (flt.cluster is None or j["cluster"] == flt.cluster)]
        gpu = [j for j in sel if j["gpus"] > 0]
        total = sum(gtime(j) for j in gpu)
        samples = [s for s in data["gpu_samples"] if since <= s["ts"] < until
                   and (flt.cluster is None or s["cluster"] == flt.cluster)]
        whole = month_period(month_label(since))
        rows.append({
            "month": month_label(since), "since": since, "until": until,
            "partial": (since, until) != (whole.since_ts, whole.until_ts),
            "jobs": float(len(sel)), "gpu_jobs": float(len(gpu)), "gpu_hours": total / 3600,
            "workload": {t: {"gpu_job_share": share(sum(j["workload_type"] == t for j in gpu), len(gpu)),
                             "gpu_time_share": share(sum(gtime(j) for j in gpu if j["workload_type"] == t), total)}
                         for t in TYPES},
            "gpu_run_time_median_s": nearest([j["duration_s"] for j in gpu if j["duration_s"] is not None], 50),
            "gpu_queue_median_s": nearest([j["queue_s"] for j in gpu if j["queue_s"] is not None], 50),
            "failed_gpu_time_share": share(sum(gtime(j) for j in gpu if outcome(j["state"]) == "failed"), total),
            # the utilisation section's medians: hourly rollups, lower edge of the 1 % bin
            "util_median": in_bin(nearest([s["util_percent"] for s in samples], 50), 1),
            "sm_active_median_pct": in_bin(nearest([100.0 * s["sm_active"] for s in samples], 50), 1),
        })
    return rows


def whole_months(first: str, count: int) -> list[tuple[float, float]]:
    out, period = [], month_period(first)
    for _ in range(count):
        out.append((period.since_ts, period.until_ts))
        period = month_period(month_label(period.until_ts))
    return out


@pytest.fixture
def loaded(store):  # type: ignore[no-untyped-def]
    return store, load_unique(store, six_months())


def trends(store, flt: JobFilter, period: Period) -> dict | None:  # type: ignore[no-untyped-def]
    return build_report(store, flt, period, tdp_watts=TDP, compare=False).trends


def test_six_months_get_one_row_each_from_the_rollups(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    period = resolve_period(None, "2023-03-01", "2023-09-01")
    months = whole_months("2023-03", 6)
    for cluster in ("seren", None):
        flt = JobFilter(period.since_ts, period.until_ts, cluster)
        before = trends(store, flt, period)  # no rollups yet: the job rows
        assert before is not None
        assert_matches(before["months"], expected_months(data, flt, months), f"trends {cluster}")
    assert refresh_job_rollups(store) > 0
    for cluster in ("seren", None):
        flt = JobFilter(period.since_ts, period.until_ts, cluster)
        for since, until in months:
            with read_report(store, JobFilter(since, until, cluster)) as reader:
                assert reader.jobs().from_rollups  # what each trend row reads
        after = trends(store, flt, period)
        assert after is not None
        assert_matches(after["months"], expected_months(data, flt, months), f"rolled-up trends {cluster}")


def test_a_range_cut_mid_month_has_partial_first_and_last_rows(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    period = resolve_period(None, "2023-04-15", "2023-06-10")
    flt = JobFilter(period.since_ts, period.until_ts, "seren")
    got = trends(store, flt, period)
    assert got is not None
    bounds = [(period.since_ts, month_period("2023-05").since_ts), (month_period("2023-05").since_ts,
              month_period("2023-06").since_ts), (month_period("2023-06").since_ts, period.until_ts)]
    assert_matches(got["months"], expected_months(data, flt, bounds), "trends")
    assert [m["partial"] for m in got["months"]] == [True, False, True]


def test_all_time_spans_the_months_that_hold_jobs(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    flt = JobFilter(cluster="kalos")
    got = trends(store, flt, Period(None, None, "all time"))
    assert got is not None
    first = min(j["submit_ts"] for j in data["jobs"] if j["cluster"] == "kalos")
    last = max(j["submit_ts"] for j in data["jobs"] if j["cluster"] == "kalos")
    assert got["months"][0]["month"] == month_label(first) and got["months"][-1]["month"] == month_label(last)


def test_one_month_has_no_trends(loaded) -> None:  # type: ignore[no-untyped-def]
    store, _ = loaded
    july = month_period("2023-07")
    assert trends(store, JobFilter(july.since_ts, july.until_ts, "seren"), july) is None
    inside = resolve_period(None, "2023-07-03", "2023-07-20")
    assert trends(store, JobFilter(inside.since_ts, inside.until_ts), inside) is None
