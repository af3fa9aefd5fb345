#!/usr/bin/env python3
"""A DDP script that checkpoints with torch.distributed.checkpoint (DCP): no slurm-acme in it.

Every ``--ckpt-every`` steps all ranks write ``--ckpt-dir/step-N`` with
``dcp.save`` (DCP de-duplicates replicated tensors and writes ``.metadata``
last); ``--resume DIR`` loads one with ``dcp.load`` into this run's own
state dicts, so a checkpoint written by 2 ranks resumes on 1 or 3. Ranks come
from torchrun (RANK/WORLD_SIZE) or srun (SLURM_PROCID/SLURM_NTASKS),
rendezvous from MASTER_ADDR/MASTER_PORT.

Under ``sacme submit`` it needs no change: ``examples/train_dcp.yaml`` passes the
newest DCP folder the supervisor found as ``--resume "$ACME_RESUME_FROM"``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--ckpt-dir", default="checkpoints")
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--resume", default="", help="a DCP folder to resume from ('' = none)")
    p.add_argument("--step-seconds", type=float, default=0.0)
    return p.parse_args()


def main() -> int:
    args = parse_args()
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    size = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    if size == 1:  # DCP needs a process group, even for one rank run by hand
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29555")
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo",
                            rank=rank, world_size=size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    start = 0
    if args.resume:
        model_sd, optim_sd = get_state_dict(model, opt)
        state = {"model": model_sd, "optim": optim_sd, "step": 0}
        dcp.load(state, checkpoint_id=args.resume)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = int(state["step"])
        print(f"[rank {rank}] resumed from {args.resume} at step {start} (world size {size})",
              flush=True)

    for step in range(start + 1, args.steps + 1):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(32, 16, generator=g)
        loss = nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_seconds)
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % args.ckpt_every == 0 or step == args.steps:
            model_sd, optim_sd = get_state_dict(model, opt)
            dcp.save({"model": model_sd, "optim": optim_sd, "step": step},
                     checkpoint_id=os.path.join(args.ckpt_dir, f"step-{step}"))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
