"""Crash faults against real processes and files: SIGKILL mid-persist, a rank dying mid-save.

This file is also the worker script: ``python test_ckpt_crash_faults.py <mode> <dir>``
runs one training-like process (or one rank of two, with gloo on CPU). The only
fake is a filesystem boundary that pauses or dies in the middle of a write.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

STATE_FLOATS = 1_000_000  # 4 MB per rank


def _state(rank: int, step: int):  # type: ignore[no-untyped-def]
    import torch

    return {"w": torch.full((STATE_FLOATS,), float(step * 10 + rank)), "rank": rank,
            "step": step}


def _slow_midway_fs(ready: Path, die: bool):  # type: ignore[no-untyped-def]
    """Writes half of the first chunk, then signals `ready` and hangs (or the process dies)."""
    from slurm_acme.ckpt.fsio import LocalFS

    class MidwayFS(LocalFS):
        armed = False
        calls = 0

        def _write(self, fd: int, data: memoryview) -> int:
            if not self.armed:
                return super()._write(fd, data)
            self.calls += 1
            if self.calls == 1:
                return super()._write(fd, data[: len(data) // 2])
            ready.write_text("mid-write")
            if die:
                os._exit(9)  # the rank dies in the middle of its shard
            while True:
                time.sleep(3600)

    return MidwayFS()


def worker_sigkill(ckpt_dir: Path) -> None:
    from slurm_acme.ckpt.checkpointer import AsyncCheckpointer

    fs = _slow_midway_fs(ckpt_dir.parent / "ready", die=False)
    ck = AsyncCheckpointer(ckpt_dir, keep=3, fs=fs)
    ck.save(10, _state(0, 10))
    assert ck.wait().committed
    fs.armed = True
    ck.save(20, _state(0, 20))
    while True:  # "training" goes on until the test kills us
        time.sleep(0.1)


def worker_two_ranks(ckpt_dir: Path, rank_to_kill: int) -> None:
    import torch.distributed as dist

    from slurm_acme.ckpt.checkpointer import AsyncCheckpointer
    from slurm_acme.ckpt.collective import init_distributed

    env = init_distributed()
    fs = _slow_midway_fs(ckpt_dir.parent / f"ready{env.rank}", die=True)
    ck = AsyncCheckpointer(ckpt_dir, keep=3, fs=fs, commit_timeout_s=60)
    ck.save(10, _state(env.rank, 10))
    first = ck.wait()
    resumed = ck.resume(resume_from="")
    out = {"rank": env.rank, "first_ok": first.ok, "first_committed": first.committed,
           "resumed_step": resumed.step, "resumed_rank": resumed.state["rank"],
           "resumed_w": float(resumed.state["w"][0])}
    dist.barrier()
    fs.armed = env.rank == rank_to_kill
    ck.save(20, _state(env.rank, 20))
    second = ck.wait()
    out.update(second_ok=second.ok, second_committed=second.committed, second_error=second.error)
    print(json.dumps(out), flush=True)
    os._exit(0)  # skip process-group teardown: the peer is gone


def worker_shm(ckpt_dir: Path) -> None:
    from slurm_acme.ckpt.checkpointer import AsyncCheckpointer

    ck = AsyncCheckpointer(ckpt_dir, persist="process")
    ck.save(1, _state(0, 1))
    assert ck.wait().committed
    print(json.dumps({"shm": ck.arena.shm_name}), flush=True)
    while True:  # "training" goes on until Slurm kills the whole step
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigkill_during_persist_resume_loads_the_previous_healthy(tmp_path: Path) -> None:
    from slurm_acme.ckpt.checkpointer import AsyncCheckpointer
    from slurm_acme.ckpt.manifest import latest_healthy

    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, __file__, "sigkill", str(ckpt)])
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None, "worker exited early"
            assert time.monotonic() < deadline, "worker never reached the middle of a persist"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert list((ckpt / "step_00000020").glob(".rank00000.acme.tmp-*"))  # half-written file
    assert latest_healthy(ckpt).step == 10  # type: ignore[union-attr]
    resumed = AsyncCheckpointer(ckpt).resume(resume_from="")
    assert resumed is not None and resumed.step == 10 and float(resumed.state["w"][0]) == 100.0


def test_killing_the_whole_process_tree_leaves_no_arena_in_dev_shm(tmp_path: Path) -> None:
    """Slurm kills every process of a step (the resource tracker too): the shared
    arena's name must already be gone from /dev/shm, or each failure leaks RAM."""
    proc = subprocess.Popen([sys.executable, __file__, "shm", str(tmp_path / "ckpt")],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        name = json.loads(proc.stdout.readline())["shm"].lstrip("/")
        assert name  # the process persister uses a shared-memory arena
        assert name not in os.listdir("/dev/shm")  # unlinked as soon as the child mapped it
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert name not in os.listdir("/dev/shm")


def test_two_ranks_one_dies_mid_save_no_manifest_is_committed(tmp_path: Path) -> None:
    from slurm_acme.ckpt.manifest import latest_healthy, read_manifest

    ckpt = tmp_path / "ckpt"
    port = str(_free_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        procs.append(subprocess.Popen([sys.executable, __file__, "two_ranks", str(ckpt), "1"],
                                      env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert procs[1].returncode == 9  # rank 1 died in the middle of writing its shard
    rank0 = json.loads(outs[0].strip().splitlines()[-1])
    # The first save was committed with both shards, and each rank resumed its own shard.
    assert rank0["first_committed"] and rank0["resumed_step"] == 10
    assert rank0["resumed_rank"] == 0 and rank0["resumed_w"] == 100.0
    first = read_manifest(ckpt / "step_00000010")
    assert first is not None and sorted(s.rank for s in first.shards) == [0, 1]
    # The second save: rank 0's shard is fine, but rank 0 must not commit.
    assert not rank0["second_committed"] and not rank0["second_ok"]
    assert (ckpt / "step_00000020" / "rank00000.acme").exists()
    assert read_manifest(ckpt / "step_00000020") is None
    assert latest_healthy(ckpt).step == 10  # type: ignore[union-attr]


if __name__ == "__main__":
    mode, directory = sys.argv[1], Path(sys.argv[2])
    if mode == "sigkill":
        worker_sigkill(directory)
    elif mode == "shm":
        worker_shm(directory)
    else:
        worker_two_ranks(directory, int(sys.argv[3]))
