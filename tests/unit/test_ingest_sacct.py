"""sacct ingest into a real store (SQLite and Postgres, via the shared ``store``
fixture) with Slurm faked at the client."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import func, select

from slurm_acme.config import AcmeConfig
from slurm_acme.ingest.sacct import OVERLAP, WINDOW, ingest_sacct, job_row
from slurm_acme.ingest.workload import classify, type_from_comment
from slurm_acme.slurm import JobState, parse
from slurm_acme.store.schema.core import jobs

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "slurm" / "22.05" / "sacct.json"
RULES = AcmeConfig().cluster.name_rules
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


class FakeSlurm:
    def __init__(self, records):
        self.records = records
        self.windows = []

    def sacct(self, start, end=None, job_ids=None, all_users=True):
        self.windows.append((start, end))
        return list(self.records)


@pytest.fixture
def records():
    return parse.parse_sacct_json(FIXTURE.read_text())


def stored_restarts(store, name: str) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(jobs.c.restarts).where(jobs.c.name == name)).scalar_one()


def count(store):
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(jobs)).scalar_one()


@pytest.mark.parametrize(("comment", "name", "expected"), [
    ("acme:type=Debug", "pretrain-7b", "Debug"),
    ("run=1 acme:type=pretrain", "x", "Pretrain"),
    ("acme:type=Bogus", "opencompass eval", "Eval"),
    ("", "llava-sft", "SFT"),
    (None, "something", "Other"),
    ("xacme:type=Debug", "job", "Other"),
])
def test_workload_type_from_comment_then_rules_then_other(comment, name, expected):
    assert classify(comment, name, RULES) == expected


def test_comment_type_is_canonical_case():
    assert type_from_comment("acme:type=mllm") == "MLLM"


def test_job_row_fields(records):
    row = job_row(next(r for r in records if r.name == "pt 7b"), "acme", RULES)
    assert row["workload_type"] == "Debug" and row["gpus"] == 16 and row["nodes"] == 2
    assert row["duration_s"] == 3 and row["gpu_time_s"] == 48 and row["queue_s"] == 0
    assert row["state"] == "COMPLETED" and row["source"] == "sacct"


def test_array_tasks_are_stored_under_their_array_ids(records):
    ids = {job_row(r, "acme", RULES)["job_id"] for r in records if r.name == "arr"}
    assert ids == {"3_0", "3_1", "3_2"}


def test_ingest_is_idempotent(store, records):
    slurm = FakeSlurm(records)
    first = ingest_sacct(store, slurm, cluster="acme", rules=RULES, now=NOW)
    second = ingest_sacct(store, slurm, cluster="acme", rules=RULES, now=NOW + timedelta(hours=1))
    assert first.inserted == first.finished == len(records) == count(store)
    assert second.inserted == 0 and second.updated == len(records)


def test_ingest_skips_jobs_that_have_not_finished(store, records):
    running = replace(records[0], job_id="999", state=JobState.RUNNING)
    result = ingest_sacct(store, FakeSlurm([*records, running]), cluster="acme", rules=RULES, now=NOW)
    assert result.seen == len(records) + 1 and result.finished == len(records)


def test_second_ingest_resumes_from_watermark_with_overlap(store, records):
    slurm = FakeSlurm(records)
    ingest_sacct(store, slurm, cluster="acme", rules=RULES, now=NOW)
    later = NOW + timedelta(hours=2)
    slurm.windows.clear()
    ingest_sacct(store, slurm, cluster="acme", rules=RULES, now=later)
    assert slurm.windows == [(NOW - OVERLAP, later)]


def test_long_spans_are_asked_one_window_at_a_time_and_merged(store, records):
    slurm = FakeSlurm(records)
    result = ingest_sacct(store, slurm, cluster="acme", rules=RULES,
                          since=NOW - 2 * WINDOW - timedelta(hours=1), now=NOW)
    assert len(slurm.windows) == 3 and slurm.windows[-1][1] == NOW
    assert all(b - a <= WINDOW for a, b in slurm.windows)
    assert result.finished == len(records) == count(store)


def test_explicit_since_wins_over_watermark(store, records):
    slurm = FakeSlurm(records)
    ingest_sacct(store, slurm, cluster="acme", rules=RULES, now=NOW)
    since = NOW - timedelta(hours=3)
    slurm.windows.clear()
    ingest_sacct(store, slurm, cluster="acme", rules=RULES, since=since, now=NOW)
    assert slurm.windows == [(since, NOW)]


def test_a_late_state_change_updates_the_row(store, records):
    ingest_sacct(store, FakeSlurm(records), cluster="acme", rules=RULES, now=NOW)
    changed = [replace(r, restarts=5) if r.name == "pt 7b" else r for r in records]
    ingest_sacct(store, FakeSlurm(changed), cluster="acme", rules=RULES, now=NOW)
    assert stored_restarts(store, "pt 7b") == 5


def test_a_narrower_window_does_not_lower_a_requeued_jobs_restarts(store, records):
    """Slurm 22.05's sacct --json shows each attempt of a requeued job as its own record,
    so restarts is counted from the records a window holds. An incremental ingest whose
    window starts after the first attempt ended sees one record: the stored count stays
    (CI: ft-nodefail's row went from restarts 1 to 0 on re-ingest)."""
    both_attempts = [replace(r, restarts=1) if r.name == "pt 7b" else r for r in records]
    ingest_sacct(store, FakeSlurm(both_attempts), cluster="acme", rules=RULES, now=NOW)
    last_attempt_only = [replace(r, restarts=0) if r.name == "pt 7b" else r for r in records]
    ingest_sacct(store, FakeSlurm(last_attempt_only), cluster="acme", rules=RULES, now=NOW)
    assert stored_restarts(store, "pt 7b") == 1
