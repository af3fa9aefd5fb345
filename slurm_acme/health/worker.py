"""The process srun starts on every node of a test group: one timed all_gather.

    python -m slurm_acme.health.worker --port P --master HOST [--backend gloo|nccl]

Rank, world size and local rank come from Slurm (``SLURM_PROCID``,
``SLURM_NTASKS``, ``SLURM_LOCALID``; ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``
also work). It speaks one JSON object per stdout line so the parent can read
srun's merged output:

- ``{"event": "ready", ...}`` from every rank once torch is imported; the
  parent's hard timeout on the collective starts when all ranks are ready, so
  a slow import on a busy node is not mistaken for a hang;
- ``{"event": "result", "busbw_gbps": ...}`` from rank 0 at the end;
- ``{"event": "error", "error": ...}`` from a rank whose collective raised.

Bus bandwidth follows nccl-tests for allgather: ``size`` is the gathered
buffer in bytes, ``algbw = size / time`` and ``busbw = algbw * (n - 1) / n``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from datetime import timedelta

from slurm_acme.health.faults import Fault, fault_for

#: Extra seconds a worker lives past its timeout before killing itself, in
#: case the parent's kill never reaches it.
SELF_DESTRUCT_GRACE_S = 30


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def busbw_gbps(size_bytes: int, seconds: float, world: int) -> float:
    """nccl-tests' allgather bus bandwidth in GB/s (1e9 bytes)."""
    if seconds <= 0 or world <= 1:
        return 0.0
    return size_bytes / seconds / 1e9 * (world - 1) / world


def slurm_rank() -> tuple[int, int, int]:
    """(rank, world size, local rank) from Slurm's or torchrun's variables."""
    env = os.environ
    rank = int(env.get("SLURM_PROCID", env.get("RANK", "0")))
    world = int(env.get("SLURM_NTASKS", env.get("WORLD_SIZE", "1")))
    local = int(env.get("SLURM_LOCALID", env.get("LOCAL_RANK", "0")))
    return rank, world, local


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def misbehave(fault: Fault | None, node: str) -> None:
    """Act out an injected fault inside the collective loop."""
    if fault is None:
        return
    if fault.kind == "raise":
        raise RuntimeError(f"injected fault on {node} (ACME_HEALTH_FAULT)")
    if fault.kind == "hang":
        while True:
            time.sleep(3600)
    time.sleep(fault.delay_s)


def run(args: argparse.Namespace) -> int:
    rank, world, local_rank = slurm_rank()
    node = node_name()
    fault = fault_for(node, os.environ)
    signal.alarm(int(args.startup_s + args.timeout + SELF_DESTRUCT_GRACE_S))
    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    emit("ready", rank=rank, node=node, backend=backend,
         step=os.environ.get("SLURM_STEP_ID", ""))
    try:
        dist.init_process_group(backend, init_method=f"tcp://{args.master}:{args.port}",
                                rank=rank, world_size=world,
                                timeout=timedelta(seconds=args.timeout))
        per_rank = max(1, int(args.size_mb * 2**20) // world // 4)
        chunk = torch.full((per_rank,), float(rank), dtype=torch.float32, device=device)
        gathered = [torch.empty_like(chunk) for _ in range(world)]
        for _ in range(args.warmup):
            dist.all_gather(gathered, chunk)
        _sync(torch, device)
        started = time.perf_counter()
        for _ in range(args.iters):
            misbehave(fault, node)
            dist.all_gather(gathered, chunk)
        _sync(torch, device)
        elapsed = (time.perf_counter() - started) / args.iters
        expected = torch.arange(world, dtype=torch.float32, device=device)
        if not torch.equal(torch.stack([g[0] for g in gathered]), expected):
            raise RuntimeError("all_gather returned wrong data")
        dist.barrier()
    except Exception as exc:
        emit("error", rank=rank, node=node, error=f"{type(exc).__name__}: {exc}"[:500])
        return 1
    if rank == 0:
        size = per_rank * 4 * world
        emit("result", world=world, bytes=size, time_s=elapsed, backend=backend,
             busbw_gbps=busbw_gbps(size, elapsed, world),
             algbw_gbps=size / elapsed / 1e9 if elapsed > 0 else 0.0)
    dist.destroy_process_group()
    return 0


def _sync(torch, device) -> None:  # type: ignore[no-untyped-def]
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m slurm_acme.health.worker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--master", required=True, help="address of rank 0's node")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--size-mb", type=float, default=64.0, help="gathered buffer size in MiB")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0, help="collective timeout, seconds")
    p.add_argument("--startup-s", type=float, default=120.0, help="allowance for start-up")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
