"""The steps that run inside the evaluation's Slurm jobs.

``python -m slurm_acme.evaluate.worker STEP --run-dir DIR [--node K] [--index I]``
with STEP one of preload, trial, score, aggregate, cleanup, node. Each reads
the run spec and writes its outputs under the run dir; only ``aggregate``
touches the store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from slurm_acme.errors import AcmeError
from slurm_acme.evaluate.spec import RunSpec, read_spec
from slurm_acme.files import SHARED_ROOT_MODE, make_private_dirs
from slurm_acme.slurm.steps import StepRequest, start_step

COMPLETE_MARK = ".acme-preloaded"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


def _log(msg: str) -> None:
    print(f"seval-worker: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------- steps

def preload(spec: RunSpec, run_dir: Path, node: int) -> None:
    """Copy the checkpoint from (remote) storage to node-local memory, once per node."""
    began = time.time()
    target = spec.local_copy(node)
    make_private_dirs(target.parent, parents_mode=SHARED_ROOT_MODE)  # local_dir is shared; the copy is not
    if not (target / COMPLETE_MARK).exists():
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        shutil.copytree(spec.checkpoint, tmp)
        (tmp / COMPLETE_MARK).write_text(str(time.time()))
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    _write_json(run_dir / "timing" / f"preload-{node}.json",
                {"node": node, "started": began, "ended": time.time(), "target": str(target)})
    _log(f"preloaded {spec.checkpoint} -> {target} in {time.time() - began:.2f}s")


def model_path(spec: RunSpec, node: int) -> Path:
    local = spec.local_copy(node)
    if (local / COMPLETE_MARK).exists():
        return local
    _log(f"no node-local copy at {local}; loading from {spec.checkpoint}")
    return Path(spec.checkpoint)


def trial(spec: RunSpec, run_dir: Path, node: int, index: int) -> None:
    """Inference for one trial: load the model once, run its shards, write predictions."""
    t = spec.trial(node, index)
    began = time.time()
    if spec.backend != "builtin":
        from slurm_acme.evaluate.backends.harness import run_external_trial

        path = model_path(spec, node)
        timing = run_external_trial(spec, run_dir, t, path)
        _write_json(run_dir / "timing" / f"{t.trial_id}.json",
                    {**timing, "node": node, "index": index, "host": os.uname().nodename,
                     "job_id": os.environ.get("SLURM_JOB_ID", ""), "model_path": str(path),
                     "node_local": path == spec.local_copy(node)})
        _log(f"trial {t.trial_id}: {spec.backend} in {timing['ended'] - timing['started']:.2f}s")
        return
    from slurm_acme.evaluate.backends.builtin import BuiltinModel, predict_shard

    path = model_path(spec, node)
    model = BuiltinModel(path)
    loaded = time.time()
    shards: dict[str, Any] = {}
    for shard in t.shards:
        ds = spec.datasets[shard.dataset]
        out = run_dir / "pred" / t.trial_id / f"{shard.key}.jsonl"
        shards[shard.key] = predict_shard(model, ds.path, shard.start, shard.stop, ds.mode, out)
    _write_json(run_dir / "timing" / f"{t.trial_id}.json",
                {"trial": t.trial_id, "node": node, "index": index, "host": os.uname().nodename,
                 "job_id": os.environ.get("SLURM_JOB_ID", ""), "started": began, "ended": time.time(),
                 "load_s": loaded - began, "model_path": str(path),
                 "node_local": path == spec.local_copy(node), "shards": shards})
    _log(f"trial {t.trial_id}: {len(t.shards)} shard(s) in {time.time() - began:.2f}s")


def score(spec: RunSpec, run_dir: Path, node: int, index: int) -> None:
    """CPU verification of one trial's predictions (no GPU held)."""
    from slurm_acme.evaluate.scoring import score_records, scoring_workers

    t = spec.trial(node, index)
    began = time.time()
    rows = []
    if spec.backend != "builtin":
        from slurm_acme.evaluate.backends.harness import score_external_trial

        rows = score_external_trial(spec, run_dir, t)
    for shard in t.shards if spec.backend == "builtin" else ():
        ds = spec.datasets[shard.dataset]
        shard_began = time.monotonic()
        pred = run_dir / "pred" / t.trial_id / f"{shard.key}.jsonl"
        records = [json.loads(line) for line in pred.read_text(encoding="utf-8").splitlines() if line.strip()]
        result = score_records(shard.dataset, ds.kind, records, workers=scoring_workers())
        rows.append({"dataset": shard.dataset, "key": shard.key, "metric": result.metric,
                     "correct": result.correct, "total": result.total,
                     "cpu_s": time.monotonic() - shard_began})
    _write_json(run_dir / "score" / f"{t.trial_id}.json",
                {"trial": t.trial_id, "node": node, "index": index, "started": began, "ended": time.time(),
                 "job_id": os.environ.get("SLURM_JOB_ID", ""), "shards": rows})
    _log(f"scored {t.trial_id} in {time.time() - began:.2f}s")


def cleanup(spec: RunSpec, run_dir: Path, node: int) -> None:
    target = spec.node_dir(node)
    shutil.rmtree(target, ignore_errors=True)
    try:
        target.parent.rmdir()  # the eval's dir, once every node's copy is gone
    except OSError:
        pass
    _write_json(run_dir / "timing" / f"cleanup-{node}.json", {"node": node, "ended": time.time()})
    _log(f"removed {target}")


def aggregate(spec: RunSpec, run_dir: Path) -> None:
    from slurm_acme.evaluate.aggregate import aggregate_run

    aggregate_run(spec, run_dir)


#: One trial's step inside the node allocation: one task, one GPU, exactly its own CPUs.
TRIAL_STEP = StepRequest(exact=True, nodes=1, ntasks=1, gres="gpu:1", cpus_per_task=1)


def trial_command(run_dir: Path, node: int, index: int) -> list[str]:
    return [sys.executable, "-m", "slurm_acme.evaluate.worker", "trial", "--run-dir", str(run_dir),
            "--node", str(node), "--index", str(index)]


def node_allocation(spec: RunSpec, run_dir: Path, node: int, width: int) -> int:
    """allocation mode: preload, then the node's trials as srun steps, ``width`` at a time."""
    preload(spec, run_dir, node)
    queue = [t.index for t in spec.node_trials(node)]
    running: list[subprocess.Popen[bytes]] = []
    failed = 0
    try:
        while queue or running:
            while queue and len(running) < width:
                running.append(start_step(TRIAL_STEP, trial_command(run_dir, node, queue.pop(0))))
            time.sleep(0.5)
            for proc in [p for p in running if p.poll() is not None]:
                failed += proc.returncode != 0
                running.remove(proc)
    finally:
        cleanup(spec, run_dir, node)
    return 1 if failed else 0


# --------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seval-worker")
    parser.add_argument("step", choices=["preload", "trial", "score", "aggregate", "cleanup", "node"])
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--node", type=int, default=0)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--width", type=int, default=int(os.environ.get("SLURM_NTASKS") or 1))
    args = parser.parse_args(argv)
    spec = read_spec(args.run_dir)
    try:
        return _run_step(spec, args)
    except AcmeError as exc:
        # One line in the job's log, a note for `seval status`, and a failed array task.
        _log(f"{args.step} failed: {exc}")
        if args.step in ("trial", "score"):
            from slurm_acme.evaluate.backends.harness import write_failure

            write_failure(args.run_dir, spec.trial(args.node, args.index), args.step, str(exc))
        return 1


def _run_step(spec: RunSpec, args: argparse.Namespace) -> int:
    if args.step == "preload":
        preload(spec, args.run_dir, args.node)
    elif args.step == "trial":
        trial(spec, args.run_dir, args.node, args.index)
    elif args.step == "score":
        score(spec, args.run_dir, args.node, args.index)
    elif args.step == "cleanup":
        cleanup(spec, args.run_dir, args.node)
    elif args.step == "aggregate":
        aggregate(spec, args.run_dir)
    elif args.step == "node":
        return node_allocation(spec, args.run_dir, args.node, args.width)
    return 0


if __name__ == "__main__":
    from slurm_acme.errors import AcmeError

    try:
        sys.exit(main())
    except AcmeError as exc:  # e.g. no OS isolation for code scoring: one line, not a traceback
        _log(f"error: {exc}")
        sys.exit(exc.exit_code)
