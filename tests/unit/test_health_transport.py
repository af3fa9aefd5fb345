"""The srun transport: argv it builds, and verdicts from a fake ``srun`` on PATH.

The fake srun stands in for Slurm plus the worker: it prints the worker's
event lines (or hangs, or fails) as ``FAKE_SRUN`` says, so the parent's
timeout, kill and verdict logic run for real without a cluster.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

import slurm_acme.health.transport as transport_module
from slurm_acme.health.records import TIMEOUT
from slurm_acme.health.steps import StepShape, pair_test_step, precheck_step
from slurm_acme.health.transport import PortPicker, SrunTransport
from slurm_acme.slurm.parse import gpus_in_tres, node_addresses, parse_scontrol_show_node
from slurm_acme.slurm.steps import step_argv, step_env


def srun_test_argv(group, *, port, master, shape):  # type: ignore[no-untyped-def]
    return step_argv(*pair_test_step(group, port=port, master=master, shape=shape))


def srun_precheck_argv(nodes, **kwargs):  # type: ignore[no-untyped-def]
    return step_argv(*precheck_step(nodes, **kwargs))

FAKE_SRUN = """#!{python}
import json, os, sys, time
mode = os.environ["FAKE_SRUN"]
with open(os.environ["FAKE_SRUN_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
world = int(next(a for a in sys.argv if a.startswith("--ntasks=")).split("=")[1])
def emit(**event):
    print(json.dumps(event), flush=True)
if mode == "crash":
    print("srun: error: Unable to create step for job 7: Requested nodes are busy", file=sys.stderr)
    sys.exit(1)
if mode == "slowstart":
    time.sleep(1.5)
for rank in range(world):
    emit(event="ready", rank=rank, node=f"n{{rank}}", step="3")
if mode == "hang":
    time.sleep(60)
if mode == "raise":
    emit(event="error", rank=1, node="node2", error="RuntimeError: injected fault on node2")
    sys.exit(1)
print("some torch warning", flush=True)
emit(event="result", world=world, busbw_gbps=float(os.environ.get("FAKE_BUSBW", "5.0")))
if mode == "slowexit":
    time.sleep(60)
"""


def shape(**overrides: object) -> StepShape:
    values: dict = {"backend": "gloo", "tasks_per_node": 1, "gpus_per_node": 0, "timeout_s": 5.0,
                    "startup_s": 10.0, "size_mb": 4.0, "iters": 5, "job_id": "7", "python": "/py"}
    values.update(overrides)
    return StepShape(**values)


@pytest.fixture
def fake_srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    binary = tmp_path / "bin" / "srun"
    binary.parent.mkdir()
    binary.write_text(FAKE_SRUN.format(python=sys.executable))
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SRUN_LOG", str(tmp_path / "srun.log"))
    return tmp_path / "srun.log"


def transport(mode: str, monkeypatch: pytest.MonkeyPatch, **kwargs: object) -> SrunTransport:
    monkeypatch.setenv("FAKE_SRUN", mode)
    cancelled: list[str] = []
    step_shape = shape(**kwargs.pop("shape", {}))  # type: ignore[arg-type]
    t = SrunTransport(step_shape, {"node1": "10.0.0.1"}, cancel_step=cancelled.append, **kwargs)
    t.cancelled = cancelled  # type: ignore[attr-defined]
    return t


def test_step_inside_an_allocation_overlaps_and_propagates_the_environment() -> None:
    argv = srun_test_argv(("node1", "node2"), port=29500, master="10.0.0.1",
                          shape=shape(tasks_per_node=8))
    assert argv[:3] == ["srun", "--jobid=7", "--overlap"]
    for flag in ("--nodes=2", "--nodelist=node1,node2", "--ntasks=16", "--ntasks-per-node=8",
                 "--overcommit", "--kill-on-bad-exit=1", "--export=ALL"):
        assert flag in argv
    assert argv[argv.index("/py"):argv.index("/py") + 3] == ["/py", "-m", "slurm_acme.health.worker"]
    assert argv[argv.index("--master") + 1] == "10.0.0.1"
    assert argv[argv.index("--port") + 1] == "29500"


def test_nccl_step_asks_for_the_gpus_and_standalone_step_for_a_time_limit() -> None:
    argv = srun_test_argv(("a",), port=1, master="a",
                          shape=shape(backend="nccl", gpus_per_node=4, job_id=None))
    assert "--gpus-per-node=4" in argv
    assert not any(a.startswith("--jobid") for a in argv)
    assert "--time=2" in argv  # 10 s start-up + 5 s, rounded up to a minute, plus one


def test_precheck_step_runs_one_task_per_node() -> None:
    argv = srun_precheck_argv(["n1", "n2", "n3"], job_id="9", expect_gpus=8, python="/py")
    assert "--ntasks=3" in argv and "--ntasks-per-node=1" in argv
    assert argv[-5:] == ["/py", "-m", "slurm_acme.health.precheck", "--expect-gpus", "8"]


def test_step_environment_drops_the_batch_scripts_shape_but_keeps_the_rest() -> None:
    env = step_env({"SLURM_NTASKS": "4", "SLURM_CPUS_PER_TASK": "8", "SLURM_JOB_ID": "7",
                    "ACME_HEALTH_FAULT": "node2:raise", "PATH": "/bin"})
    assert env == {"SLURM_JOB_ID": "7", "ACME_HEALTH_FAULT": "node2:raise", "PATH": "/bin"}


def test_node_addresses_and_gpus_come_from_scontrol_words() -> None:
    text = ("NodeName=node1 Arch=x86_64 CoresPerSocket=16 Gres=gpu:8 NodeAddr=127.0.0.1 "
            "NodeHostName=localhost\nNodeName=node2 Arch=x86_64 NodeAddr=10.1.0.2 NodeHostName=n2\n")
    assert node_addresses(parse_scontrol_show_node(text)) == {"node1": "127.0.0.1", "node2": "10.1.0.2"}
    assert gpus_in_tres("gres:gpu:8") == 8
    assert gpus_in_tres("gres/gpu:a100=4") == 4
    assert gpus_in_tres("gres:gpu:a100:2") == 2
    assert gpus_in_tres("") is None


def test_ports_are_never_reused_within_a_check() -> None:
    pick = PortPicker()
    ports = [pick() for _ in range(50)]
    assert len(set(ports)) == 50


def test_completed_step_passes_with_its_bus_bandwidth(fake_srun: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    result = transport("pass", monkeypatch)(("node1", "node2"))
    assert result.passed and result.error is None
    assert result.busbw_gbps == 5.0
    assert "--master" in fake_srun.read_text() and "10.0.0.1" in fake_srun.read_text()


def test_bandwidth_below_the_threshold_fails(fake_srun: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_BUSBW", "0.5")
    result = transport("pass", monkeypatch, min_busbw=2.0)(("node1", "node2"))
    assert not result.passed
    assert result.error == "busbw 0.5 GB/s below min 2"
    assert result.busbw_gbps == 0.5


def test_a_raising_rank_fails_the_test_with_its_error(fake_srun: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    result = transport("raise", monkeypatch)(("node1", "node2"))
    assert not result.passed
    assert result.error == "node2: RuntimeError: injected fault on node2"


def test_srun_failure_is_a_failed_test_quoting_slurm(fake_srun: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    result = transport("crash", monkeypatch)(("node1", "node2"))
    assert not result.passed
    assert result.error.startswith("srun exit 1: srun: error: Unable to create step")


def test_a_hang_is_killed_at_the_timeout_and_its_step_cancelled(
        fake_srun: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = transport("hang", monkeypatch, shape={"timeout_s": 0.5})
    started = time.monotonic()
    result = t(("node1", "node2"))
    assert (result.passed, result.error) == (False, TIMEOUT)
    assert time.monotonic() - started < 20
    assert t.cancelled == ["7.3"]  # type: ignore[attr-defined]


def test_the_collective_clock_starts_when_every_rank_is_ready(
        fake_srun: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow start-up (torch import on a busy node) is not a hang."""
    result = transport("slowstart", monkeypatch, shape={"timeout_s": 0.5})(("node1", "node2"))
    assert result.passed


def test_a_step_that_never_starts_times_out_after_the_startup_allowance(
        fake_srun: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = transport("slowstart", monkeypatch, shape={"timeout_s": 0.2, "startup_s": 0.3})
    assert t(("node1", "node2")).error == TIMEOUT


def test_a_slow_exit_after_the_result_is_killed_but_still_passes(
        fake_srun: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's teardown on a busy node may outlast the timeout; the verdict is already in."""
    monkeypatch.setattr(transport_module, "TEARDOWN_S", 0.5)
    monkeypatch.setattr(transport_module, "KILL_GRACE_S", 1.0)
    started = time.monotonic()
    result = transport("slowexit", monkeypatch, shape={"timeout_s": 60.0})(("node1", "node2"))
    assert result.passed and result.busbw_gbps == 5.0
    assert time.monotonic() - started < 20
