"""JobState: a total mapping from anything Slurm prints."""

from __future__ import annotations

import pytest

from slurm_acme.slurm import JobState


@pytest.mark.parametrize(("raw", "expected"), [
    ("COMPLETED", JobState.COMPLETED),
    ("CANCELLED by 0", JobState.CANCELLED),
    ("CANCELLED+", JobState.CANCELLED),
    ("running", JobState.RUNNING),
    ("PD", JobState.PENDING),
    ("OOM", JobState.OUT_OF_MEMORY),
    (["FAILED"], JobState.FAILED),
    (["PENDING", "REQUEUED"], JobState.PENDING),
    (["REQUEUE_HOLD", "PENDING"], JobState.PENDING),
    ("NODE_FAIL", JobState.NODE_FAIL),
])
def test_parse_maps_slurm_renderings(raw, expected):
    assert JobState.parse(raw) is expected


@pytest.mark.parametrize("raw", ["", "SOMETHING_NEW", None, 7, [], ["WEIRD"], {"current": "X"}])
def test_parse_maps_anything_unknown_to_unknown(raw):
    assert JobState.parse(raw) is JobState.UNKNOWN


@pytest.mark.parametrize("state", list(JobState))
def test_every_failed_state_is_terminal(state):
    if state.is_failed():
        assert state.is_terminal()


def test_failed_states_are_those_the_paper_counts():
    failed = {s for s in JobState if s.is_failed()}
    assert failed == {JobState.FAILED, JobState.TIMEOUT, JobState.NODE_FAIL,
                      JobState.OUT_OF_MEMORY, JobState.BOOT_FAIL, JobState.DEADLINE}
    assert JobState.failed_states() == tuple(sorted(s.value for s in failed))


def test_the_report_counts_failures_with_the_state_vocabulary():
    from slurm_acme.store import column_rollups as report

    assert set(report.FAILED_STATES) == {s.value for s in JobState if s.is_failed()}


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.RUNNING, JobState.REQUEUED,
                                   JobState.COMPLETING, JobState.SUSPENDED, JobState.UNKNOWN])
def test_live_states_are_not_terminal(state):
    assert not state.is_terminal()
