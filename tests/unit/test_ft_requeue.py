"""The requeue helper's sequence against a fake door: hold, wait PENDING, exclude, release."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_acme.ft import requeue
from slurm_acme.slurm import ScontrolJob


@dataclass
class FakeSlurm:
    states: list[str]
    calls: list[tuple] = field(default_factory=list)

    def requeue(self, job_id: str, hold: bool = False) -> None:
        self.calls.append(("requeue", job_id, hold))

    def show_job(self, job_id: str) -> ScontrolJob:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return ScontrolJob(fields={"JobId": job_id, "JobState": state})

    def update_job(self, job_id: str, **fields: str) -> None:
        self.calls.append(("update", job_id, fields))

    def release(self, job_id: str) -> None:
        self.calls.append(("release", job_id))


def test_requeue_excluding_holds_waits_updates_and_releases(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(requeue.time, "sleep", lambda s: None)
    slurm = FakeSlurm(["RUNNING", "COMPLETING", "PENDING"])
    requeue.requeue_excluding(slurm, "42", ["node2", "node1", "node2"])  # type: ignore[arg-type]
    assert slurm.calls == [
        ("requeue", "42", True),
        ("update", "42", {"StartTime": "now", "ExcNodeList": "node1,node2"}),
        ("release", "42"),
    ]


def test_watch_mode_only_hurries_a_job_slurm_requeued(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(requeue.time, "sleep", lambda s: None)
    slurm = FakeSlurm(["COMPLETING", "PENDING"])
    requeue.hurry_requeued(slurm, "42")  # type: ignore[arg-type]
    assert slurm.calls == [("update", "42", {"StartTime": "now"})]


def test_watch_mode_leaves_a_cancelled_job_alone(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(requeue.time, "sleep", lambda s: None)
    slurm = FakeSlurm(["CANCELLED"])
    requeue.hurry_requeued(slurm, "42")  # type: ignore[arg-type]
    assert slurm.calls == []


def test_watch_mode_keeps_the_failed_node_out_of_the_next_allocation(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # a DOWN node may return to service (ReturnToService=2) before the job starts again
    monkeypatch.setattr(requeue.time, "sleep", lambda s: None)
    slurm = FakeSlurm(["NODE_FAIL", "PENDING"])
    requeue.hurry_requeued(slurm, "42", ["node2"])  # type: ignore[arg-type]
    assert slurm.calls == [("update", "42", {"StartTime": "now", "ExcNodeList": "node2"})]


def test_a_requeue_with_too_few_nodes_left_resizes_nodes_tasks_and_cpus(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(requeue.time, "sleep", lambda s: None)
    slurm = FakeSlurm(["PENDING"])
    requeue.requeue_excluding(slurm, "42", ["node1"], (2, 4, 8))  # type: ignore[arg-type]
    assert slurm.calls[1] == ("update", "42", {"StartTime": "now", "ExcNodeList": "node1",
                                               "NumNodes": "2-2", "NumTasks": "4", "NumCPUs": "8"})
