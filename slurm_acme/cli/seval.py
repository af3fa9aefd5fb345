"""``seval``: evaluate a checkpoint with the trial coordinator.

``seval CKPT --datasets all [--dry-run]`` plans and submits; ``seval status``,
``seval results CKPT``, ``seval cancel EVAL_ID`` and ``seval simulate`` are
subcommands. A first word that is not a subcommand is the checkpoint of the
default ``run`` command.
"""

from __future__ import annotations

import json
import shlex
import sys

import click

from slurm_acme.cli.context import AppContext, common_options, pass_app
from slurm_acme.errors import InputError


class SevalGroup(click.Group):
    """A group whose unknown first word is the CKPT argument of ``run``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        position = _first_word(args)
        if position is not None and args[position] not in self.commands:
            args = [*args[:position], "run", *args[position:]]
        return super().parse_args(ctx, args)


_GROUP_OPTIONS_WITH_VALUE = ("--db", "--config")


def _first_word(args: list[str]) -> int | None:
    """Index of the first argument that is neither a group option nor its value."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _GROUP_OPTIONS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            if arg in ("-h", "--help"):
                return None
            i += 1
            continue
        return i
    return None


@click.group(cls=SevalGroup, context_settings={"help_option_names": ["-h", "--help"]})
@common_options
@click.pass_context
def seval(ctx: click.Context, config_path: str | None, db_url: str | None) -> None:
    """Evaluate checkpoints fast: node-local preload, CPU scoring jobs, prior-based packing.

    \b
    seval CKPT --datasets all [--nodes N] [--dry-run]   plan (and submit) an evaluation
    seval status [EVAL_ID] | results CKPT | cancel EVAL_ID | simulate
    """
    ctx.obj = AppContext(config_path=config_path, db_url=db_url)


def _err(msg: str) -> None:
    click.echo(msg, err=True)


def _tool_options(func):  # type: ignore[no-untyped-def]
    """Pass-through options of the external backends (``[evaluate.lm_eval]`` / ``[evaluate.opencompass]``)."""
    for decorator in reversed((
        click.option("--tool-exe", default=None,
                     help="Absolute path of lm_eval / opencompass (default: beside this Python)."),
        click.option("--task-path", "task_paths", multiple=True,
                     help="lm-eval --include_path / OpenCompass --config-dir with your own tasks."),
        click.option("--model-args", "model_args", multiple=True,
                     help="KEY=VALUE for the model (lm-eval --model_args, OpenCompass --model-kwargs)."),
        click.option("--num-fewshot", type=int, default=None, help="lm-eval --num_fewshot."),
        click.option("--limit", type=float, default=None, help="lm-eval --limit (count, or fraction < 1)."),
        click.option("--batch-size", default=None, help="The tool's batch size."),
    )):
        func = decorator(func)
    return func


@seval.command("run")
@click.argument("checkpoint")
@click.option("--datasets", "datasets_spec", default="all", show_default=True,
              help="Datasets and groups, comma separated (all, code, knowledge, tiny, mmlu, ...).")
@click.option("--nodes", "node_count", type=int, default=1, show_default=True, help="Nodes to use.")
@click.option("--nodelist", default="", help="Comma-separated node names (default: idle GPU nodes).")
@click.option("--gpus-per-node", type=int, default=None, help="GPU slots per node (default: config).")
@click.option("--backend", type=click.Choice(["builtin", "opencompass", "lm-eval"]), default=None)
@click.option("--mode", type=click.Choice(["auto", "jobs", "allocation"]), default=None,
              help="allocation: one allocation per node with srun steps (job_container/tmpfs sites).")
@click.option("--model-size-b", type=float, default=None, help="Model size in billions (default: from files).")
@click.option("--seed", type=int, default=0, show_default=True)
@_tool_options
@click.option("--dry-run", is_flag=True, help="Print the plan, the sbatch calls and the tool commands; submit nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_app
def run(app: AppContext, checkpoint: str, datasets_spec: str, node_count: int, nodelist: str,
        gpus_per_node: int | None, backend: str | None, mode: str | None, model_size_b: float | None,
        seed: int, tool_exe: str | None, task_paths: tuple[str, ...], model_args: tuple[str, ...],
        num_fewshot: int | None, limit: float | None, batch_size: str | None, dry_run: bool,
        as_json: bool) -> None:
    """Plan and submit the evaluation of CHECKPOINT."""
    from slurm_acme.evaluate import service

    cfg = app.config.evaluate
    tool = {"executable": tool_exe, "task_paths": list(task_paths) or None,
            "model_args": list(model_args) or None, "num_fewshot": num_fewshot, "limit": limit,
            "batch_size": batch_size}
    request = service.RunRequest(
        checkpoint=checkpoint, datasets=datasets_spec, node_count=node_count,
        nodelist=tuple(n for n in nodelist.split(",") if n), gpus_per_node=gpus_per_node, backend=backend,
        mode=mode, model_size_b=model_size_b, seed=seed, tool=tool)
    if (backend or cfg.backend) != "builtin":
        _err(f"seval: checking the datasets against {backend or cfg.backend}'s own task list ...")
    if dry_run:
        prepared = service.plan_run(cfg, request, db_url=app.store_url)
        _print_dry_run(prepared, as_json)
        return
    from slurm_acme.evaluate.priors import measured_priors
    from slurm_acme.slurm.client import default_client

    slurm = default_client(app.config.slurm.command_timeout_s)
    store = app.store()
    prepared = service.plan_run(cfg, request, db_url=app.store_url, slurm=slurm,
                                measured=lambda size: measured_priors(store, size))
    if prepared.spec.backend == "builtin" and any(ds.kind == "code" for ds in prepared.spec.datasets.values()):
        from slurm_acme.evaluate.sandbox import require_sandbox

        require_sandbox()  # refuse now, not in the scoring job, where OS isolation is missing
    ids = service.submit(prepared, slurm, store, app.config.cluster.name)
    if as_json:
        click.echo(json.dumps({"eval_id": prepared.spec.eval_id, "mode": prepared.jobs.mode, "job_ids": ids}))
    else:
        _err(f"seval: submitted {len(ids)} job(s) in {prepared.jobs.mode} mode; predicted makespan "
             f"{prepared.plan.predicted_makespan_s:.1f}s (baseline {prepared.plan.baseline_makespan_s:.1f}s)")
        click.echo(prepared.spec.eval_id)


def _print_dry_run(prepared, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    from slurm_acme.evaluate import service

    commands = service.tool_commands(prepared)
    if as_json:
        click.echo(json.dumps({
            "eval_id": prepared.spec.eval_id, "mode": prepared.jobs.mode, "nodes": list(prepared.spec.nodes),
            "backend": prepared.spec.backend, "priors": prepared.prior_sources,
            "plan": service.plan_summary(prepared.plan),
            "jobs": [{"key": j.key, "options": list(j.options), "script": j.script,
                      "after": [list(a) for a in j.after]} for j in prepared.jobs.jobs],
            "tool_commands": [{"trial": t, "step": step, "argv": argv} for t, step, argv in commands]}))
        return
    _print_plan(prepared, list(prepared.spec.nodes))
    click.echo(prepared.jobs.render())
    if commands:
        click.echo(f"# {prepared.spec.backend} commands (device from the allocation: shown for one GPU; "
                   "without one, lm-eval gets --device cpu and OpenCompass --hf-num-gpus 0)")
        for trial_id, step, argv in commands:
            click.echo(f"# {trial_id} {step}\n{shlex.join(argv)}")


def _print_plan(prepared, nodes: list[str]) -> None:  # type: ignore[no-untyped-def]
    plan = prepared.plan
    out = sys.stdout
    click.echo(f"eval {prepared.spec.eval_id}: {len(prepared.datasets)} dataset(s), {len(plan.trials)} trial(s), "
               f"{plan.resources.gpu_slots} GPU slot(s) on {len(nodes)} node(s), packing={plan.method}", file=out)
    for (node, gpu), trials in sorted(plan.slot_trials().items()):
        names = "; ".join(f"{t.trial_id}[" + ", ".join(s.key for s in t.shards) + "]" for t in trials)
        click.echo(f"  {nodes[node]}/gpu{gpu}: {names}", file=out)
    click.echo(f"predicted makespan: {plan.predicted_makespan_s:.1f}s", file=out)
    click.echo(f"lower bound:        {plan.lower_bound_s:.1f}s  "
               "(max(total/slots, largest shard) + preload + one start)", file=out)
    click.echo(f"gap:                {plan.gap * 100:.1f}%", file=out)
    click.echo(f"baseline makespan:  {plan.baseline_makespan_s:.1f}s  "
               "(one job per dataset, remote load, in-job scoring)", file=out)


@seval.command("status")
@click.argument("eval_id", required=False)
@click.option("--json", "as_json", is_flag=True)
@pass_app
def status(app: AppContext, eval_id: str | None, as_json: bool) -> None:
    """Recent evaluations, or one evaluation's jobs with their Slurm states and failed jobs' logs."""
    from slurm_acme.access import check_owner, current_viewer, is_admin
    from slurm_acme.store import evaluate as store_eval

    store = app.store(readonly=True)
    viewer = current_viewer()
    if eval_id is None:
        runs = store_eval.list_runs(store, user=None if is_admin(viewer) else viewer.name)
        if as_json:
            click.echo(json.dumps([{"eval_id": r.eval_id, "checkpoint": r.checkpoint, "state": r.state,
                                    "created_ts": r.created_ts} for r in runs]))
        for r in runs if not as_json else ():
            click.echo(f"{r.eval_id}\t{r.state}\t{r.checkpoint}")
        return
    run_ = store_eval.get_run(store, eval_id)
    if run_ is None:
        raise InputError(f"no evaluation {eval_id!r} in the store")
    check_owner(viewer, run_.user, f"evaluation {eval_id}")
    from slurm_acme.evaluate.status import eval_status
    from slurm_acme.slurm.client import default_client

    found = eval_status(run_, default_client(app.config.slurm.command_timeout_s))
    if as_json:
        click.echo(json.dumps(found.as_dict()))
        return
    p = found.progress
    _err(f"seval: {p['inferred']}/{p['trials']} trial(s) inferred, {p['scored']}/{p['trials']} scored, "
         f"{p['failed']} failed")
    click.echo(f"{eval_id}: {found.state}")
    for key, info in found.jobs.items():
        click.echo(f"  {key}\t{info['job_id']}\t{info['state']}")
    for f in found.failures:
        task = f"_{f.task}" if f.task is not None else ""
        click.echo(f"failed: {f.job} job {f.job_id}{task} {f.state}: log {f.log}"
                   + (f"; tool log {f.tool_log}" if f.tool_log else "") + (f" ({f.message})" if f.message else ""))


@seval.command("results")
@click.argument("checkpoint")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def results(app: AppContext, checkpoint: str, as_json: bool) -> None:
    """The results of the latest evaluation of CHECKPOINT (a path or an eval id)."""
    from pathlib import Path

    from slurm_acme.access import check_owner, current_viewer, is_admin
    from slurm_acme.store import evaluate as store_eval

    store = app.store(readonly=True)
    viewer = current_viewer()
    run_ = store_eval.get_run(store, checkpoint) or store_eval.latest_run_for(
        store, str(Path(checkpoint).expanduser().resolve()), user=None if is_admin(viewer) else viewer.name)
    if run_ is None:
        raise InputError(f"no evaluation of {checkpoint!r} in the store")
    check_owner(viewer, run_.user, f"evaluation {run_.eval_id}")
    rows = store_eval.results(store, run_.eval_id)
    if as_json:
        click.echo(json.dumps({"eval_id": run_.eval_id, "state": run_.state, "checkpoint": run_.checkpoint,
                               "results": [r.__dict__ for r in rows]}))
        return
    click.echo(f"{run_.eval_id} ({run_.state})")
    for r in rows:
        click.echo(f"  {r.dataset:<24} {r.metric:<8} {r.score:8.4f}  n={r.examples}  "
                   f"gpu={r.gpu_s:.2f}s cpu={r.cpu_s:.2f}s")


@seval.command("cancel")
@click.argument("eval_id")
@click.option("--dry-run", is_flag=True, help="Print the scancel and the cleanup sbatch calls; do nothing.")
@pass_app
def cancel(app: AppContext, eval_id: str, dry_run: bool) -> None:
    """Cancel every job of an evaluation, then remove its node-local copies."""
    from slurm_acme.access import check_owner, current_viewer
    from slurm_acme.evaluate import service
    from slurm_acme.store import evaluate as store_eval

    store = app.store(readonly=True)  # writable when this user may write it; never created
    run_ = store_eval.get_run(store, eval_id)
    if run_ is None:
        raise InputError(f"no evaluation {eval_id!r} in the store")
    check_owner(current_viewer(), run_.user, f"evaluation {eval_id}")
    plan = service.plan_cancel(app.config.evaluate, eval_id, run_.job_ids, run_.run_dir)
    if dry_run:
        click.echo(plan.render())
        return
    from slurm_acme.slurm.client import default_client

    cleaned = service.cancel(plan, default_client(app.config.slurm.command_timeout_s), store)
    _err(f"seval: cancelled {len(run_.job_ids)} job(s) of {eval_id}; "
         f"{cleaned} cleanup job(s) remove the node-local copies")


@seval.command("simulate")
@click.option("--nodes", "node_list", default="1,4", show_default=True, help="Cluster sizes to simulate.")
@click.option("--seed", type=int, default=0)
def simulate(node_list: str, seed: int) -> None:
    """Discrete-event simulation: baseline vs trial coordinator (prints JSON)."""
    from slurm_acme.evaluate.priors import DEFAULT_HEURISTIC
    from slurm_acme.evaluate.registry import load_registry
    from slurm_acme.evaluate.simulate import paper_scenario

    try:
        sizes = tuple(int(n) for n in node_list.split(",") if n)
    except ValueError:
        raise InputError(f"--nodes: expected comma-separated integers (got {node_list!r})") from None
    if not sizes or min(sizes) < 1:
        raise InputError(f"--nodes: expected positive integers (got {node_list!r})")
    datasets = load_registry(include_tiny=False).select("all")
    click.echo(json.dumps(paper_scenario(datasets, DEFAULT_HEURISTIC, nodes=sizes, seed=seed)))
