"""``sacme submit``, ``supervise``, ``status`` and ``logs``: fault-tolerant pretraining."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurm_acme.cli.context import AppContext, pass_app
from slurm_acme.errors import InputError

if TYPE_CHECKING:
    from slurm_acme.ft.status import AttemptView


def _err(msg: str) -> None:
    click.echo(msg, err=True)


@click.command()
@click.argument("train_yaml", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Print the sbatch argv and script; touch no Slurm.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a train.yaml field (dotted keys: fault_tolerance.max_restarts=5).")
@click.option("--json", "as_json", is_flag=True, help="Print {run_id, job_id} as JSON.")
@pass_app
def submit(app: AppContext, train_yaml: str, dry_run: bool, overrides: tuple[str, ...],
           as_json: bool) -> None:
    """Submit TRAIN_YAML as a self-healing pretraining job."""
    from slurm_acme.ft.plan import build_plan
    from slurm_acme.ft.spec import load_spec

    spec = load_spec(train_yaml, list(overrides))
    plan = build_plan(spec, spec_path=train_yaml, db_url=app.store_url,
                      config_path=app.config.source)
    if dry_run:
        click.echo(plan.render())
        return
    from slurm_acme.ft.submitter import submit_plan
    from slurm_acme.slurm import Slurm

    job_id = submit_plan(plan, slurm=Slurm(timeout=app.config.slurm.command_timeout_s),
                         store=app.store(), cluster=app.config.cluster.name,
                         group=app.config.files.group or None)
    if as_json:
        click.echo(json.dumps({"run_id": plan.run_id, "job_id": job_id}))
    else:
        click.echo(f"run {plan.run_id} submitted as job {job_id}")
        _err(f"logs: {plan.run_dir}  status: sacme status {plan.run_id}")


@click.command()
@click.argument("run_id")
@pass_app
def supervise(app: AppContext, run_id: str) -> None:
    """Supervise one attempt of RUN_ID (the batch script execs this; not for people)."""
    import os

    from slurm_acme.contracts import ENV_RUN_DIR, run_dir_for
    from slurm_acme.ft.spec import TrainSpec
    from slurm_acme.ft.supervisor import JobContext, Supervisor
    from slurm_acme.slurm import Slurm
    from slurm_acme.store import runs as run_store

    store = app.store()
    run = run_store.get_run(store, run_id)
    if run is None:
        raise InputError(f"run {run_id!r} is not in the store {app.store_url}")
    workdir = run.workdir or os.getcwd()
    run_dir = os.environ.get(ENV_RUN_DIR) or run_dir_for(workdir, run_id)
    ctx = JobContext.from_env(run_id, os.environ, run_dir, workdir)
    if not ctx.cluster:
        ctx = JobContext(**{**ctx.__dict__, "cluster": run.cluster})

    def log(msg: str) -> None:
        stamp = dt.datetime.now().strftime("%H:%M:%S")
        print(f"[acme {stamp}] {msg}", file=sys.stderr, flush=True)

    supervisor = Supervisor(store=store, slurm=Slurm(timeout=app.config.slurm.command_timeout_s),
                            spec=TrainSpec.from_json(run.spec), ctx=ctx, log=log,
                            after_term=Slurm(timeout=3.0))
    sys.exit(supervisor.run())


def _resolve(app: AppContext, ref: str | None):  # type: ignore[no-untyped-def]
    """The run REF names (or the viewer's newest), refused when it is someone else's
    and the viewer is no admin. Opens the store read-only: these commands only read."""
    from slurm_acme.access import check_owner, current_viewer, is_admin
    from slurm_acme.store import runs as run_store

    store = app.store(readonly=True)
    viewer = current_viewer()
    own = None if is_admin(viewer) else viewer.name
    if ref is None:
        latest = run_store.latest_runs(store, limit=1, user=own)
        if not latest:
            raise InputError(f"no runs in the store {app.store_url}")
        return store, latest[0]
    run = run_store.find_run(store, ref, user=own)
    if run is None:
        raise InputError(f"no run or job {ref!r} in the store {app.store_url}")
    check_owner(viewer, run.user, f"run {run.run_id}")
    return store, run


def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%H:%M:%S") if ts else "-"


@click.command()
@click.argument("ref", required=False, metavar="[RUN|JOB]")
@click.option("--json", "as_json", is_flag=True, help="Print the run as one JSON object.")
@pass_app
def status(app: AppContext, ref: str | None, as_json: bool) -> None:
    """Show a run's attempts: nodes, endings, diagnoses, exclusions, checkpoints, goodput."""
    from slurm_acme.ft.status import run_view
    from slurm_acme.slurm import Slurm

    store, run = _resolve(app, ref)
    view = run_view(store, run, Slurm(timeout=app.config.slurm.command_timeout_s))
    if as_json:
        click.echo(view.to_json())
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    console.print(f"run [bold]{view.run_id}[/] ({view.name})  state [bold]{view.state}[/]  "
                  f"job {view.job_id}  last step {view.last_step}")
    if view.reason:
        console.print(f"reason: {view.reason}")
    table = Table("#", "job", "nodes", "start", "end", "outcome", "diagnosis", "excluded",
                  "resumed", "skip", "lost s")
    for a in view.attempts:
        diag = "-"
        if a.diagnosis:
            diag = f"{a.diagnosis['category']}/{a.diagnosis['origin']}"
            if a.diagnosis.get("node"):
                diag += f" @{a.diagnosis['node']}"
        table.add_row(str(a.attempt), a.job_id, a.nodes, _when(a.start_ts), _when(a.end_ts),
                      _outcome(a), diag, ",".join(a.excluded) or "-",
                      "-" if a.resumed_from_step is None else f"step {a.resumed_from_step}",
                      a.skip_steps or "-",
                      "-" if a.time_lost_s is None else f"{a.time_lost_s:.1f}")
    console.print(table)
    for a in view.attempts:
        if a.reason:
            console.print(f"  attempt {a.attempt}: {a.reason}")
    goodput = "-" if view.goodput is None else f"{view.goodput:.2f}"
    latest = view.latest_checkpoint
    newest = f"  newest {latest['path']} ({latest['kind']})" if latest else ""
    console.print(f"excluded nodes: {','.join(view.excluded_nodes) or '-'}  checkpoints: "
                  f"{view.checkpoints or '-'}{newest}")
    spares = view.allocated_nodes - view.training_nodes
    held = (f"  ({view.allocated_nodes} nodes allocated: {view.training_nodes} training, "
            f"{spares} spare)" if spares > 0 else "")
    console.print(f"wall {view.wall_s:.1f}s  useful {view.useful_s:.1f}s  lost "
                  f"{view.time_lost_s:.1f}s  goodput {goodput}{held}")


def _outcome(a: AttemptView) -> str:
    """An attempt's outcome; a restart inside the allocation names each spare it took."""
    if a.replaced is None:
        return str(a.outcome or "running")
    swaps = ", ".join(f"{old}->{new}" for old, new in a.replaced.items())
    return f"{a.outcome} in place ({swaps or 'same nodes'})"


@click.command()
@click.argument("ref", metavar="RUN")
@click.option("--raw", is_flag=True, help="The full labelled output instead of the compressed log.")
@pass_app
def logs(app: AppContext, ref: str, raw: bool) -> None:
    """Print RUN's compressed logs, attempt by attempt."""
    from slurm_acme.contracts import AttemptFile, attempt_file, run_dir_for
    from slurm_acme.store import runs as run_store

    store, run = _resolve(app, ref)
    run_dir = Path(run_dir_for(run.workdir or ".", run.run_id))
    for a in run_store.list_attempts(store, run.run_id):
        kind = AttemptFile.LOG if raw else AttemptFile.COMPRESSED_LOG
        path = attempt_file(run_dir, a.attempt, a.job_id, kind)
        click.echo(f"== attempt {a.attempt} (job {a.job_id}, {a.outcome or 'running'})")
        try:
            click.echo(path.read_text(encoding="utf-8", errors="replace").rstrip("\n"))
        except FileNotFoundError:
            click.echo(f"(no log at {path})")
        except OSError as exc:  # an admin-group member reading another user's private run folder
            click.echo(f"(cannot read {path}: {exc.strerror})")
