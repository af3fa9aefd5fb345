"""examples/train_tiny_gpt.py as two srun tasks on two nodes of the real local Slurm (gloo)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from slurm_acme.ckpt.manifest import latest_healthy, read_manifest
from slurm_acme.ckpt.metrics import read_metrics
from slurm_acme.slurm.runner import run_slurm

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train_tiny_gpt.py"
SMALL = ["--n-layer", "1", "--n-embd", "64", "--n-head", "2", "--batch-size", "4",
         "--seq-len", "32", "--ckpt-interval", "3"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _srun(tmp_path: Path, steps: int) -> str:
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "ACME_CKPT_DIR": str(tmp_path / "ckpt"),
           "ACME_METRICS_FILE": str(tmp_path / "metrics.jsonl"), "ACME_RESUME_FROM": ""}
    argv = ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "--mem=2G",
            "--time=5", "--kill-on-bad-exit=1", "--job-name=acme-test-train-srun",
            sys.executable, str(TRAIN), "--steps", str(steps), *SMALL]
    return run_slurm(argv, timeout=600, env=env)


def test_two_srun_tasks_train_with_gloo_checkpoint_shards_and_resume(slurm_cluster, tmp_path
                                                                     ) -> None:  # type: ignore[no-untyped-def]
    out = _srun(tmp_path, 6)
    assert "[rank 0] step 6" in out and "[rank 1] step 6" in out
    manifest = read_manifest(tmp_path / "ckpt" / "step_00000006")
    assert manifest is not None and manifest.world_size == 2
    # One DCP data file per rank, and DCP's .metadata, which the coordinator (rank 0) writes.
    assert sorted((s.rank, s.file) for s in manifest.shards) == [(0, ".metadata"), (0, "__0_0.distcp"),
                                                                 (1, "__1_0.distcp")]
    steps = [m for m in read_metrics(tmp_path / "metrics.jsonl") if m["event"] == "step"]
    by_rank = {r: {m["step"]: m for m in steps if m["rank"] == r} for r in (0, 1)}
    assert sorted(by_rank[0]) == sorted(by_rank[1]) == list(range(1, 7))
    # Both ranks see the same global batch each step, each training its own slice.
    assert all(by_rank[0][s]["data"] == by_rank[1][s]["data"] for s in range(1, 7))

    out = _srun(tmp_path, 9)
    assert "[rank 0] resumed from" in out and "[rank 1] resumed from" in out
    assert "[rank 1] step 7" in out and "[rank 1] step 1 " not in out
    assert latest_healthy(tmp_path / "ckpt").step == 9  # type: ignore[union-attr]
