"""The restart policy, branch by branch (the paper's recovery rules)."""

from __future__ import annotations

import pytest

from slurm_acme import exitcodes
from slurm_acme.diagnose import Diagnosis, RuleBook
from slurm_acme.ft import policy
from slurm_acme.ft.checkpoints import Checkpoint
from slurm_acme.ft.policy import AttemptEnd, Budget, decide
from slurm_acme.ft.progress import Hang
from slurm_acme.ft.states import AttemptOutcome
from slurm_acme.slurm import JobState

NCCL = Diagnosis("nccl", "infrastructure", "requeue_exclude_node", node="node2")
NCCL_NO_NODE = Diagnosis("nccl", "infrastructure", "requeue")
KEYERROR = Diagnosis("key_error", "script", "stop")
UNKNOWN = Diagnosis("unknown", "unknown", "requeue")
HANG = Hang("hang_timeout", 30.0, 31.0, last_step=7)


def d(end: AttemptEnd, used: int = 0, max_restarts: int = 3, unknown_used: int = 0,
      max_unknown: int = 1) -> policy.Decision:
    return decide(end, Budget(restarts_used=used, max_restarts=max_restarts,
                              unknown_used=unknown_used, max_unknown_restarts=max_unknown),
                  spike_skip=2)


def test_clean_exit_completes() -> None:
    decision = d(AttemptEnd(exit_code=0, done=True))
    assert decision.outcome == AttemptOutcome.COMPLETED and decision.exit_code == exitcodes.OK


def test_infrastructure_with_culprit_excludes_it_and_requeues() -> None:
    decision = d(AttemptEnd(exit_code=1, diagnosis=NCCL))
    assert decision.outcome == AttemptOutcome.REQUEUE
    assert decision.exclude == ("node2",)
    assert decision.exit_code == exitcodes.SUPERVISOR_REQUEUE


def test_infrastructure_without_culprit_asks_for_health_check() -> None:
    decision = d(AttemptEnd(exit_code=1, diagnosis=NCCL_NO_NODE))
    assert decision.requeues and decision.needs_culprit and decision.exclude == ()


def test_script_error_stops_without_requeue() -> None:
    decision = d(AttemptEnd(exit_code=1, diagnosis=KEYERROR))
    assert decision.outcome == AttemptOutcome.STOP
    assert decision.exit_code == exitcodes.SUPERVISOR_STOP
    assert "script" in decision.reason


def test_framework_error_stops() -> None:
    decision = d(AttemptEnd(exit_code=1, diagnosis=Diagnosis("cuda_oom", "framework", "requeue")))
    assert decision.outcome == AttemptOutcome.STOP


def test_loss_spike_rolls_back_and_skips_from_the_spike() -> None:
    decision = d(AttemptEnd(exit_code=exitcodes.TRAIN_ROLLBACK, spike_step=17))
    assert decision.outcome == AttemptOutcome.ROLLBACK
    assert decision.rollback_before == 17
    assert decision.add_skip == ((17, 18),)


def test_hang_requeues_and_looks_for_culprit() -> None:
    decision = d(AttemptEnd(exit_code=-15, hang=HANG))
    assert decision.outcome == AttemptOutcome.REQUEUE and decision.needs_culprit
    assert decision.diagnosis is not None and decision.diagnosis.category == "hang"


def test_time_limit_checkpoint_requeues_without_counting() -> None:
    decision = d(AttemptEnd(exit_code=exitcodes.TRAIN_CHECKPOINTED_REQUEUE, time_limit_signal=True),
                 used=3, max_restarts=3)
    assert decision.outcome == AttemptOutcome.TIME_LIMIT and not decision.counts_as_restart


def test_max_restarts_reached_stops() -> None:
    decision = d(AttemptEnd(exit_code=1, diagnosis=NCCL), used=2, max_restarts=2)
    assert decision.outcome == AttemptOutcome.STOP
    assert "max_restarts (2) reached" in decision.reason


def test_unknown_failure_asks_the_health_check_and_counts_as_unknown() -> None:
    for diagnosis in (None, UNKNOWN):
        decision = d(AttemptEnd(exit_code=137, diagnosis=diagnosis))
        assert decision.outcome == AttemptOutcome.REQUEUE
        assert decision.needs_culprit and decision.exclude == () and decision.unknown


def test_unknown_failures_stop_at_their_own_lower_cap() -> None:
    decision = d(AttemptEnd(exit_code=1, diagnosis=UNKNOWN), used=1, unknown_used=1, max_unknown=1)
    assert decision.outcome == AttemptOutcome.STOP
    assert "max_unknown_restarts (1) reached" in decision.reason
    # a known infrastructure failure still has restarts left
    assert d(AttemptEnd(exit_code=1, diagnosis=NCCL), used=1, unknown_used=1).requeues


@pytest.mark.parametrize("category", sorted(policy.OUT_OF_MEMORY_CATEGORIES))
def test_out_of_memory_is_never_retried_unchanged(category: str) -> None:
    # even when a rule calls it something to requeue: the same settings run out again
    oom = Diagnosis(category, "infrastructure", "requeue_exclude_node", node="node2")
    decision = d(AttemptEnd(exit_code=137, diagnosis=oom))
    assert decision.outcome == AttemptOutcome.STOP
    assert "out of memory" in decision.reason and "node2" in decision.reason


def test_out_of_memory_categories_are_the_rule_books_own() -> None:
    categories = {rule.category for rule in RuleBook.load().rules}
    assert policy.OUT_OF_MEMORY_CATEGORIES <= categories


def test_requeue_action_with_a_node_does_not_exclude_it() -> None:
    # ``requeue`` means the same nodes (diagnose's contract): a survivor's connection
    # error names the host that reported it, not the culprit
    reset = Diagnosis("ConnectionError", "infrastructure", "requeue", node="node1")
    decision = d(AttemptEnd(exit_code=1, diagnosis=reset))
    assert decision.requeues and decision.exclude == () and decision.needs_culprit


def test_hang_reason_quotes_the_limit_that_applied() -> None:
    startup = Hang("startup_timeout", 60.0, 61.0, last_step=None)
    decision = d(AttemptEnd(exit_code=-15, hang=startup))
    assert "startup_timeout 60s" in decision.reason and "hang_timeout" not in decision.reason
    assert "hang_timeout 30s" in d(AttemptEnd(exit_code=-15, hang=HANG)).reason


def test_a_signal_after_done_completes_the_run() -> None:
    # USR2 reached ranks that had already written done; they died of it
    decision = d(AttemptEnd(exit_code=143, time_limit_signal=True, done=True, last_step=120))
    assert decision.outcome == AttemptOutcome.COMPLETED and decision.exit_code == exitcodes.OK


def test_time_limit_stop_of_an_unmodified_trainer_requeues_without_counting() -> None:
    decision = d(AttemptEnd(exit_code=143, time_limit_signal=True, time_limit_action="stop"),
                 used=3, max_restarts=3)
    assert decision.outcome == AttemptOutcome.TIME_LIMIT and not decision.counts_as_restart


def test_scancel_is_cancelled_not_a_failure() -> None:
    decision = policy.ended_by_slurm(JobState.CANCELLED, ())
    assert decision.outcome == AttemptOutcome.CANCELLED
    assert decision.outcome.is_terminal() and decision.diagnosis is None
    assert decision.exit_code == exitcodes.SUPERVISOR_STOP


def test_a_down_node_is_a_node_failure_that_excludes_it() -> None:
    decision = policy.ended_by_slurm(JobState.RUNNING, ("node2",))
    assert decision.outcome == AttemptOutcome.NODE_FAIL and decision.exclude == ("node2",)
    assert decision.diagnosis is not None and decision.diagnosis.node == "node2"


def test_killed_by_slurm_without_a_down_node_waits_for_slurms_requeue() -> None:
    decision = policy.ended_by_slurm(JobState.PENDING, ())
    assert decision.outcome == AttemptOutcome.KILLED and decision.exclude == ()
    assert decision.exit_code == exitcodes.SUPERVISOR_KILLED


def test_skips_merge_and_render() -> None:
    assert policy.merge_skips([(5, 6)], policy.parse_skips("1-2,7-9"), [(20, 20)]) == "1-2,5-9,20-20"
    assert policy.parse_skips("") == []


def test_resume_point_ignores_checkpoints_tainted_by_a_spike() -> None:
    cks = [Checkpoint(10, "a", created_ts=100), Checkpoint(20, "b", created_ts=200),
           Checkpoint(30, "c", created_ts=400)]
    # spike at step 20 decided at t=300: step 20 (written before) is tainted, 30 (after) is clean
    assert policy.resume_point(cks[:2], [(300.0, 20)]).step == 10
    assert policy.resume_point(cks, [(300.0, 20)]).step == 30
    assert policy.resume_point([], []) is None


def test_trainer_checkpointed_for_requeue_counts_as_time_limit_even_unsignalled() -> None:
    decision = d(AttemptEnd(exit_code=exitcodes.TRAIN_CHECKPOINTED_REQUEUE), used=3, max_restarts=3)
    assert decision.outcome == AttemptOutcome.TIME_LIMIT


def test_usr2_checkpoint_reported_in_metrics_wins_over_a_killed_rank_exit_code() -> None:
    # srun --kill-on-bad-exit: rank 0 exits 76 first and srun terminates rank 1 (143)
    decision = d(AttemptEnd(exit_code=143, time_limit_signal=True, checkpointed_for_requeue=True))
    assert decision.outcome == AttemptOutcome.TIME_LIMIT and not decision.counts_as_restart
