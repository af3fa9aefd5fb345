"""Diagnosis of verbatim logs from real PyTorch failures.

Captured with ``tests/fixtures/diagnose/real/make_real_logs.py`` (CPU ones on
the dev machine; OOM, device-side assert and NCCL misuse on an H200 with
torch 2.11 / NCCL 2.28.9).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_acme.diagnose.api import diagnose_file

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "diagnose" / "real"


@pytest.mark.parametrize(
    ("name", "category", "origin", "action"),
    [
        ("cuda_oom", "OutOfMemoryError", "framework", "stop"),
        ("device_assert", "CUDADeviceAssert", "script", "stop"),
        ("nccl_duplicate_gpu", "CUDAConfigError", "script", "stop"),
        ("keyerror_torchrun", "KeyError", "script", "stop"),
        ("dataloader_killed", "DataloaderKilled", "framework", "stop"),
        ("nan_anomaly", "LossNaN", "framework", "rollback"),
        ("rendezvous_refused", "ConnectionError", "infrastructure", "requeue"),
    ],
)
def test_real_failure_log(name, category, origin, action):
    verdict, _ = diagnose_file(str(REAL / f"{name}.log"), cases=[])
    assert (verdict.category, verdict.origin, verdict.action) == (category, origin, action), verdict.evidence


def test_torchrun_root_cause_block_points_at_the_failing_rank():
    verdict, diagnoser = diagnose_file(str(REAL / "keyerror_torchrun.log"), cases=[])
    assert diagnoser.block is not None and diagnoser.block.rank == 1
    assert verdict.evidence[0] == "[rank1]: KeyError: 'warmup_steps'"
