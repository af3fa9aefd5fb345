"""What ``seval CKPT`` does, as functions the CLI and tests call: prepare, then submit."""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from slurm_acme.access import current_viewer
from slurm_acme.config import EvaluateConfig
from slurm_acme.errors import InputError
from slurm_acme.evaluate.planner import Plan, Resources, plan_evaluation
from slurm_acme.evaluate.priors import Prior, resolve_priors
from slurm_acme.evaluate.registry import Dataset, load_registry
from slurm_acme.evaluate.spec import RunSpec, build_spec, write_spec
from slurm_acme.evaluate.submit import JobPlan, SubmitSettings, build_job_plan, execute


@dataclass(frozen=True)
class Prepared:
    plan: Plan
    spec: RunSpec
    jobs: JobPlan
    run_dir: Path
    datasets: tuple[Dataset, ...]
    prior_sources: dict[str, str]


def model_size_b(checkpoint: Path) -> float:
    """Parameters in billions, estimated from the checkpoint's bytes (2 bytes/param)."""
    total = sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file())
    return total / 2e9


def new_eval_id(checkpoint: Path) -> str:
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in checkpoint.name)[:32] or "ckpt"
    return f"{stem}-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(2)}"


def prepare(cfg: EvaluateConfig, checkpoint: str, datasets_spec: str, *, nodes: list[str],
            measured: dict[str, Prior] | None = None, db_url: str, mode: str = "jobs",
            gpus_per_node: int | None = None, size_b: float | None = None, seed: int = 0,
            backend: str | None = None, eval_id: str | None = None) -> Prepared:
    """Select datasets, resolve priors, plan, and build the job plan. No Slurm, no writes."""
    ckpt = Path(checkpoint).expanduser().resolve()
    if not ckpt.is_dir():
        raise InputError(f"checkpoint {checkpoint!r} is not a directory")
    registry = load_registry(cfg.datasets_files)
    datasets = registry.select(datasets_spec)
    backend = backend or cfg.backend
    if backend == "builtin":
        missing = [d.name for d in datasets if not d.path]
        if missing:
            raise InputError(f"--datasets: the builtin backend needs example files; "
                             f"{', '.join(missing[:5])} have no 'path' in the registry (try --datasets tiny)")
    size = size_b if size_b is not None else model_size_b(ckpt)
    priors = resolve_priors(datasets, size, measured)
    gpn = gpus_per_node or cfg.gpus_per_node
    # One copy over the node's storage NIC; the baseline's jobs load gpn copies at once.
    preload_s = size * 2 * 8 / cfg.storage_gbps
    res = Resources(nodes=len(nodes), gpus_per_node=gpn, cpu_slots=cfg.cpu_slots_per_node * len(nodes),
                    cpus_per_score_task=cfg.cpus_per_score_task, trial_overhead_s=cfg.trial_overhead_s,
                    preload_s=preload_s, remote_load_s=preload_s * gpn)
    plan = plan_evaluation(datasets, priors, res, seed=seed, splittable=backend == "builtin")
    eval_id = eval_id or new_eval_id(ckpt)
    run_dir = Path(cfg.work_dir).expanduser() / eval_id
    spec = build_spec(eval_id=eval_id, checkpoint=str(ckpt), local_dir=cfg.local_dir, backend=backend,
                      model_size_b=size, db_url=db_url, nodes=tuple(nodes), plan=plan, datasets=datasets)
    settings = SubmitSettings(partition=cfg.partition, cpu_partition=cfg.cpu_partition,
                              cpus_per_score_task=cfg.cpus_per_score_task, gpus_per_node=gpn,
                              time_limit=cfg.time_limit)
    jobs = build_job_plan(spec, run_dir, settings, mode)
    return Prepared(plan, spec, jobs, run_dir, tuple(datasets),
                    {name: p.source for name, p in priors.items()})


def submit(prepared: Prepared, slurm, store, cluster: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Write the run spec, submit every job (all or nothing), record the run."""
    from slurm_acme.store import evaluate as store_eval

    write_spec(prepared.spec, prepared.run_dir)
    ids = execute(prepared.jobs, slurm)
    store_eval.create_run(store, eval_id=prepared.spec.eval_id, checkpoint=prepared.spec.checkpoint,
                          model_size_b=prepared.spec.model_size_b, cluster=cluster,
                          plan=plan_summary(prepared.plan), job_ids=ids, run_dir=str(prepared.run_dir),
                          mode=prepared.jobs.mode, user=current_viewer().name)
    return ids


def plan_summary(plan: Plan) -> dict[str, Any]:
    """The plan as JSON: what ``--dry-run --json`` prints and the store keeps."""
    return {
        "method": plan.method, "granularity": plan.granularity, "seed": plan.seed,
        "resources": asdict(plan.resources),
        "total_gpu_s": round(plan.total_gpu_s, 3),
        "predicted_makespan_s": round(plan.predicted_makespan_s, 3),
        "lower_bound_s": round(plan.lower_bound_s, 3), "gap": round(plan.gap, 4),
        "baseline_makespan_s": round(plan.baseline_makespan_s, 3),
        "trials": [{"trial": t.trial_id, "node": t.node, "slot": t.slot, "start_s": round(t.start_s, 3),
                    "end_s": round(t.end_s, 3), "score_end_s": round(t.score_end_s, 3),
                    "gpu_s": round(t.gpu_s, 3), "cpu_s": round(t.cpu_s, 3),
                    "shards": [{"dataset": s.dataset, "start": s.start, "stop": s.stop} for s in t.shards]}
                   for t in plan.trials],
    }
