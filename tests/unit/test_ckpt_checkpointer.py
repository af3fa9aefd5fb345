"""AsyncCheckpointer on a real directory; the OS is faked only to inject ENOSPC/EIO/slowness."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from slurm_acme.ckpt.checkpointer import AsyncCheckpointer
from slurm_acme.ckpt.fsio import LocalFS
from slurm_acme.ckpt.manifest import MANIFEST_NAME, latest_healthy, list_checkpoints

#: The data file a single-process save writes (DCP names it after rank 0).
DATA = "__0_0.distcp"


def _state(value: float) -> dict:
    return {"w": torch.full((1000,), value), "pos": {"cursor": int(value)}}


class FailingFS(LocalFS):
    """The OS reports `err` on write (or fsync) while `armed` is set."""

    def __init__(self, err: int, on: str = "write") -> None:
        self.err, self.on = err, on
        self.armed = False

    def _write(self, fd: int, data: memoryview) -> int:
        if self.armed and self.on == "write":
            raise OSError(self.err, os.strerror(self.err))
        return super()._write(fd, data)

    def _fsync(self, fd: int) -> None:
        if self.armed and self.on == "fsync":
            raise OSError(self.err, os.strerror(self.err))
        super()._fsync(fd)


class GatedFS(LocalFS):
    """Writes block until the test opens the gate: a persist that is still in flight."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()

    def _write(self, fd: int, data: memoryview) -> int:
        self.entered.set()
        self.gate.wait(30)
        return super()._write(fd, data)


def test_save_returns_before_persist_and_resume_loads_the_newest(tmp_path: Path) -> None:
    fs = GatedFS()
    ck = AsyncCheckpointer(tmp_path, keep=5, fs=fs)
    report = ck.save(10, _state(10.0))
    assert report.action == "started" and fs.entered.wait(10)
    assert list_checkpoints(tmp_path) == []  # not committed while persisting
    fs.gate.set()
    result = ck.wait()
    assert result is not None and result.ok and result.committed
    ck.save(20, _state(20.0))
    ck.wait()
    resumed = ck.resume(resume_from="")
    assert resumed is not None and resumed.step == 20
    assert torch.equal(resumed.state["w"], torch.full((1000,), 20.0))
    assert resumed.state["pos"] == {"cursor": 20}
    ck.close()


def test_snapshot_is_taken_at_save_time_not_at_persist_time(tmp_path: Path) -> None:
    fs = GatedFS()
    ck = AsyncCheckpointer(tmp_path, fs=fs)
    live = _state(1.0)
    ck.save(1, live)
    live["w"].fill_(99.0)  # training continues and mutates parameters
    fs.gate.set()
    ck.wait()
    assert torch.equal(ck.resume(resume_from="").state["w"], torch.full((1000,), 1.0))


def test_keeps_last_k_and_deletes_older(tmp_path: Path) -> None:
    ck = AsyncCheckpointer(tmp_path, keep=2)
    for step in (1, 2, 3, 4):
        ck.save(step, _state(step))
        ck.wait()
    assert [r.step for r in list_checkpoints(tmp_path)] == [3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000003", "step_00000004"]


def test_retention_never_deletes_the_newest_healthy_when_newer_saves_failed(tmp_path: Path
                                                                            ) -> None:
    fs = FailingFS(errno.ENOSPC)
    ck = AsyncCheckpointer(tmp_path, keep=1, fs=fs)
    ck.save(1, _state(1.0))
    ck.wait()
    fs.armed = True
    for step in (2, 3):
        ck.save(step, _state(step))
        ck.wait()
    assert latest_healthy(tmp_path).step == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("err, on", [(errno.ENOSPC, "write"), (errno.EIO, "fsync")])
def test_a_failed_persist_is_reported_and_older_checkpoints_are_kept(
        tmp_path: Path, err: int, on: str, caplog: pytest.LogCaptureFixture) -> None:
    fs = FailingFS(err, on)
    events: list[tuple] = []
    ck = AsyncCheckpointer(tmp_path, keep=1, fs=fs,
                           on_event=lambda e, s, **kw: events.append((e, s, kw)))
    ck.save(5, _state(5.0))
    ck.wait()
    fs.armed = True
    with caplog.at_level(logging.ERROR):
        report = ck.save(10, _state(10.0))  # returns: training goes on
        result = ck.wait()
    assert report.action == "started"
    assert result is not None and not result.ok and os.strerror(err) in (result.error or "")
    assert events[-1][0] == "checkpoint_error" and events[-1][1] == 10
    assert "checkpoint step 10 failed" in caplog.text
    assert [r.step for r in list_checkpoints(tmp_path)] == [5]
    assert not list((tmp_path / "step_00000010").glob(".*tmp*"))  # temp file cleaned up
    fs.armed = False
    ck.save(15, _state(15.0))  # the next save works again
    assert ck.wait().committed  # type: ignore[union-attr]
    assert ck.resume(resume_from="").step == 15  # type: ignore[union-attr]


def _first_save_in_flight(tmp_path: Path, policy: str) -> tuple[GatedFS, list[str], AsyncCheckpointer]:
    """A checkpointer under ``policy`` whose step-1 save is held inside the gated filesystem;
    its events as ``"<event>:<step>"``."""
    fs = GatedFS()
    events: list[str] = []
    ck = AsyncCheckpointer(tmp_path, policy=policy, fs=fs,
                           on_event=lambda e, s, **kw: events.append(f"{e}:{s}"))
    ck.save(1, _state(1.0))
    assert fs.entered.wait(10)
    return fs, events, ck


def test_skip_policy_skips_and_reports_while_a_save_is_in_flight(tmp_path: Path) -> None:
    fs, events, ck = _first_save_in_flight(tmp_path, "skip")
    assert ck.save(2, _state(2.0)).action == "skipped"
    fs.gate.set()
    ck.wait()
    assert events == ["checkpoint_skipped:2", "checkpoint:1"]


def test_wait_policy_blocks_until_the_previous_save_is_done_and_reports_it(tmp_path: Path
                                                                          ) -> None:
    fs, events, ck = _first_save_in_flight(tmp_path, "wait")
    threading.Timer(0.3, fs.gate.set).start()
    report = ck.save(2, _state(2.0))
    ck.wait()
    assert report.action == "started" and report.waited_s >= 0.2
    assert events == ["checkpoint:1", "checkpoint_waited:2", "checkpoint:2"]


def _flip_byte(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage", ["bitflip", "truncate", "partial"])
def test_resume_skips_a_corrupt_or_partial_newest_checkpoint_with_a_warning(
        tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    ck = AsyncCheckpointer(tmp_path, keep=3)
    for step in (1, 2):
        ck.save(step, _state(float(step)))
        ck.wait()
    shard = tmp_path / "step_00000002" / DATA
    if damage == "bitflip":
        _flip_byte(shard, shard.stat().st_size - 100)  # inside tensor data: only crc sees it
    elif damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:-10])
    else:
        (tmp_path / "step_00000002" / MANIFEST_NAME).unlink()
    with caplog.at_level(logging.WARNING):
        resumed = ck.resume(resume_from="")
    assert resumed is not None and resumed.step == 1
    assert torch.equal(resumed.state["w"], torch.full((1000,), 1.0))
    assert "skipping checkpoint" in caplog.text and "step_00000002" in caplog.text


def test_resume_from_env_is_tried_first_then_older_ones(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ck = AsyncCheckpointer(tmp_path, keep=5)
    for step in (1, 2, 3):
        ck.save(step, _state(float(step)))
        ck.wait()
    monkeypatch.setenv("ACME_RESUME_FROM", str(tmp_path / "step_00000002"))
    assert ck.resume().step == 2  # type: ignore[union-attr]
    _flip_byte(tmp_path / "step_00000002" / DATA, 200)
    assert ck.resume().step == 1  # never the newer step 3 when rolling back to 2
    monkeypatch.setenv("ACME_RESUME_FROM", "")
    assert ck.resume().step == 3  # type: ignore[union-attr]


def test_resume_with_nothing_on_disk_returns_none(tmp_path: Path) -> None:
    assert AsyncCheckpointer(tmp_path / "new").resume(resume_from="") is None


def test_resaving_a_step_replaces_the_old_commit(tmp_path: Path) -> None:
    ck = AsyncCheckpointer(tmp_path)
    ck.save(7, _state(1.0))
    ck.wait()
    ck.save(7, _state(2.0))
    ck.wait()
    assert torch.equal(ck.resume(resume_from="").state["w"], torch.full((1000,), 2.0))


@pytest.mark.parametrize("kw", [{"policy": "drop"}, {"format": "acme"}, {"keep": 0},
                                {"interval": 0}, {"copy_threads": 0}])
def test_bad_options_are_rejected(tmp_path: Path, kw: dict) -> None:
    with pytest.raises(ValueError):
        AsyncCheckpointer(tmp_path, **kw)


def test_manifest_module_does_not_import_torch() -> None:
    code = ("import sys, slurm_acme.ckpt.manifest as m; m.latest_healthy('/nonexistent'); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_latest_healthy_skips_a_checkpoint_with_a_missing_shard(tmp_path: Path) -> None:
    ck = AsyncCheckpointer(tmp_path, keep=5)
    for step in (1, 2):
        ck.save(step, _state(float(step)))
        ck.wait()
    ref = latest_healthy(tmp_path)
    assert ref is not None and ref.step == 2 and ref.bytes > 4000
    assert ref.checksum.startswith("crc32:") and ref.path.endswith("step_00000002")
    (tmp_path / "step_00000002" / DATA).unlink()
    assert latest_healthy(tmp_path).step == 1  # type: ignore[union-attr]
    assert latest_healthy(tmp_path, max_step=0) is None


def test_prepare_allocates_the_arena_so_the_first_save_reuses_it(tmp_path: Path) -> None:
    ck = AsyncCheckpointer(tmp_path)
    ck.prepare(_state(0.0))
    buf = ck.arena.buffer.data_ptr()
    ck.save(1, _state(1.0))
    assert ck.arena.buffer.data_ptr() == buf and ck.arena.reallocations == 1
    assert ck.wait().committed  # type: ignore[union-attr]
    assert torch.equal(ck.resume(resume_from="").state["w"], torch.full((1000,), 1.0))


def test_defaults_come_from_the_supervisors_environment(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_CKPT_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("ACME_CKPT_KEEP", "2")
    monkeypatch.setenv("ACME_CKPT_INTERVAL", "25")
    ck = AsyncCheckpointer()
    assert ck.ckpt_dir == tmp_path / "from-env" and ck.keep == 2 and ck.background
    assert [s for s in range(1, 80) if ck.due(s)] == [25, 50, 75]
    monkeypatch.setenv("ACME_CKPT_KEEP", "two")
    with pytest.raises(ValueError, match="ACME_CKPT_KEEP='two' is not an integer"):
        AsyncCheckpointer()
    monkeypatch.delenv("ACME_CKPT_DIR")
    with pytest.raises(ValueError, match="set ACME_CKPT_DIR"):
        AsyncCheckpointer(keep=1)


def test_checkpoint_async_false_makes_save_return_after_the_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_CKPT_ASYNC", "0")
    ck = AsyncCheckpointer(tmp_path)
    assert not ck.background
    ck.save(3, _state(3.0))
    assert [r.step for r in list_checkpoints(tmp_path)] == [3]  # no wait() needed


def test_save_and_requeue_commits_reports_and_exits_76(tmp_path: Path) -> None:
    events: list[tuple] = []
    ck = AsyncCheckpointer(tmp_path, on_event=lambda e, s, **kw: events.append((e, s, kw)))
    with pytest.raises(SystemExit) as exit_info:
        ck.save_and_requeue(9, _state(9.0))
    assert exit_info.value.code == 76
    assert [r.step for r in list_checkpoints(tmp_path)] == [9]
    assert events[-1][0] == "requeue" and events[-1][1] == 9 and events[-1][2]["checkpointed"]
