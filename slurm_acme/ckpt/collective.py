"""The few collectives the checkpointer and guard need, no-ops when single-process."""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from slurm_acme.ckpt.distenv import DistEnv, dist_env
from slurm_acme.contracts import ENV_MASTER_ADDR, ENV_MASTER_PORT


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def init_distributed(env: DistEnv | None = None, timeout_s: float = 300.0) -> DistEnv:
    """Join the gloo process group described by the environment (env:// rendezvous).

    Single-process runs (world size 1) do not create a group at all.
    """
    env = env or dist_env()
    if env.distributed and not dist.is_initialized():
        missing = [v for v in (ENV_MASTER_ADDR, ENV_MASTER_PORT) if not os.environ.get(v)]
        if missing:
            raise RuntimeError(f"world size {env.world_size} but {', '.join(missing)} not set; "
                               "the launcher must export the rendezvous address")
        dist.init_process_group("gloo", init_method="env://", rank=env.rank,
                                world_size=env.world_size, timeout=timedelta(seconds=timeout_s))
    return env


def all_reduce_max(values: list[int]) -> list[int]:
    """Element-wise max over ranks (an OR for 0/1 flags); identity when single-process."""
    if not is_distributed():
        return list(values)
    device = "cpu"
    if dist.get_backend() == "nccl":  # NCCL reduces device tensors only
        device = f"cuda:{torch.cuda.current_device()}"
    t = torch.tensor(values, dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [int(v) for v in t.tolist()]


def all_reduce_min(values: list[int]) -> list[int]:
    return [-v for v in all_reduce_max([-v for v in values])]


def new_side_group(timeout_s: float):  # type: ignore[no-untyped-def]
    """A separate gloo group for checkpoint traffic from the background thread, so it
    never interleaves with the training loop's collectives on the default group."""
    if not is_distributed():
        return None
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
