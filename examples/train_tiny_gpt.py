#!/usr/bin/env python3
"""Train a small character-level GPT with asynchronous checkpoints and a loss-spike guard.

Runs single-process, under ``torchrun``, or as ``srun`` tasks (gloo on CPU). The job's
environment, not its arguments, says where checkpoints live and where to resume:

  ACME_CKPT_DIR      checkpoint directory (or --ckpt-dir)
  ACME_RESUME_FROM   a step directory to resume from; empty: the newest healthy one
  ACME_SKIP_STEPS    step ranges whose batches are skipped (after a spike rollback)
  ACME_METRICS_FILE  JSONL heartbeat: step, loss, time, event, rank
  ACME_FAULTS        injected faults (see slurm_acme.ckpt.faults)

Exit codes: 0 done; 75 (TRAIN_ROLLBACK) loss spike/NaN; 76 (TRAIN_CHECKPOINTED_REQUEUE)
checkpointed after SIGUSR2; 2 bad arguments or environment.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

import numpy as np
import torch

from slurm_acme import exitcodes
from slurm_acme.ckpt.checkpointer import AsyncCheckpointer, CheckpointMismatch
from slurm_acme.ckpt.collective import all_reduce_max, init_distributed
from slurm_acme.ckpt.faults import FaultInjector
from slurm_acme.ckpt.guard import LossSpikeGuard
from slurm_acme.ckpt.metrics import MetricsWriter
from slurm_acme.ckpt.signals import install_checkpoint_signal
from slurm_acme.ckpt.skips import skip_steps_from_env
from slurm_acme.models.data import WindowSampler
from slurm_acme.models.tiny_gpt import (
    CharTokenizer,
    TinyGPT,
    TinyGPTConfig,
    save_pretrained,
)

log = logging.getLogger("train_tiny_gpt")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=600, help="last training step (inclusive)")
    p.add_argument("--ckpt-interval", type=int, default=50, help="checkpoint every N steps")
    p.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    p.add_argument("--ckpt-dir", default=None, help="default: $ACME_CKPT_DIR or ./checkpoints")
    p.add_argument("--ckpt-policy", choices=("wait", "skip"), default="wait",
                   help="what a save does while the previous one is still persisting")
    p.add_argument("--batch-size", type=int, default=16, help="per-rank batch size")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--spike-ratio", type=float, default=3.0)
    p.add_argument("--spike-warmup", type=int, default=5)
    p.add_argument("--data", default=str(HERE / "data" / "corpus.txt"))
    p.add_argument("--export", default=None, help="save_pretrained() the final model here")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    args = p.parse_args(argv)
    for name in ("steps", "ckpt_interval", "keep", "batch_size", "seq_len", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not Path(args.data).is_file():
        p.error(f"--data {args.data}: no such file")
    return args


def training_state(model, opt, sampler, step):  # type: ignore[no-untyped-def]
    """What every rank holds alike (DDP replicas, the global data position): saved once."""
    return {"step": step, "model": model.state_dict(), "optim": opt.state_dict(),
            "sampler": sampler.state_dict()}


def rank_state(guard):  # type: ignore[no-untyped-def]
    """What differs between ranks (own losses, own random streams): saved per rank."""
    return {"guard": guard.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                    "numpy": np.random.get_state()}}


def restore(resumed, model, opt, sampler, guard) -> int:  # type: ignore[no-untyped-def]
    state = resumed.state
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    sampler.load_state_dict(state["sampler"])
    if resumed.rank_state is not None:  # None: this rank did not exist (smaller world)
        guard.load_state_dict(resumed.rank_state["guard"])
        rng = resumed.rank_state["rng"]
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
    return int(state["step"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = init_distributed()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"[rank {env.rank}] %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed + env.rank)
    np.random.seed(args.seed + env.rank)

    text = Path(args.data).read_text()
    tokenizer = CharTokenizer.from_text(text)
    tokens = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    config = TinyGPTConfig(vocab_size=tokenizer.vocab_size, block_size=args.seq_len,
                           n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd)
    model = TinyGPT(config)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if env.distributed else model
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sampler = WindowSampler(tokens, args.seq_len, args.batch_size, seed=args.seed,
                            rank=env.rank, world_size=env.world_size)

    metrics = MetricsWriter.from_env(env.rank)
    guard = LossSpikeGuard(metrics, ratio=args.spike_ratio, warmup=args.spike_warmup)
    try:
        faults = FaultInjector.from_env()
        skips = skip_steps_from_env()
    except ValueError as exc:
        print(f"train_tiny_gpt: error: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    ckpt_dir = args.ckpt_dir or os.environ.get("ACME_CKPT_DIR") or "checkpoints"
    ckpt = AsyncCheckpointer(ckpt_dir, keep=args.keep, policy=args.ckpt_policy,
                             on_event=metrics.write)
    stop = install_checkpoint_signal()

    start = 1
    try:
        resumed = ckpt.resume()
    except CheckpointMismatch as exc:
        print(f"train_tiny_gpt: error: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    if resumed is not None:
        start = restore(resumed, model, opt, sampler, guard) + 1
        metrics.write("resume", resumed.step, path=resumed.path)
        print(f"[rank {env.rank}] resumed from {resumed.path} at step {resumed.step}",
              flush=True)

    if opt.state_dict()["state"]:  # Adam state exists (resumed): its layout is final
        ckpt.prepare(training_state(model, opt, sampler, start - 1), rank_state(guard))
    step = start - 1
    for step in range(start, args.steps + 1):
        faults.before_step(step)
        t0 = time.perf_counter()
        batch = sampler.next_batch()
        if step in skips:
            metrics.write("skip", step, data=batch.fingerprint)
            print(f"[rank {env.rank}] step {step} skipped (ACME_SKIP_STEPS={skips})", flush=True)
            flags = all_reduce_max([stop.requested])
        else:
            _, loss = ddp(batch.inputs, batch.targets)
            loss = faults.corrupt_loss(step, loss)
            decision = guard.check(step, float(loss.item()), (stop.requested,),
                                   data=batch.fingerprint)
            if decision.rollback:
                print(f"[rank {env.rank}] step {step} loss {loss.item():.4f}: "
                      f"{decision.verdict.event}, rolling back", flush=True)
                ckpt.close()
                guard.rollback(decision)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            flags = list(decision.flags)
            print(f"[rank {env.rank}] step {step} loss {loss.item():.4f} "
                  f"data {batch.fingerprint} {1000 * (time.perf_counter() - t0):.0f}ms",
                  flush=True)
        if flags[0]:  # SIGUSR2: save, wait for the commit, exit 76 for a requeue
            print(f"[rank {env.rank}] SIGUSR2: checkpointing step {step} for a requeue",
                  flush=True)
            ckpt.save_and_requeue(step, training_state(model, opt, sampler, step),
                                  rank_state(guard))
        if step % args.ckpt_interval == 0 or step == args.steps:
            report = ckpt.save(step, training_state(model, opt, sampler, step), rank_state(guard))
            print(f"[rank {env.rank}] checkpoint step {step} {report.action}: "
                  f"stall {1000 * report.stall_s:.1f}ms", flush=True)

    ckpt.close()
    if args.export and env.rank == 0:
        save_pretrained(model, tokenizer, args.export)
        print(f"[rank {env.rank}] exported model to {args.export}", flush=True)
    metrics.write("done", step)
    metrics.close()
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
