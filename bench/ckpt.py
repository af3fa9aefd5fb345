#!/usr/bin/env python3
"""Training stall per checkpoint: torch.save vs DCP async_save vs slurm-acme's AsyncCheckpointer,
against a plain memcpy of the same bytes.

State: a stack of 4096x4096 linear layers plus its Adam state (>= 1 GB). Each method
saves the same state `--repeats` times; the stall is the time the training thread is
blocked (median). Background work of the asynchronous methods is awaited between
saves and not counted as stall, but its duration is reported.

* ``memcpy``: ``memcpy`` of every tensor, one thread, into a preallocated, pre-faulted
  buffer: the floor a host copy can reach on one core (``stall_over_memcpy`` is ours
  divided by it; the target is <= 1.3).
* ``torch_save``: ``torch.save`` to a file, then ``fsync`` (a checkpoint is only a
  checkpoint once it is on disk; ours is fsynced and verified before it counts).
  The stall without fsync is reported too (``stall_s_torch_save_no_fsync``).
* ``dcp_async``: ``torch.distributed.checkpoint.async_save`` as a user calls it (a new
  default stager each time), and with one stager reused across saves (its cache of
  host buffers: ``stall_s_dcp_async_reused_stager``).
* ``acme``: ``AsyncCheckpointer.save`` (copy into the reused host arena; the DCP write,
  fsync, checksums and manifest in a background thread), after ``prepare()`` as a
  training loop would call it once. The persist is a thread, so
  ``stall_s_acme_thread`` (kept from when a process persister existed) is the same run.
* ``native``: the former native format's persist of the same host copy (one sequential
  write of the arena, fsync, re-read checksum), to decide whether it is worth keeping
  beside DCP (``background_s_native``; its stall is the same copy by construction).
* ``many``: 4096 small tensors (~256 MB): the per-tensor overhead of the copy.

It also measures how much a training-like loop slows down while our persist runs, and
while DCP async_save's background save runs (``persist_interference``).

Prints one JSON object. Usage: ``python bench/ckpt.py [--gb 1.2] [--dir DIR] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import ctypes
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

from slurm_acme.ckpt.arena import HostArena
from slurm_acme.ckpt.checkpointer import AsyncCheckpointer
from slurm_acme.ckpt.fsio import LocalFS, checksum_file
from slurm_acme.ckpt.shardfile import encode_header
from slurm_acme.ckpt.tree import flatten

warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
med = statistics.median


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
    return state, sum(t.nbytes for t in tensors_of(state))


def tensors_of(state: dict) -> list[torch.Tensor]:
    return flatten(state)[1]


def bench_memcpy(state: dict, repeats: int) -> list[float]:
    """One-thread memcpy of every tensor into a preallocated, pre-faulted buffer."""
    tensors = tensors_of(state)
    buf = torch.zeros(sum(t.nbytes for t in tensors), dtype=torch.uint8)
    base = buf.data_ptr()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        offset = 0
        for t in tensors:
            ctypes.memmove(base + offset, t.data_ptr(), t.nbytes)
            offset += t.nbytes
        times.append(time.perf_counter() - t0)
    return times


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


def bench_dcp_async(state: dict, root: Path, repeats: int, reuse_stager: bool
                    ) -> tuple[list[float], list[float]]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    stager = DefaultStager(StagingOptions(False, False, False, False)) if reuse_stager else None
    stalls, totals = [], []
    try:
        for i in range(repeats):
            target = root / f"dcp_{i}"
            t0 = time.perf_counter()
            future = dcp.async_save(state, checkpoint_id=str(target), no_dist=True,
                                    async_stager=stager)
            stalls.append(time.perf_counter() - t0)
            future.result()
            totals.append(time.perf_counter() - t0)
            shutil.rmtree(target)
    finally:
        if stager is not None:
            stager.close()
    return stalls, totals


def bench_acme(state: dict, root: Path, repeats: int) -> tuple[list[float], list[float]]:
    ck = AsyncCheckpointer(root / "acme", keep=1)
    stalls, persists = [], []
    try:
        ck.prepare(state)
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


def bench_native(state: dict, root: Path, repeats: int) -> list[float]:
    """The former native format's persist: header + arena in one write, fsync, re-read crc."""
    skeleton, tensors = flatten(state)
    arena = HostArena()
    arena.snapshot(tensors)
    slots = [{"dtype": str(s.dtype).removeprefix("torch."), "shape": list(s.shape),
              "offset": s.offset, "nbytes": s.nbytes} for s in arena.slots]
    header = encode_header(skeleton, slots, arena.size)
    data = memoryview(arena.buffer.numpy()).cast("B")[:arena.size]
    fs = LocalFS()
    times = []
    for i in range(repeats):
        path = root / f"native_{i}.acme"
        t0 = time.perf_counter()
        written = fs.write_atomic(path, [header, data])
        if checksum_file(path) != written:
            raise RuntimeError(f"{path} did not verify")
        times.append(time.perf_counter() - t0)
        path.unlink()
    arena.release()
    return times


def many_tensors_state(total_mb: int = 256, count: int = 4096) -> dict:
    numel = total_mb * 1024 * 1024 // 4 // count
    return {"params": {f"p{i}": torch.randn(numel) for i in range(count)}}


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


def _interference(start, busy, finish) -> dict:  # type: ignore[no-untyped-def]
    """Slowdown of a training-like loop while a background save runs, against the same
    loop just before and just after (the machine is shared, so both sides)."""
    out = {}
    for kind, step in (("python", _python_step), ("torch", _torch_step)):
        before = _mean_step_s(step, 2.0)
        start()
        n, t0 = 0, time.perf_counter()
        while busy():
            step()
            n += 1
        during = (time.perf_counter() - t0) / max(n, 1)
        persist_s = finish()
        after = _mean_step_s(step, 2.0)
        out[kind] = {"step_s_alone": (before + after) / 2, "step_s_during_persist": during,
                     "slowdown": during / ((before + after) / 2), "persist_s": persist_s}
    return out


def persist_interference(state: dict, root: Path) -> dict:
    import torch.distributed.checkpoint as dcp

    ck = AsyncCheckpointer(root / "interfere", keep=1)
    steps = iter(range(2, 100))
    try:
        ck.save(1, state)
        ck.wait()  # warm the arena
        ours = _interference(lambda: ck.save(next(steps), state), lambda: ck.busy,
                             lambda: ck.wait().persist_s)  # type: ignore[union-attr]
    finally:
        ck.close()
    box: dict = {}

    def start() -> None:
        box["t0"] = time.perf_counter()
        box["f"] = dcp.async_save(state, checkpoint_id=str(root / f"interfere_dcp_{len(box)}"),
                                  no_dist=True)

    def finish() -> float:
        box["f"].result()
        return time.perf_counter() - box["t0"]

    theirs = _interference(start, lambda: not box["f"].done(), finish)
    return {"thread": ours, "dcp_async": theirs}


def stall_comparison(state: dict, root: Path, repeats: int) -> dict:
    memcpy = bench_memcpy(state, repeats)
    print(f"memcpy: {med(memcpy):.3f}s", file=sys.stderr)
    ts_sync, ts_nofsync = bench_torch_save(state, root, repeats)
    print(f"torch.save: {med(ts_sync):.3f}s", file=sys.stderr)
    dcp_stall, dcp_total = bench_dcp_async(state, root, repeats, reuse_stager=False)
    reused_stall, _ = bench_dcp_async(state, root, repeats, reuse_stager=True)
    print(f"dcp async_save: {med(dcp_stall):.3f}s (reused stager {med(reused_stall):.3f}s)",
          file=sys.stderr)
    acme_stall, acme_persist = bench_acme(state, root, repeats)
    memcpy_after = bench_memcpy(state, repeats)  # the machine is shared: both sides
    print(f"acme: {med(acme_stall):.3f}s", file=sys.stderr)
    native = bench_native(state, root, repeats)
    memcpy_all = memcpy + memcpy_after
    return {
        "stall_s_memcpy": med(memcpy_all),
        "stall_s_torch_save": med(ts_sync),
        "stall_s_torch_save_no_fsync": med(ts_nofsync),
        "stall_s_dcp_async": med(dcp_stall),
        "stall_s_dcp_async_reused_stager": med(reused_stall),
        "stall_s_acme": med(acme_stall),
        "stall_over_memcpy": med(acme_stall) / med(memcpy_all),
        "stall_over_torch_save": med(acme_stall) / med(ts_sync),
        "speedup_vs_torch_save": med(ts_sync) / med(acme_stall),
        "speedup_vs_torch_save_no_fsync": med(ts_nofsync) / med(acme_stall),
        "speedup_vs_dcp_async": med(dcp_stall) / med(acme_stall),
        "speedup_vs_dcp_async_reused_stager": med(reused_stall) / med(acme_stall),
        "background_s_dcp_async": med(dcp_total),
        "background_s_acme": med(acme_persist),
        "background_s_native": med(native),
        "stall_s_acme_thread": med(acme_stall),
        "background_s_acme_thread": med(acme_persist),
        "stalls_s": {"memcpy": memcpy_all, "torch_save": ts_sync, "dcp_async": dcp_stall,
                     "dcp_async_reused_stager": reused_stall, "acme": acme_stall},
    }


def many_tensors(root: Path, repeats: int) -> dict:
    state = many_tensors_state()
    memcpy = bench_memcpy(state, repeats)
    stalls, _ = bench_acme(state, root, repeats)
    memcpy += bench_memcpy(state, repeats)
    count = len(state["params"])
    return {"tensors": count, "bytes": sum(t.nbytes for t in state["params"].values()),
            "stall_s_memcpy": med(memcpy), "stall_s_acme": med(stalls),
            "stall_over_memcpy": med(stalls) / med(memcpy),
            "overhead_us_per_tensor": (med(stalls) - med(memcpy)) / count * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, default=1.2, help="state size in GB (>= 1)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--part", choices=("all", "stall", "persist"), default="all",
                        help="stall: the comparison; persist: the slowdown while persisting")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    root = Path(tempfile.mkdtemp(prefix="acme-bench-ckpt-", dir=args.dir))
    out: dict = {}
    try:
        state, nbytes = build_state(args.gb)
        out.update(state_bytes=nbytes, repeats=args.repeats, torch_threads=args.threads,
                   load_avg_1m=os.getloadavg()[0], cpus=os.cpu_count(),
                   copy_threads=HostArena().threads)
        print(f"state: {nbytes / 1e9:.2f} GB in {root}", file=sys.stderr)
        if args.part in ("all", "stall"):
            out.update(stall_comparison(state, root, args.repeats))
            out["many"] = many_tensors(root, args.repeats)
        if args.part in ("all", "persist"):
            out["persist_interference"] = persist_interference(state, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
