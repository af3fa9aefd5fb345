"""The restart policy, branch by branch (the paper's recovery rules)."""

from __future__ import annotations

from slurm_acme import exitcodes
from slurm_acme.ft import policy
from slurm_acme.ft.deps import Checkpoint, Finding
from slurm_acme.ft.policy import AttemptEnd, decide

NCCL = Finding("nccl", "infrastructure", "requeue_exclude_node", node="node2")
NCCL_NO_NODE = Finding("nccl", "infrastructure", "requeue")
KEYERROR = Finding("key_error", "script", "stop")


def d(end: AttemptEnd, used: int = 0, max_restarts: int = 3) -> policy.Decision:
    return decide(end, restarts_used=used, max_restarts=max_restarts, spike_skip=2,
                  hang_timeout=30)


def test_clean_exit_completes() -> None:
    decision = d(AttemptEnd(exit_code=0, done=True))
    assert decision.outcome == policy.COMPLETED and decision.exit_code == exitcodes.OK


def test_infrastructure_with_culprit_excludes_it_and_requeues() -> None:
    decision = d(AttemptEnd(exit_code=1, finding=NCCL))
    assert decision.outcome == policy.REQUEUE
    assert decision.exclude == ("node2",)
    assert decision.exit_code == exitcodes.SUPERVISOR_REQUEUE


def test_infrastructure_without_culprit_asks_for_health_check() -> None:
    decision = d(AttemptEnd(exit_code=1, finding=NCCL_NO_NODE))
    assert decision.requeues and decision.needs_culprit and decision.exclude == ()


def test_script_error_stops_without_requeue() -> None:
    decision = d(AttemptEnd(exit_code=1, finding=KEYERROR))
    assert decision.outcome == policy.STOP
    assert decision.exit_code == exitcodes.SUPERVISOR_STOP
    assert "script" in decision.reason


def test_framework_error_stops() -> None:
    decision = d(AttemptEnd(exit_code=1, finding=Finding("cuda_oom", "framework", "requeue")))
    assert decision.outcome == policy.STOP


def test_loss_spike_rolls_back_and_skips_from_the_spike() -> None:
    decision = d(AttemptEnd(exit_code=exitcodes.TRAIN_ROLLBACK, spike_step=17))
    assert decision.outcome == policy.ROLLBACK
    assert decision.rollback_before == 17
    assert decision.add_skip == ((17, 18),)


def test_hang_requeues_and_looks_for_culprit() -> None:
    decision = d(AttemptEnd(exit_code=-15, hung=True))
    assert decision.outcome == policy.REQUEUE and decision.needs_culprit
    assert decision.finding is not None and decision.finding.category == "hang"


def test_time_limit_checkpoint_requeues_without_counting() -> None:
    decision = d(AttemptEnd(exit_code=exitcodes.TRAIN_CHECKPOINTED_REQUEUE, time_limit_signal=True),
                 used=3, max_restarts=3)
    assert decision.outcome == policy.TIME_LIMIT and not decision.counts_as_restart


def test_max_restarts_reached_stops() -> None:
    decision = d(AttemptEnd(exit_code=1, finding=NCCL), used=2, max_restarts=2)
    assert decision.outcome == policy.STOP
    assert "max_restarts (2) reached" in decision.reason


def test_unknown_failure_requeues() -> None:
    assert d(AttemptEnd(exit_code=137)).outcome == policy.REQUEUE


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
    assert decision.outcome == policy.TIME_LIMIT


def test_usr2_checkpoint_reported_in_metrics_wins_over_a_killed_rank_exit_code() -> None:
    # srun --kill-on-bad-exit: rank 0 exits 76 first and srun terminates rank 1 (143)
    decision = d(AttemptEnd(exit_code=143, time_limit_signal=True, checkpointed_for_requeue=True))
    assert decision.outcome == policy.TIME_LIMIT and not decision.counts_as_restart
