"""Real multi-process checkpoints (gloo on CPU): DDP replicas are written once, a
checkpoint resumes at another world size, and DTensor shards are resharded by DCP.

This file is also the worker script: ``python test_ckpt_dcp_ranks.py <mode> <dir>``
runs one rank (RANK/WORLD_SIZE/MASTER_* in the environment) and prints one JSON line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

WIDTH = 256  # a 256x256 Linear + Adam: ~790 KB of replicated state
ROWS = 31    # the DTensor's rows: sharded unevenly over 2 and 3 ranks


def _model():  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(WIDTH, WIDTH)


def _full():  # type: ignore[no-untyped-def]
    import torch

    return torch.arange(ROWS * 4, dtype=torch.float32).view(ROWS, 4)


def worker(mode: str, ckpt_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    from slurm_acme.ckpt.checkpointer import AsyncCheckpointer
    from slurm_acme.ckpt.collective import init_distributed

    env = init_distributed()
    mesh = init_device_mesh("cpu", (env.world_size,)) if env.distributed else None
    ck = AsyncCheckpointer(ckpt_dir, keep=3, commit_timeout_s=120)
    out: dict = {"rank": env.rank, "world": env.world_size}
    if mode == "save":
        model = _model()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.Adam(model.parameters())
        ddp(torch.randn(8, WIDTH)).sum().backward()
        opt.step()
        sharded = distribute_tensor(_full(), mesh, [Shard(0)])
        ck.save(10, {"model": model.state_dict(), "optim": opt.state_dict(),
                     "table": sharded}, rank_state={"rank": env.rank})
        result = ck.wait()
        out.update(committed=result.committed, error=result.error,  # type: ignore[union-attr]
                   weight=model.weight.sum().item())
    else:
        resumed = ck.resume(resume_from="")
        assert resumed is not None
        out.update(step=resumed.step, rank_state=resumed.rank_state,
                   weight=resumed.state["model"]["weight"].sum().item(),
                   optim_keys=sorted(resumed.state["optim"]["state"]))
        if mesh is not None:  # into a DTensor template: DCP reshards to this job's placement
            template = {"table": distribute_tensor(torch.zeros(ROWS, 4), mesh, [Shard(0)])}
            ck.resume(resume_from="", into=template)
            local = template["table"].to_local()
            out["local_rows"] = local[:, 0].div(4).int().tolist()
        else:
            out["table_equal"] = bool(torch.equal(resumed.state["table"], _full()))
    ck.close()
    print(json.dumps(out), flush=True)
    if env.distributed:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(mode: str, ckpt_dir: Path, world: int) -> list[dict]:
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world),
               "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
               "OMP_NUM_THREADS": "1"}
        if world == 1:
            env = {k: v for k, v in env.items() if k not in ("RANK", "WORLD_SIZE")}
        procs.append(subprocess.Popen([sys.executable, __file__, mode, str(ckpt_dir)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return sorted(outs, key=lambda o: o["rank"])


def test_replicas_are_written_once_and_resume_at_other_world_sizes(tmp_path: Path) -> None:
    from slurm_acme.ckpt.manifest import read_manifest

    ckpt = tmp_path / "ckpt"
    saved = _run("save", ckpt, 2)
    assert all(o["committed"] for o in saved), saved
    manifest = read_manifest(ckpt / "step_00000010")
    assert manifest is not None and manifest.world_size == 2
    data = sum(s.bytes for s in manifest.shards if s.file.endswith(".distcp"))
    replica = WIDTH * (WIDTH + 1) * 4 * 3  # weight and bias, plus Adam's two moments
    assert replica < data < 1.5 * replica  # once, not once per rank
    assert {s.rank for s in manifest.shards if s.file.endswith(".distcp")} == {0, 1}

    one = _run("resume", ckpt, 1)
    assert one[0]["step"] == 10 and one[0]["rank_state"] == {"rank": 0}
    assert one[0]["weight"] == saved[0]["weight"] and one[0]["table_equal"]
    assert one[0]["optim_keys"] == [0, 1]

    three = _run("resume", ckpt, 3)
    assert [o["rank_state"] for o in three] == [{"rank": 0}, {"rank": 1}, None]
    assert all(o["weight"] == saved[0]["weight"] for o in three)
    # 31 rows: DCP reshards the 2-rank layout (16 + 15) to this job's 11 + 11 + 9
    assert [o["local_rows"] for o in three] == [list(range(11)), list(range(11, 22)),
                                                list(range(22, 31))]


if __name__ == "__main__":
    worker(sys.argv[1], Path(sys.argv[2]))
