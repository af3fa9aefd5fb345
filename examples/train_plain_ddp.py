#!/usr/bin/env python3
"""A plain DDP training script, the kind people already have: no slurm-acme in it.

Its own model, its own ``torch.save`` checkpoints (``--ckpt-dir``, every
``--ckpt-every`` steps, rank 0), its own ``--resume PATH``, and a ``step N`` line
per step. It runs alone, under ``srun`` (ranks from SLURM_PROCID/SLURM_NTASKS)
or under ``torchrun`` (RANK/WORLD_SIZE), with ``env://`` rendezvous
(MASTER_ADDR/MASTER_PORT), gloo on CPU and NCCL on GPUs.

Under ``sacme submit`` it needs no change: ``examples/train_plain_ddp.yaml``
passes the checkpoint the supervisor found as ``--resume "$ACME_RESUME_FROM"``
(see docs/training.md).

``--simulate-failure STEP[:MESSAGE]`` is for demos and tests: at STEP of the
job's first run, the process on the step's second node (SLURM_NODEID 1) prints
MESSAGE and is killed (SIGKILL), as a rank that dies of a fault on its node.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--ckpt-dir", default="checkpoints")
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--resume", default="", help="a checkpoint file to resume from ('' = none)")
    p.add_argument("--step-seconds", type=float, default=0.0,
                   help="extra time per step (stands in for real compute)")
    p.add_argument("--simulate-failure", default="", metavar="STEP[:MESSAGE]")
    return p.parse_args()


def world() -> tuple[int, int]:
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    size = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    return rank, size


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same data for a step whatever happened before (a resumed run sees the same)."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 16, generator=g)
    return x, x.sum(dim=1, keepdim=True)


def maybe_fail(spec: str, step: int) -> None:
    if not spec or os.environ.get("SLURM_RESTART_COUNT", "0") != "0":
        return
    at, _, message = spec.partition(":")
    if step == int(at) and os.environ.get("SLURM_NODEID") == "1" \
            and os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")) == "0":
        if message:
            print(message, file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    args = parse_args()
    rank, size = world()
    if size > 1:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo",
                                rank=rank, world_size=size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    ddp = nn.parallel.DistributedDataParallel(model) if size > 1 else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    start = 0
    if args.resume:
        state = torch.load(args.resume, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"]
        print(f"[rank {rank}] resumed from {args.resume} at step {start}", flush=True)

    Path(args.ckpt_dir).mkdir(parents=True, exist_ok=True)
    for step in range(start + 1, args.steps + 1):
        maybe_fail(args.simulate_failure, step)
        x, y = batch(step, rank)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_seconds)
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} time {time.time():.3f}", flush=True)
            if step % args.ckpt_every == 0 or step == args.steps:
                torch.save({"step": step, "model": model.state_dict(), "optim": opt.state_dict()},
                           Path(args.ckpt_dir) / f"ckpt_step_{step:06d}.pt")
    if size > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
