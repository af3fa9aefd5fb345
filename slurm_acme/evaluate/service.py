"""What ``seval`` does, as functions the CLI and tests call: plan, then submit.

:func:`plan_run` resolves everything a run needs (nodes, mode, model size,
priors, the tool and its task names) into a frozen :class:`Prepared`; a dry
run stops there, having asked Slurm and the store nothing. :func:`submit`
executes it. Cancelling is planned the same way (:func:`plan_cancel`).
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slurm_acme.access import current_viewer
from slurm_acme.config import EvaluateConfig
from slurm_acme.errors import InputError
from slurm_acme.evaluate.backends import external as ext
from slurm_acme.evaluate.backends.catalogue import Catalogue, check_names, load_catalogue
from slurm_acme.evaluate.planner import Plan, Resources, plan_evaluation
from slurm_acme.evaluate.priors import Prior, resolve_priors
from slurm_acme.evaluate.registry import Dataset, load_registry
from slurm_acme.evaluate.spec import RunSpec, build_spec, write_spec
from slurm_acme.evaluate.states import EvalState
from slurm_acme.evaluate.submit import JobPlan, JobSpec, SubmitSettings, build_job_plan, execute
from slurm_acme.sections import SectionError


@dataclass(frozen=True)
class Prepared:
    plan: Plan
    spec: RunSpec
    jobs: JobPlan
    run_dir: Path
    datasets: tuple[Dataset, ...]
    prior_sources: dict[str, str]


@dataclass(frozen=True)
class RunRequest:
    """What the user asked ``seval CKPT`` for (CLI flags; None = from the config)."""

    checkpoint: str
    datasets: str = "all"
    node_count: int = 1
    nodelist: tuple[str, ...] = ()
    gpus_per_node: int | None = None
    backend: str | None = None
    mode: str | None = None
    model_size_b: float | None = None
    seed: int = 0
    tool: Mapping[str, Any] = field(default_factory=dict)  # HarnessToolConfig fields to override


def model_size_b(checkpoint: Path) -> float:
    """Parameters in billions, estimated from the checkpoint's bytes (2 bytes/param)."""
    total = sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file())
    return total / 2e9


def new_eval_id(checkpoint: Path) -> str:
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in checkpoint.name)[:32] or "ckpt"
    return f"{stem}-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(2)}"


# ----------------------------------------------------------------- the tool

def tool_run(cfg: EvaluateConfig, backend: str, overrides: Mapping[str, Any], python: str) -> ext.ToolRun:
    """The configured tool settings with the command line's on top, checked and resolved."""
    section = f"evaluate.{backend.replace('-', '_')}"
    try:
        merged = cfg.tool(backend).with_changes(**{k: v for k, v in overrides.items() if v is not None})
    except SectionError as exc:
        raise InputError(f"{section}.{exc.field}: {exc.message} (got {exc.value!r})") from None
    tool = ext.ToolRun(
        backend=backend, executable=ext.resolve_executable(backend, merged.executable, python),
        task_paths=tuple(str(Path(p).expanduser().resolve()) for p in merged.task_paths),
        model_args=tuple(merged.model_args), num_fewshot=merged.num_fewshot, limit=merged.limit,
        batch_size=merged.batch_size, max_out_len=merged.max_out_len,
        allow_code_execution=cfg.allow_unsandboxed_code)  # granted by the system config only
    ext.check_options(tool)
    for path in tool.task_paths:
        if not Path(path).is_dir():
            raise InputError(f"{section}.task_paths: {path} is not a directory")
    return tool


def _tool_parts(datasets: Sequence[Dataset], backend: str, tool: ext.ToolRun,
                catalogue: Catalogue | None) -> dict[str, tuple[str, ...]]:
    """Check every dataset's tool name against the installed tool; what it reports each as."""
    unsafe = [d.name for d in datasets if d.is_code and not tool.allow_code_execution]
    if unsafe:
        raise InputError(f"--datasets: {', '.join(unsafe)} run model-written code inside {backend}, outside "
                         "seval's sandbox; use --backend builtin, or have the site set "
                         "evaluate.allow_unsandboxed_code = true in /etc/acme/acme.toml")
    wanted = {d.name: d.tool_task(backend) for d in datasets}
    catalogue = catalogue or load_catalogue(tool, [t for t in wanted.values() if t])
    unsupported = {d.name: d.lm_eval_unsupported for d in datasets} if backend == "lm-eval" else {}
    check_names(catalogue, wanted, unsupported)
    return {name: catalogue.reported_as(name, task) for name, task in wanted.items()}


# ------------------------------------------------------------------- plan

def prepare(cfg: EvaluateConfig, checkpoint: str, datasets_spec: str, *, nodes: list[str],
            measured: dict[str, Prior] | None = None, db_url: str, mode: str = "jobs",
            gpus_per_node: int | None = None, size_b: float | None = None, seed: int = 0,
            backend: str | None = None, eval_id: str | None = None,
            tool_overrides: Mapping[str, Any] | None = None, catalogue: Catalogue | None = None,
            python: str = sys.executable) -> Prepared:
    """Select datasets, check them against the tool, resolve priors, plan, and build the
    job plan. No Slurm, no store, no writes (the tool may be asked for its task list)."""
    ckpt = Path(checkpoint).expanduser().resolve()
    if not ckpt.is_dir():
        raise InputError(f"checkpoint {checkpoint!r} is not a directory")
    registry = load_registry(cfg.datasets_files)
    datasets = registry.select(datasets_spec)
    backend = backend or cfg.backend
    tool, parts = None, None
    if backend == "builtin":
        missing = [d.name for d in datasets if not d.path]
        if missing:
            raise InputError(f"--datasets: the builtin backend needs example files; "
                             f"{', '.join(missing[:5])} have no 'path' in the registry (try --datasets tiny)")
    else:
        tool = tool_run(cfg, backend, tool_overrides or {}, python)
        parts = _tool_parts(datasets, backend, tool, catalogue)
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
                      model_size_b=size, db_url=db_url, nodes=tuple(nodes), plan=plan, datasets=datasets,
                      tool=tool, parts=parts)
    jobs = build_job_plan(spec, run_dir, submit_settings(cfg, gpn, python), mode)
    return Prepared(plan, spec, jobs, run_dir, tuple(datasets),
                    {name: p.source for name, p in priors.items()})


def submit_settings(cfg: EvaluateConfig, gpus_per_node: int | None = None,
                    python: str = sys.executable) -> SubmitSettings:
    return SubmitSettings(partition=cfg.partition, cpu_partition=cfg.cpu_partition,
                          cpus_per_score_task=cfg.cpus_per_score_task,
                          gpus_per_node=gpus_per_node or cfg.gpus_per_node, time_limit=cfg.time_limit,
                          python=python)


def idle_gpu_nodes(slurm, count: int) -> list[str]:  # type: ignore[no-untyped-def]
    """The first ``count`` idle or mixed nodes with GPUs, as sinfo reports them."""
    nodes = [n.name for n in slurm.sinfo_nodes()
             if "gpu" in (n.gres or "") and n.state.rstrip("*~#").lower() in ("idle", "mixed")]
    if len(nodes) < count:
        raise InputError(f"--nodes {count}: only {len(nodes)} idle/mixed GPU node(s) ({', '.join(nodes) or 'none'})")
    return nodes[:count]


def plan_run(cfg: EvaluateConfig, request: RunRequest, *, db_url: str, slurm=None,  # type: ignore[no-untyped-def]
             measured: Callable[[float], dict[str, Prior]] | None = None,
             show_config: Callable[[], Mapping[str, str]] | None = None) -> Prepared:
    """Everything ``seval CKPT`` decides before submitting.

    With ``slurm`` (a real run): idle GPU nodes from sinfo unless a nodelist is given,
    ``auto`` mode from the controller's JobContainerType, measured priors from
    ``measured``. Without it (a dry run): placeholder node names, ``auto`` means
    ``jobs``, heuristic priors; Slurm and the store are not touched.
    """
    from slurm_acme.evaluate.container import job_container_type, mode_for

    if request.node_count < 1:
        raise InputError(f"--nodes must be >= 1 (got {request.node_count})")
    nodes = list(request.nodelist)
    mode = request.mode or cfg.mode
    if slurm is not None:
        nodes = nodes or idle_gpu_nodes(slurm, request.node_count)
        if mode == "auto":
            mode = mode_for(job_container_type(show_config() if show_config else slurm.show_config()),
                            cfg.local_dir)
    nodes = nodes or [f"<node{i}>" for i in range(request.node_count)]
    mode = "jobs" if mode == "auto" else mode
    ckpt = Path(request.checkpoint).expanduser()
    size = request.model_size_b
    if size is None:
        size = model_size_b(ckpt) if ckpt.is_dir() else 0.0
    priors = measured(size) if measured is not None and slurm is not None else None
    return prepare(cfg, request.checkpoint, request.datasets, nodes=nodes, measured=priors, db_url=db_url,
                   mode=mode, gpus_per_node=request.gpus_per_node, size_b=size, seed=request.seed,
                   backend=request.backend, tool_overrides=request.tool)


def tool_commands(prepared: Prepared) -> list[tuple[str, str, list[str]]]:
    """(trial, step, argv) of every external tool call, as a GPU allocation runs them."""
    from slurm_acme.evaluate.backends.harness import infer_argv, score_argv

    spec = prepared.spec
    if spec.backend == "builtin":
        return []
    out = []
    for t in spec.trials:
        out.append((t.trial_id, "trial", infer_argv(spec, prepared.run_dir, t, spec.local_copy(t.node), gpus=1)))
        scoring = score_argv(spec, prepared.run_dir, t)
        if scoring is not None:
            out.append((t.trial_id, "score", scoring))
    return out


def submit(prepared: Prepared, slurm, store, cluster: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Write the run spec, submit every job (all or nothing), record the run."""
    from slurm_acme.evaluate.backends.harness import prepare_run_dir
    from slurm_acme.store import evaluate as store_eval

    write_spec(prepared.spec, prepared.run_dir)
    prepare_run_dir(prepared.spec, prepared.run_dir)
    ids = execute(prepared.jobs, slurm)
    store_eval.create_run(store, eval_id=prepared.spec.eval_id, checkpoint=prepared.spec.checkpoint,
                          model_size_b=prepared.spec.model_size_b, cluster=cluster,
                          plan=plan_summary(prepared.plan), job_ids=ids, run_dir=str(prepared.run_dir),
                          mode=prepared.jobs.mode, state=EvalState.SUBMITTED.value,
                          user=current_viewer().name)
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


# ----------------------------------------------------------------- cancel

@dataclass(frozen=True)
class CancelPlan:
    """Cancelling an evaluation: its jobs, then cleanup jobs for the node-local copies
    (cancelling also cancelled the planned ones), submitted without dependencies."""

    eval_id: str
    job_ids: tuple[str, ...]
    cleanups: tuple[JobSpec, ...]

    def render(self) -> str:
        from slurm_acme.slurm.client import sbatch_argv

        lines = [f"scancel {' '.join(self.job_ids)}"] if self.job_ids else []
        for job in self.cleanups:
            lines.append(f"# {job.key}\n{' '.join(sbatch_argv(job.options))}\n{job.script}")
        return "\n".join(lines)


def plan_cancel(cfg: EvaluateConfig, eval_id: str, job_ids: Mapping[str, str], run_dir: str) -> CancelPlan:
    from slurm_acme.evaluate.spec import read_spec

    try:
        spec = read_spec(Path(run_dir))
    except (OSError, ValueError, KeyError):
        cleanups: tuple[JobSpec, ...] = ()
    else:
        plan = build_job_plan(spec, Path(run_dir), submit_settings(cfg), "jobs")
        cleanups = tuple(j for j in plan.jobs if j.key.startswith("cleanup-"))
    return CancelPlan(eval_id, tuple(job_ids.values()), cleanups)


def cancel(plan: CancelPlan, slurm, store) -> int:  # type: ignore[no-untyped-def]
    """Execute a cancel plan; the number of cleanup jobs submitted."""
    from slurm_acme.store import evaluate as store_eval

    if plan.job_ids:
        slurm.scancel(list(plan.job_ids))
    store_eval.set_run_state(store, plan.eval_id, EvalState.CANCELLED.value, finished=True)
    for job in plan.cleanups:
        slurm.sbatch(list(job.options), job.script)
    return len(plan.cleanups)
