"""Run states and attempt outcomes: one vocabulary, total parsing, terminal states."""

from __future__ import annotations

import pytest

from slurm_acme.ft.states import AttemptOutcome, RunState


def test_run_states_parse_totally() -> None:
    assert RunState.parse("COMPLETED") is RunState.COMPLETED
    assert RunState.parse("running") is RunState.RUNNING
    assert RunState.parse("SOMETHING-NEW") is RunState.UNKNOWN
    assert RunState.parse(None) is RunState.UNKNOWN


@pytest.mark.parametrize("state,terminal", [(RunState.COMPLETED, True), (RunState.STOPPED, True),
                                            (RunState.CANCELLED, True), (RunState.RUNNING, False),
                                            (RunState.REQUEUED, False), (RunState.PENDING, False)])
def test_terminal_run_states(state: RunState, terminal: bool) -> None:
    assert state.is_terminal() is terminal


def test_an_attempt_without_an_outcome_is_running_and_unknown_text_is_unknown() -> None:
    assert AttemptOutcome.parse(None) is None
    assert AttemptOutcome.parse("requeue") is AttemptOutcome.REQUEUE
    assert AttemptOutcome.parse("exploded") is AttemptOutcome.UNKNOWN


def test_outcomes_say_whether_the_run_goes_on_and_what_counts() -> None:
    ends = {o for o in AttemptOutcome if o.is_terminal()}
    assert ends == {AttemptOutcome.COMPLETED, AttemptOutcome.STOP, AttemptOutcome.CANCELLED}
    assert {o for o in AttemptOutcome if o.requeues} == {
        AttemptOutcome.REQUEUE, AttemptOutcome.ROLLBACK, AttemptOutcome.TIME_LIMIT}
    assert not AttemptOutcome.TIME_LIMIT.counts_as_restart
    assert AttemptOutcome.NODE_FAIL.counts_as_restart and AttemptOutcome.KILLED.counts_as_restart
    for outcome in AttemptOutcome:
        assert outcome.run_state().is_terminal() is outcome.is_terminal()
    assert str(AttemptOutcome.TIME_LIMIT) == "time_limit"
