"""examples/train_tiny_gpt.py as the supervisor runs it: killed, resumed, spiking, signalled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_acme import exitcodes
from slurm_acme.ckpt.manifest import latest_healthy, list_checkpoints
from slurm_acme.ckpt.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train_tiny_gpt.py"
SMALL = ["--n-layer", "1", "--n-embd", "64", "--n-head", "2", "--batch-size", "8",
         "--seq-len", "32", "--ckpt-interval", "4"]


def _env(run: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACME_", "SLURM_"))}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    env.update(ACME_CKPT_DIR=str(run / "ckpt"), ACME_METRICS_FILE=str(run / "metrics.jsonl"),
               ACME_RESUME_FROM="", **extra)
    return env


def _train(run: Path, steps: int, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TRAIN), "--steps", str(steps), *SMALL, *args],
                          env=_env(run, **extra), capture_output=True, text=True, timeout=300,
                          check=False)


def _events(run: Path, event: str) -> dict[int, dict]:
    return {m["step"]: m for m in read_metrics(run / "metrics.jsonl") if m["event"] == event}


def _wait_for(proc: subprocess.Popen, what, timeout: float = 180) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not what():
        assert proc.poll() is None, f"trainer exited early with {proc.returncode}"
        assert time.monotonic() < deadline, "timed out waiting for the trainer"
        time.sleep(0.2)


def test_killed_run_resumes_from_newest_healthy_with_the_same_data_and_losses(
        tmp_path: Path) -> None:
    ref, run = tmp_path / "uninterrupted", tmp_path / "killed"
    done = _train(ref, 16, "--export", str(ref / "export"))
    assert done.returncode == 0, done.stderr[-2000:]
    expected = _events(ref, "step")
    assert sorted(expected) == list(range(1, 17))
    _assert_export_loads(ref / "export")

    proc = subprocess.Popen([sys.executable, str(TRAIN), "--steps", "16", *SMALL],
                            env=_env(run, ACME_FAULTS="hang:step=11"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(proc, lambda: (run / "metrics.jsonl").exists()
                  and 10 in _events(run, "step") and 8 in _events(run, "checkpoint"))
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert latest_healthy(run / "ckpt").step == 8  # type: ignore[union-attr]

    resumed = _train(run, 16)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stdout and "step_00000008" in resumed.stdout
    assert 8 in _events(run, "resume")
    after = {s: m for s, m in _events(run, "step").items() if s > 8}
    # steps 9 and 10 ran twice (before the kill and after resuming); the last run counts
    lines = [m for m in read_metrics(run / "metrics.jsonl") if m["event"] == "step"]
    for m in lines[-8:]:
        after[m["step"]] = m
    assert sorted(after) == list(range(9, 17))
    for step in range(9, 17):
        assert after[step]["data"] == expected[step]["data"], f"data differs at step {step}"
        assert after[step]["loss"] == pytest.approx(expected[step]["loss"], rel=1e-5)
    assert [r.step for r in list_checkpoints(run / "ckpt")] == [8, 12, 16]


def test_a_loss_spike_exits_rollback_and_skipping_the_step_gets_past_it(tmp_path: Path) -> None:
    faults = "spike:step=10,factor=50"
    spiked = _train(tmp_path, 12, ACME_FAULTS=faults)
    assert spiked.returncode == exitcodes.TRAIN_ROLLBACK, spiked.stderr[-2000:]
    assert 10 in _events(tmp_path, "spike") and 10 not in _events(tmp_path, "step")
    assert latest_healthy(tmp_path / "ckpt").step == 8  # type: ignore[union-attr]

    rerun = _train(tmp_path, 12, ACME_FAULTS=faults, ACME_SKIP_STEPS="10-10")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert 10 in _events(tmp_path, "skip") and 12 in _events(tmp_path, "done")
    assert len(_events(tmp_path, "spike")) == 1


def test_a_nan_loss_exits_rollback_naming_the_step(tmp_path: Path) -> None:
    result = _train(tmp_path, 8, ACME_FAULTS="nan:step=3")
    assert result.returncode == exitcodes.TRAIN_ROLLBACK
    nan = _events(tmp_path, "nan")
    assert list(nan) == [3] and nan[3]["loss_str"] == "nan" and nan[3]["rank"] == 0


def test_sigusr2_checkpoints_synchronously_and_exits_for_requeue(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, str(TRAIN), "--steps", "100000", *SMALL],
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        _wait_for(proc, lambda: (tmp_path / "metrics.jsonl").exists()
                  and len(_events(tmp_path, "step")) >= 2)
        os.kill(proc.pid, signal.SIGUSR2)
        proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == exitcodes.TRAIN_CHECKPOINTED_REQUEUE
    (step,) = _events(tmp_path, "requeue")
    assert _events(tmp_path, "requeue")[step]["checkpointed"] is True
    assert latest_healthy(tmp_path / "ckpt").step == step  # type: ignore[union-attr]


def test_an_injected_error_crashes_with_the_exact_message_and_a_traceback(tmp_path: Path
                                                                         ) -> None:
    result = _train(tmp_path, 5, ACME_FAULTS="raise:step=2,message=NCCL error: unhandled "
                                             "system error, NCCL version 2.18.1")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert ("RuntimeError: NCCL error: unhandled system error, NCCL version 2.18.1"
            in result.stderr)


def _assert_export_loads(path: Path) -> None:
    """--export wrote a model that load_pretrained (the seval backend's loader) reads."""
    import torch

    from slurm_acme.models.tiny_gpt import load_pretrained

    model, tok = load_pretrained(path)
    out = model.generate(torch.tensor([tok.encode("def ")]), max_new_tokens=5, temperature=0)
    assert out.shape == (1, 9)


def test_a_spike_on_one_rank_makes_every_rank_roll_back_in_the_same_step(tmp_path: Path
                                                                         ) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs = []
    for rank in (0, 1):
        env = _env(tmp_path, ACME_FAULTS="spike:step=7,rank=1,factor=50", RANK=str(rank),
                   WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, str(TRAIN), "--steps", "10", *SMALL],
                                      env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [exitcodes.TRAIN_ROLLBACK, exitcodes.TRAIN_ROLLBACK]
    spikes = [m for m in read_metrics(tmp_path / "metrics.jsonl") if m["event"] == "spike"]
    assert sorted((m["step"], m["rank"]) for m in spikes) == [(7, 0), (7, 1)]
    assert latest_healthy(tmp_path / "ckpt").step == 4  # type: ignore[union-attr]
