"""The monthly rollups behind fast ``sacme report --month``: a report read off
them has the same numbers as one read off the job rows (and as the independent
computation of ``test_report_compute``), and a rollup that no longer matches
the jobs is never used. SQLite and Postgres via the ``store`` fixture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_report_compute import JULY, TDP, check, load, make_data

from slurm_acme.ingest.trace import import_trace
from slurm_acme.report.compute import build_report
from slurm_acme.report.period import Period, month_period, parse_instant
from slurm_acme.report.synthetic import synthetic_jobs, write_trace_csv
from slurm_acme.store.report import (
    JobAggregates,
    JobFilter,
    count_jobs,
    refresh_job_rollups,
    rolled_up_jobs,
    rollup_months,
)
from slurm_acme.store.rows import upsert
from slurm_acme.store.schema.core import jobs as jobs_table


@pytest.fixture
def loaded(store):  # type: ignore[no-untyped-def]
    """``test_report_compute``'s data in ``store``, sample keys made unique as the store keeps them."""
    data = make_data()
    for table, key in (("gpu_samples", ("cluster", "node", "ts", "gpu_index")), ("node_samples", ("cluster", "node", "ts"))):
        seen: set[tuple] = set()
        data[table] = [r for r in data[table]
                       if not (tuple(r[k] for k in key) in seen or seen.add(tuple(r[k] for k in key)))]
    load(store, data)
    return store, data


def rolled_up(store, flt: JobFilter) -> JobAggregates | None:  # type: ignore[no-untyped-def]
    with store.engine.connect() as conn:
        return rolled_up_jobs(conn, flt, count_jobs(conn, flt))


def rolled(store, flt: JobFilter) -> bool:  # type: ignore[no-untyped-def]
    """Whether a report for ``flt`` would read the rollups now."""
    return rolled_up(store, flt) is not None


def report(store, flt: JobFilter, period: Period) -> dict:  # type: ignore[no-untyped-def]
    return build_report(store, flt, period, tdp_watts=TDP, compare=True).to_json()


def test_month_from_rollups_equals_month_from_job_rows(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    july_seren = JobFilter(JULY.since_ts, JULY.until_ts, "seren")
    july_all = JobFilter(JULY.since_ts, JULY.until_ts)
    assert not rolled(store, july_seren)  # rows written without a refresh: no rollups yet
    from_rows = {flt: report(store, flt, JULY) for flt in (july_seren, july_all)}

    assert refresh_job_rollups(store) == 2 * 3  # June, July, August of both clusters
    assert rolled_up(store, july_seren).points  # one partition: its precomputed figures
    assert not rolled_up(store, july_all).points  # two clusters: merged value counts
    for flt in (july_seren, july_all):
        assert report(store, flt, JULY) == from_rows[flt]
        check(store, data, flt, JULY)


def test_month_aligned_range_reads_rollups_and_matches(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    refresh_job_rollups(store)
    since, until = parse_instant("2023-06-01", "--since"), parse_instant("2023-08-01", "--until")
    period = Period(since, until, "2023-06-01 .. 2023-08-01")
    for cluster in ("seren", None):
        flt = JobFilter(since, until, cluster)
        assert rolled(store, flt)
        check(store, data, flt, period)


def test_rollups_answer_only_whole_months_without_user_or_type() -> None:
    assert rollup_months(JobFilter(JULY.since_ts, JULY.until_ts, "seren")) == [JULY.since_ts]
    assert rollup_months(JobFilter(JULY.since_ts, JULY.until_ts, "seren", user="u003")) is None
    assert rollup_months(JobFilter(JULY.since_ts, JULY.until_ts, workload_type="SFT")) is None
    assert rollup_months(JobFilter(JULY.since_ts + 86400, JULY.until_ts)) is None
    assert rollup_months(JobFilter(None, JULY.until_ts)) is None
    assert rollup_months(JobFilter()) is None
    dec = month_period("2023-12")
    assert rollup_months(JobFilter(dec.since_ts, month_period("2024-02").since_ts)) == [
        dec.since_ts, month_period("2024-01").since_ts]


def test_job_written_behind_the_rollups_back_switches_to_job_rows(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    refresh_job_rollups(store)
    flt = JobFilter(JULY.since_ts, JULY.until_ts, "seren")
    extra = dict(data["jobs"][0], job_id="late-1", submit_ts=JULY.since_ts + 3600.0, gpus=64,
                 duration_s=12345.0, queue_s=77.0, gpu_time_s=64 * 12345.0, state="FAILED")
    with store.engine.begin() as conn:
        upsert(conn, jobs_table, [extra], ["cluster", "job_id"])
    data["jobs"].append(extra)
    assert not rolled(store, flt)  # the July partition no longer matches the jobs
    check(store, data, flt, JULY)
    assert refresh_job_rollups(store, [extra]) == 1  # what an ingest does after writing
    assert rolled(store, flt)
    check(store, data, flt, JULY)


def test_import_trace_leaves_current_rollups(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "trace_seren.csv"
    write_trace_csv(trace, synthetic_jobs(600, seed=5, start_ts=JULY.since_ts - 10 * 86400, span_s=40 * 86400,
                                          cluster="seren"))
    import_trace(store, trace, cluster="seren")
    flt = JobFilter(JULY.since_ts, JULY.until_ts, "seren")
    assert rolled(store, flt)
    with_rollups = report(store, flt, JULY)
    assert with_rollups["overview"]["gpu_jobs"] > 100
    # the same month read off the job rows: the rollup tables emptied
    from slurm_acme.store.schema.report import ROLLUP_TABLES

    with store.engine.begin() as conn:
        for table in ROLLUP_TABLES:
            conn.execute(table.delete())
    assert not rolled(store, flt)
    assert report(store, flt, JULY) == with_rollups


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.one_of(st.lists(st.integers(-2**40, 2**40), max_size=500).map(lambda v: np.array(v, dtype=np.int64)),
                 st.lists(st.floats(allow_nan=False), max_size=500).map(lambda v: np.array(v, dtype=np.float64))))
def test_distinct_is_np_unique_with_inverse(values):
    from slurm_acme.store.column_rollups import _distinct

    found, codes = _distinct(values)
    expected, inverse = np.unique(values, return_inverse=True)
    assert np.array_equal(found, expected) and np.array_equal(codes, inverse)


def test_the_rollup_writer_names_every_column_of_each_rollup_table():
    from slurm_acme.store.column_rollups import ROLLUP_FIELDS
    from slurm_acme.store.schema.report import ROLLUP_TABLES

    assert {t.name: tuple(c.name for c in t.c) for t in ROLLUP_TABLES} == ROLLUP_FIELDS
