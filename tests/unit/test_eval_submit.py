"""The job plan (dependencies, pinning, arrays) and its all-or-nothing execution."""

from __future__ import annotations

import shlex

import pytest

from slurm_acme.config import EvaluateConfig
from slurm_acme.evaluate import service
from slurm_acme.evaluate.container import job_container_type, mode_for
from slurm_acme.evaluate.submit import SubmitFailed, execute
from slurm_acme.slurm.errors import SlurmError


@pytest.fixture
def ckpt(tmp_path):
    folder = tmp_path / "my ckpt's"
    folder.mkdir()
    (folder / "model.pt").write_bytes(b"\0" * 1000)
    return folder


def _prepare(ckpt, tmp_path, mode="jobs", nodes=("node1", "node2")):  # type: ignore[no-untyped-def]
    cfg = EvaluateConfig(work_dir=str(tmp_path / "work dir"), gpus_per_node=2, trial_overhead_s=1.0)
    return service.prepare(cfg, str(ckpt), "tiny", nodes=list(nodes), db_url="sqlite:///x.db",
                           mode=mode, eval_id="e1")


def test_jobs_mode_wires_preload_gpu_aftercorr_scoring_cleanup_and_aggregate(ckpt, tmp_path):
    jobs = _prepare(ckpt, tmp_path).jobs
    keys = [j.key for j in jobs.jobs]
    assert keys == ["preload-0", "gpu-0", "cleanup-0", "score-0",
                    "preload-1", "gpu-1", "cleanup-1", "score-1", "aggregate"]
    gpu = jobs.job("gpu-0")
    assert gpu.after == (("afterok", "preload-0"),)
    assert "--nodelist=node1" in gpu.options and "--gres=gpu:1" in gpu.options
    assert any(o.startswith("--array=0-") and o.endswith("%2") for o in gpu.options)
    score = jobs.job("score-0")
    assert score.after == (("aftercorr", "gpu-0"),)
    assert not any("gpu" in o for o in score.options if o.startswith("--gres"))
    assert jobs.job("cleanup-1").after == (("afterany", "gpu-1"),)
    assert "--nodelist=node2" in jobs.job("cleanup-1").options
    assert jobs.job("aggregate").after == (("afterany", "score-0"), ("afterany", "score-1"))


def test_array_sizes_match_each_nodes_trials(ckpt, tmp_path):
    prepared = _prepare(ckpt, tmp_path)
    for k in (0, 1):
        n = len(prepared.spec.node_trials(k))
        assert f"--array=0-{n - 1}%2" in prepared.jobs.job(f"gpu-{k}").options
        assert f"--array=0-{n - 1}" in prepared.jobs.job(f"score-{k}").options
    covered = sorted((s.dataset, s.start) for t in prepared.spec.trials for s in t.shards)
    assert len(covered) == len(set(covered))


def test_scripts_quote_hostile_paths(ckpt, tmp_path):
    prepared = _prepare(ckpt, tmp_path)
    script = prepared.jobs.job("gpu-0").script
    call = script.strip().splitlines()[-1]
    words = shlex.split(call)
    assert str(tmp_path / "work dir" / "e1") in words
    assert words[-1] == "$SLURM_ARRAY_TASK_ID" or words[-2] == "--index"


def test_allocation_mode_holds_the_node_and_scores_after_it(ckpt, tmp_path):
    jobs = _prepare(ckpt, tmp_path, mode="allocation").jobs
    assert [j.key for j in jobs.jobs] == ["node-0", "score-0", "node-1", "score-1", "aggregate"]
    node = jobs.job("node-0")
    assert "--nodelist=node1" in node.options and any(o.startswith("--gres=gpu:") for o in node.options)
    assert " node " in node.script
    assert jobs.job("score-0").after == (("afterok", "node-0"),)


def test_job_container_detection():
    text = "Configuration data as of 2024\nJobAcctGatherType       = jobacct_gather/linux\n" \
           "JobContainerType        = job_container/tmpfs\nJobCompType = jobcomp/none\n"
    assert job_container_type(text) == "job_container/tmpfs"
    assert mode_for("job_container/tmpfs", "/dev/shm/acme") == "allocation"
    assert mode_for("job_container/none", "/dev/shm/acme") == "jobs"
    assert mode_for("job_container/tmpfs", "/local/nvme/acme") == "jobs"
    assert job_container_type("nothing here") == ""


class FakeDoor:
    """Stands in for slurm_acme.slurm.Slurm: records sbatch calls, refuses one."""

    def __init__(self, refuse: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.cancelled: list[str] = []
        self.refuse = refuse

    def sbatch(self, options, script):  # type: ignore[no-untyped-def]
        if self.refuse and any(self.refuse in o for o in options):
            raise SlurmError(["sbatch"], 1, "sbatch: error: Batch job submission failed")
        self.calls.append(list(options))
        return str(100 + len(self.calls))

    def scancel(self, ids):  # type: ignore[no-untyped-def]
        self.cancelled.extend(ids)


def test_execute_fills_dependencies_with_real_job_ids(ckpt, tmp_path):
    jobs = _prepare(ckpt, tmp_path).jobs
    door = FakeDoor()
    ids = execute(jobs, door)
    gpu_call = door.calls[1]
    assert f"--dependency=afterok:{ids['preload-0']}" in gpu_call
    score_call = door.calls[3]
    assert f"--dependency=aftercorr:{ids['gpu-0']}" in score_call
    assert door.calls[-1][-1] == f"--dependency=afterany:{ids['score-0']},afterany:{ids['score-1']}"


def test_a_refused_job_cancels_the_ones_already_submitted(ckpt, tmp_path):
    jobs = _prepare(ckpt, tmp_path).jobs
    door = FakeDoor(refuse="score1")
    with pytest.raises(SubmitFailed, match="submitting score-1 failed"):
        execute(jobs, door)
    assert sorted(door.cancelled) == sorted(str(100 + i) for i in range(1, len(door.calls) + 1))
