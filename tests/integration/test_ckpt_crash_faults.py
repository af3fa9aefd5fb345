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

STATE_FLOATS = 1_000_000  # 4 MB


def _state(step: int):  # type: ignore[no-untyped-def]
    """What every rank holds alike (saved once)."""
    import torch

    return {"shared": torch.full((STATE_FLOATS,), float(step)), "step": step}


def _rank_state(rank: int, step: int):  # type: ignore[no-untyped-def]
    """What is this rank's own (saved under rank_state.<rank>)."""
    import torch

    return {"w": torch.full((STATE_FLOATS,), float(step * 10 + rank)), "rank": rank}


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
    ck.save(10, _state(10), _rank_state(0, 10))
    assert ck.wait().committed
    fs.armed = True
    ck.save(20, _state(20), _rank_state(0, 20))
    while True:  # "training" goes on until the test kills us
        time.sleep(0.1)


def worker_two_ranks(ckpt_dir: Path, rank_to_kill: int) -> None:
    import torch.distributed as dist

    from slurm_acme.ckpt.checkpointer import AsyncCheckpointer
    from slurm_acme.ckpt.collective import init_distributed

    env = init_distributed()
    fs = _slow_midway_fs(ckpt_dir.parent / f"ready{env.rank}", die=True)
    ck = AsyncCheckpointer(ckpt_dir, keep=3, fs=fs, commit_timeout_s=60)
    ck.save(10, _state(10), _rank_state(env.rank, 10))
    first = ck.wait()
    resumed = ck.resume(resume_from="")
    out = {"rank": env.rank, "first_ok": first.ok, "first_committed": first.committed,
           "resumed_step": resumed.step, "resumed_rank": resumed.rank_state["rank"],
           "resumed_w": float(resumed.rank_state["w"][0]),
           "resumed_shared": float(resumed.state["shared"][0])}
    dist.barrier()
    fs.armed = env.rank == rank_to_kill
    ck.save(20, _state(20), _rank_state(env.rank, 20))
    second = ck.wait()
    out.update(second_ok=second.ok, second_committed=second.committed, second_error=second.error)
    print(json.dumps(out), flush=True)
    os._exit(0)  # skip process-group teardown: the peer is gone


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigkill_during_persist_resume_loads_the_previous_healthy(tmp_path: Path) -> None:
    from slurm_acme.ckpt.checkpointer import AsyncCheckpointer
    from slurm_acme.ckpt.manifest import latest_healthy, read_manifest

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
    assert (ckpt / "step_00000020" / "__0_0.distcp").exists()  # the half-written file
    assert read_manifest(ckpt / "step_00000020") is None
    assert latest_healthy(ckpt).step == 10  # type: ignore[union-attr]
    resumed = AsyncCheckpointer(ckpt).resume(resume_from="")
    assert resumed is not None and resumed.step == 10
    assert float(resumed.rank_state["w"][0]) == 100.0 and float(resumed.state["shared"][0]) == 10


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
    # The first save was committed with both ranks' files, and rank 0 resumed its own state.
    assert rank0["first_committed"] and rank0["resumed_step"] == 10
    assert rank0["resumed_rank"] == 0 and rank0["resumed_w"] == 100.0
    assert rank0["resumed_shared"] == 10.0
    first = read_manifest(ckpt / "step_00000010")
    assert first is not None and {s.rank for s in first.shards} == {0, 1}
    # The second save: rank 0's file is written, but rank 0 must not commit.
    assert not rank0["second_committed"] and not rank0["second_ok"]
    assert (ckpt / "step_00000020" / "__0_0.distcp").exists()
    assert read_manifest(ckpt / "step_00000020") is None
    assert latest_healthy(ckpt).step == 10  # type: ignore[union-attr]


if __name__ == "__main__":
    mode, directory = sys.argv[1], Path(sys.argv[2])
    if mode == "sigkill":
        worker_sigkill(directory)
    else:
        worker_two_ranks(directory, int(sys.argv[3]))
