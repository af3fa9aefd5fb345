"""``sacme nodes``: each node's health history and Slurm state; reconcile and resume.

A thin layer: the ledger is :mod:`slurm_acme.store.nodes`, the policy
:mod:`slurm_acme.nodes.policy`, draining :mod:`slurm_acme.nodes.reconcile`.
The policy comes only from the trusted system config.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import click

from slurm_acme.cli.context import AppContext, pass_app
from slurm_acme.errors import CheckFailed, InputError

if TYPE_CHECKING:
    from slurm_acme.config import NodesConfig
    from slurm_acme.slurm import ScontrolNode
    from slurm_acme.store.nodes import NodeHistory


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _policy() -> NodesConfig:
    from slurm_acme.config import system_config

    return system_config().nodes


def _slurm_nodes(app: AppContext, names: list[str] | None = None) -> dict[str, ScontrolNode] | None:
    """Slurm's view of the nodes; None (said on stderr) when Slurm does not answer."""
    from slurm_acme.slurm import Slurm, SlurmError

    try:
        found = Slurm(timeout=app.config.slurm.command_timeout_s).show_nodes(names)
    except SlurmError as exc:
        click.echo(f"sacme: warning: no Slurm node states: {exc}", err=True)
        return None
    return {n.name: n for n in found}


def _summary(name: str, history: NodeHistory | None, slurm_node: ScontrolNode | None,
             policy: NodesConfig, now: float) -> dict[str, Any]:
    from slurm_acme.nodes.policy import assess, counting_events, is_decisive

    events = history.events if history else ()
    recent = counting_events(history, policy, now) if history else ()
    last = events[-1] if events else None
    resumes = [a for a in (history.actions if history else ()) if a.action == "resume"]
    verdict = assess(history, policy, now) if history else None
    return {
        "node": name,
        "state": slurm_node.state if slurm_node else None,
        "reason": slurm_node.reason if slurm_node else None,
        "events": len(events),
        "recent_events": len(recent),
        "decisive_recent": any(is_decisive(e, policy) for e in recent),
        "last_event": last.to_dict() if last else None,
        "last_resume": resumes[-1].to_dict() if resumes else None,
        "would_drain": verdict.reason(policy) if verdict else None,
    }


@click.group("nodes", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object: every node's summary.")
@pass_app
@click.pass_context
def nodes(ctx: click.Context, app: AppContext, as_json: bool) -> None:
    """Each node's health history and Slurm state; drain (reconcile) and resume.

    Without a subcommand: every node's ledger summary and current Slurm state.
    Subcommands: show NODE, reconcile [--dry-run], resume NODE.
    """
    if ctx.invoked_subcommand is not None:
        return
    from slurm_acme.store import nodes as ledger

    policy, now = _policy(), time.time()
    cluster = app.config.cluster.name
    histories = ledger.histories(app.store(readonly=True), cluster=cluster)
    states = _slurm_nodes(app)
    names = sorted({*histories, *(states or {})}, key=_natural)
    rows = [_summary(n, histories.get(n), (states or {}).get(n), policy, now) for n in names]
    if as_json:
        click.echo(json.dumps({"cluster": cluster, "window_hours": policy.window_hours,
                               "drain_policy": policy.drain, "nodes": rows}))
        return
    _print_list(rows, policy)


def _natural(name: str) -> tuple[Any, ...]:
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _print_list(rows: list[dict[str, Any]], policy: NodesConfig) -> None:
    from rich.console import Console
    from rich.table import Table

    from slurm_acme.nodes.policy import window_text

    table = Table(title=f"nodes: health ledger (window {window_text(policy.window_hours)}, "
                        f"drain policy {'on' if policy.drain else 'off'})")
    for column in ("node", "Slurm state", "events", f"in {window_text(policy.window_hours)}",
                   "last event", "reason / would drain"):
        table.add_column(column)
    for r in rows:
        last = r["last_event"]
        last_text = (f"{_when(last['ts'])} {last['category']}"
                     f"{' job ' + last['job_id'] if last['job_id'] else ''}") if last else "-"
        table.add_row(r["node"], r["state"] or "?", str(r["events"]),
                      f"{r['recent_events']}{' decisive' if r['decisive_recent'] else ''}",
                      last_text, r["reason"] or r["would_drain"] or "-")
    import sys

    Console(highlight=False, width=None if sys.stdout.isatty() else 100).print(table)


@nodes.command("show")
@click.argument("node")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@pass_app
def show(app: AppContext, node: str, as_json: bool) -> None:
    """One node's whole history: events, drains and resumes, Slurm state."""
    from slurm_acme.store import nodes as ledger

    policy, now = _policy(), time.time()
    cluster = app.config.cluster.name
    history = ledger.histories(app.store(readonly=True), cluster=cluster, nodes=[node]).get(node)
    states = _slurm_nodes(app, [node]) if _looks_like_node(node) else None
    if history is None and node not in (states or {}):
        raise InputError(f"node {node!r}: neither the ledger nor Slurm knows it")
    summary = _summary(node, history, (states or {}).get(node), policy, now)
    events = [e.to_dict() for e in (history.events if history else ())]
    actions = [a.to_dict() for a in (history.actions if history else ())]
    if as_json:
        click.echo(json.dumps({**summary, "history": events, "actions": actions}))
        return
    click.echo(f"{node}: Slurm state {summary['state'] or '?'}"
               f"{' (' + summary['reason'] + ')' if summary['reason'] else ''}; "
               f"{summary['events']} event(s), {summary['recent_events']} in the window")
    if summary["would_drain"] and not summary["reason"]:
        click.echo(f"  the policy would drain it: {summary['would_drain']}")
    for e in history.events if history else ():
        where = f" job {e.job_id}" if e.job_id else ""
        gpu = f" gpu {e.gpu_index}" if e.gpu_index is not None else ""
        code = f" {e.code}" if e.code else ""
        click.echo(f"  {_when(e.ts)}  {e.source:9s} {e.category}{code}{gpu}{where}")
        for line in e.evidence[:2]:
            click.echo(f"      {line}")
    for a in history.actions if history else ():
        click.echo(f"  {_when(a.ts)}  {a.action:9s} by {a.by_user}: {a.reason}")


def _looks_like_node(name: str) -> bool:
    import re

    return re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) is not None


@nodes.command("reconcile")
@click.option("--dry-run", is_flag=True, help="Say what would be drained and why; drain nothing.")
@click.option("--node", "only", multiple=True, metavar="NODE",
              help="Consider only this node (repeatable): what a node's own collector does.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the plan and what was drained.")
@pass_app
def reconcile(app: AppContext, dry_run: bool, only: tuple[str, ...], as_json: bool) -> None:
    """Drain the nodes the policy names (root only; opt-in: nodes.drain in the system config).

    Never more than nodes.max_drained_share of the cluster at once. Exit 1 when
    Slurm refused a drain.
    """
    from slurm_acme.nodes.reconcile import reconcile as run
    from slurm_acme.nodes.reconcile import require_root
    from slurm_acme.slurm import Slurm

    if not dry_run:
        require_root("reconcile")
    for name in only:
        if not _looks_like_node(name):
            raise InputError(f"--node {name!r}: not a node name")
    policy = _policy()
    result = run(app.store(readonly=dry_run), Slurm(timeout=app.config.slurm.command_timeout_s), policy,
                 app.config.cluster.name, dry_run=dry_run, only=list(only) or None)
    for note in result.notes:
        click.echo(f"sacme: {note}", err=True)
    if as_json:
        click.echo(json.dumps({"dry_run": result.dry_run, **result.plan.to_dict(policy),
                               "drained": [v.node for v in result.drained],
                               "refused": [{"node": n, "error": e} for n, e in result.refused]}))
    else:
        _print_plan(result, policy)
    if result.refused:
        raise CheckFailed(f"Slurm refused to drain {', '.join(n for n, _ in result.refused)}: "
                          f"{result.refused[0][1]}")


def _print_plan(result: Any, policy: NodesConfig) -> None:
    p = result.plan
    verb = "would drain" if result.dry_run else "drained"
    done = p.drain if result.dry_run else result.drained
    click.echo(f"{len(p.already)} of {p.total} node(s) drained by slurm-acme; the cap is {p.cap} "
               f"({policy.max_drained_share:g} of the cluster)")
    for v in done:
        click.echo(f"{verb} {v.node}: {v.reason(policy)}")
    for v in p.held:
        click.echo(f"held back by the cap: {v.node}: {v.reason(policy)}")
    for name in p.out_of_service:
        click.echo(f"already out of service: {name}")
    if not done and not p.held:
        click.echo("nothing to drain")


@nodes.command("resume")
@click.argument("node")
@click.option("--reason", "note", default="", help="Why it is back (recorded with who resumed it).")
@pass_app
def resume(app: AppContext, node: str, note: str) -> None:
    """Return NODE to service (root only) and record who did it; its earlier events stop counting."""
    from slurm_acme.nodes.reconcile import require_root
    from slurm_acme.nodes.reconcile import resume as run
    from slurm_acme.slurm import Slurm

    require_root("resume")
    if not _looks_like_node(node):
        raise InputError(f"{node!r}: not a node name")
    action = run(app.store(), Slurm(timeout=app.config.slurm.command_timeout_s), app.config.cluster.name,
                 node, note=note)
    click.echo(f"resumed {node} (by {action.by_user})")
