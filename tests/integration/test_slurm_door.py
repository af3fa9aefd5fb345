"""slurm_acme.slurm against the real local cluster: what the unit tests fake."""

from __future__ import annotations

import time

import pytest

from slurm_acme.slurm import JobNotFound, JobState

pytestmark = pytest.mark.integration

HOSTILE = ["a b", "a'; echo x", 'a"=0"']


def wait_for(predicate, timeout=60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("condition not met in time")
        time.sleep(0.5)


def test_ping_and_nodes(slurm, slurm_cluster):  # type: ignore[no-untyped-def]
    slurm.ping()
    names = {n.name for n in slurm.sinfo_nodes()}
    assert set(slurm_cluster.nodes) <= names
    node = slurm.show_nodes([slurm_cluster.nodes[0]])[0]
    assert node.gres == f"gpu:{slurm_cluster.gpus_per_node}" and node.port


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_round_trip(slurm, wait_job, tmp_path, name):  # type: ignore[no-untyped-def]
    job_id = slurm.sbatch(["-J", name, "--comment", f"acme:type=Debug {name}", "-D", str(tmp_path),
                           "-o", str(tmp_path / "out")], "#!/bin/sh\ntrue\n")
    job = wait_job(slurm, job_id)
    assert job.name == name and job.state is JobState.COMPLETED
    assert job.comment == f"acme:type=Debug {name}"


def test_requeue_hold_release_counts_a_restart(slurm, wait_job, tmp_path):  # type: ignore[no-untyped-def]
    job_id = slurm.sbatch(["-J", "door requeue", "-D", str(tmp_path), "-o", str(tmp_path / "out")],
                          "#!/bin/sh\nsleep 3\n")
    wait_for(lambda: slurm.show_job(job_id).state is JobState.RUNNING)
    requeued_at = time.time()
    slurm.requeue(job_id, hold=True)
    wait_for(lambda: slurm.show_job(job_id).state is JobState.PENDING)
    # slurmd revokes the first run's credential at the requeue, to the second: a
    # relaunch within that second is "Job credential revoked" and the job FAILs.
    wait_for(lambda: time.time() >= int(requeued_at) + 2)
    slurm.release(job_id)
    slurm.update_job(job_id, StartTime="now")
    job = wait_job(slurm, job_id, timeout=120)
    assert job.state is JobState.COMPLETED and job.restarts == 1


def test_gpu_indices_and_squeue_of_a_running_job(slurm, slurm_cluster, tmp_path):  # type: ignore[no-untyped-def]
    job_id = slurm.sbatch(["-N", "2", "--gpus-per-node=2", "-J", "door gpus", "-D", str(tmp_path),
                           "-o", str(tmp_path / "out")], "#!/bin/sh\nsleep 60\n")
    try:
        wait_for(lambda: slurm.show_job(job_id).state is JobState.RUNNING)
        [queued] = slurm.squeue(job_ids=[job_id])
        assert queued.state is JobState.RUNNING and queued.gpus == 4 and queued.nodes == 2
        indices = slurm.job_gpu_indices(job_id)
        assert len(indices) == 2 and all(len(v) == 2 for v in indices.values())
    finally:
        slurm.scancel([job_id])
    wait_for(lambda: slurm.show_job(job_id).state is JobState.CANCELLED)


def test_unknown_job_is_job_not_found(slurm):  # type: ignore[no-untyped-def]
    with pytest.raises(JobNotFound):
        slurm.show_job("99999999")
