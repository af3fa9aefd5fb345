#!/usr/bin/env python3
"""Training stall per checkpoint: torch.save vs DCP async_save vs slurm-acme's AsyncCheckpointer.

State: a stack of 4096x4096 linear layers plus its Adam state (>= 1 GB). Each method
saves the same state 5 times; the stall is the time the training thread is blocked
(median of 5). Background work of the asynchronous methods is awaited between
saves and not counted as stall, but its duration is reported.

* ``torch_save``: ``torch.save`` to a file, then ``fsync`` (a checkpoint is only a
  checkpoint once it is on disk; ours is fsynced and verified before it counts).
  The stall without fsync is reported too (``stall_s_torch_save_no_fsync``).
* ``dcp_async``: ``torch.distributed.checkpoint.async_save`` (default thread executor).
* ``acme``: ``AsyncCheckpointer.save`` with its default persister (a child process;
  copy into reused host buffers; background write, fsync, verify, manifest), and the
  same with the thread persister (``stall_s_acme_thread``).

It also compares the two persist backends (thread vs process) by the slowdown of a
compute loop that runs while the persist is in progress.

Prints one JSON object. Usage: ``python bench/ckpt.py [--gb 1.2] [--dir DIR] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from slurm_acme.ckpt.checkpointer import AsyncCheckpointer

warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")


def build_state(gb: float) -> tuple[dict, int]:
    width = 4096
    layer_bytes = width * width * 4 * 3  # weights + Adam exp_avg + exp_avg_sq
    layers = max(1, round(gb * 1e9 / layer_bytes))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False)
                                  for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for p in model.parameters():
        p.grad = None
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 1}
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    nbytes += sum(v.numel() * v.element_size() for s in opt.state_dict()["state"].values()
                  for v in s.values() if isinstance(v, torch.Tensor))
    return state, nbytes


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def bench_torch_save(state: dict, root: Path, repeats: int) -> tuple[list[float], list[float]]:
    with_fsync, without = [], []
    for i in range(repeats):
        path = root / f"torch_save_{i}.pt"
        t0 = time.perf_counter()
        torch.save(state, path)
        t1 = time.perf_counter()
        fsync_path(path)
        t2 = time.perf_counter()
        without.append(t1 - t0)
        with_fsync.append(t2 - t0)
        path.unlink()
    return with_fsync, without


def bench_dcp_async(state: dict, root: Path, repeats: int) -> tuple[list[float], list[float]]:
    import torch.distributed.checkpoint as dcp

    stalls, totals = [], []
    for i in range(repeats):
        target = root / f"dcp_{i}"
        t0 = time.perf_counter()
        future = dcp.async_save(state, checkpoint_id=str(target), no_dist=True)
        stalls.append(time.perf_counter() - t0)
        future.result()
        totals.append(time.perf_counter() - t0)
        shutil.rmtree(target)
    return stalls, totals


def bench_acme(state: dict, root: Path, repeats: int, persist: str
               ) -> tuple[list[float], list[float]]:
    ck = AsyncCheckpointer(root / f"acme_{persist}", keep=1, persist=persist)
    stalls, persists = [], []
    try:
        for i in range(repeats):
            report = ck.save(i + 1, state)
            stalls.append(report.stall_s)
            result = ck.wait()
            if result is None or not result.committed:
                raise RuntimeError(f"acme save {i + 1} failed: {result}")
            persists.append(result.persist_s)
    finally:
        ck.close()
    return stalls, persists


def _python_step() -> None:
    """Pure-Python work: holds the GIL, so it shows GIL contention with a persist thread."""
    sum(i * i for i in range(20_000))


_MATRIX = torch.randn(384, 384)


def _torch_step() -> None:
    """A small matmul: releases the GIL, so it shows CPU/memory-bandwidth contention."""
    (_MATRIX @ _MATRIX).sum().item()


def _mean_step_s(step, seconds: float) -> float:  # type: ignore[no-untyped-def]
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return (time.perf_counter() - t0) / n


def persist_interference(state: dict, root: Path, persist: str) -> dict:
    """Slowdown of a training-like loop while a persist runs, against the same loop
    measured just before and just after (the machine is shared, so both sides)."""
    ck = AsyncCheckpointer(root / f"interfere_{persist}", keep=1, persist=persist)
    out: dict = {}
    try:
        ck.save(1, state)
        ck.wait()  # warm the arena and the persist worker
        for i, (kind, step) in enumerate((("python", _python_step), ("torch", _torch_step))):
            before = _mean_step_s(step, 2.0)
            ck.save(2 + i, state)
            n, t0 = 0, time.perf_counter()
            while ck.busy:
                step()
                n += 1
            during = (time.perf_counter() - t0) / max(n, 1)
            result = ck.wait()
            after = _mean_step_s(step, 2.0)
            out[kind] = {"step_s_alone": (before + after) / 2, "step_s_during_persist": during,
                         "slowdown": during / ((before + after) / 2),
                         "persist_s": result.persist_s if result else None}
    finally:
        ck.close()
    return out


def stall_comparison(state: dict, root: Path, repeats: int) -> dict:
    med = statistics.median
    ts_sync, ts_nofsync = bench_torch_save(state, root, repeats)
    print(f"torch.save: {med(ts_sync):.3f}s", file=sys.stderr)
    dcp_stall, dcp_total = bench_dcp_async(state, root, repeats)
    print(f"dcp async_save: {med(dcp_stall):.3f}s", file=sys.stderr)
    acme_stall, acme_persist = bench_acme(state, root, repeats, "auto")
    print(f"acme: {med(acme_stall):.3f}s", file=sys.stderr)
    thread_stall, thread_persist = bench_acme(state, root, repeats, "thread")
    return {
        "stall_s_torch_save": med(ts_sync),
        "stall_s_torch_save_no_fsync": med(ts_nofsync),
        "stall_s_dcp_async": med(dcp_stall),
        "stall_s_acme": med(acme_stall),
        "speedup_vs_torch_save": med(ts_sync) / med(acme_stall),
        "speedup_vs_torch_save_no_fsync": med(ts_nofsync) / med(acme_stall),
        "speedup_vs_dcp_async": med(dcp_stall) / med(acme_stall),
        "background_s_dcp_async": med(dcp_total),
        "background_s_acme": med(acme_persist),
        "stall_s_acme_thread": med(thread_stall),
        "background_s_acme_thread": med(thread_persist),
        "stalls_s": {"torch_save": ts_sync, "dcp_async": dcp_stall, "acme": acme_stall,
                     "acme_thread": thread_stall},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, default=1.2, help="state size in GB (>= 1)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--part", choices=("all", "stall", "persist"), default="all",
                        help="stall: the three-way comparison; persist: thread vs process")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    root = Path(tempfile.mkdtemp(prefix="acme-bench-ckpt-", dir=args.dir))
    out: dict = {}
    try:
        state, nbytes = build_state(args.gb)
        out.update(state_bytes=nbytes, repeats=args.repeats, torch_threads=args.threads,
                   load_avg_1m=os.getloadavg()[0], cpus=os.cpu_count())
        print(f"state: {nbytes / 1e9:.2f} GB in {root}", file=sys.stderr)
        if args.part in ("all", "stall"):
            out.update(stall_comparison(state, root, args.repeats))
        if args.part in ("all", "persist"):
            out["persist_interference"] = {p: persist_interference(state, root, p)
                                           for p in ("thread", "process")}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
