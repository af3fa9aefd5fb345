"""``sacme admin``: install the node files from the package, remove them, check a node."""

from __future__ import annotations

import json
from pathlib import Path

import click

from slurm_acme.cli.context import AppContext, pass_app

_PREFIX = click.option(
    "--prefix", type=click.Path(file_okay=False, path_type=Path), default=Path("/"), show_default=True,
    help="Root of the installed tree: / on a node; a folder to stage, share or test.")


@click.group()
def admin() -> None:
    """Put slurm-acme on a node (hooks, collector, unit, config) and check it."""


@admin.command()
@_PREFIX
@click.option("--dry-run", is_flag=True, help="Print every file and mode it would write; change nothing.")
def install(prefix: Path, dry_run: bool) -> None:
    """Lay out the hooks, the collector wrapper, the systemd unit and acme.toml.

    The hooks and wrapper name this installation's Python; files are root-owned
    (executables 0755); acme.toml is written only when absent; the unit is not
    started. Running it again changes nothing that is already right.
    """
    from slurm_acme.admin.install import apply, plan_install

    plan = plan_install(prefix)
    outcome = apply(plan, dry_run=dry_run)
    for line in outcome.lines:
        click.echo(("would " if dry_run else "") + line)
    click.echo("\nAdd to slurm.conf on every node and the controller (or `Include "
               f"{plan.layout.snippet}`), then `scontrol reconfigure`:")
    for line in plan.layout.slurm_conf_lines():
        click.echo(f"  {line}")
    click.echo(f"Collector from boot (optional; the hooks start it too): systemctl daemon-reload && "
               f"systemctl enable --now {plan.layout.unit.name}")
    click.echo(f"Drain policy (on one host only, once the system config sets [nodes] drain = true): "
               f"systemctl enable --now {plan.layout.reconcile_timer.name}")


@admin.command()
@_PREFIX
@click.option("--dry-run", is_flag=True, help="Print what it would remove; change nothing.")
def uninstall(prefix: Path, dry_run: bool) -> None:
    """Remove exactly what install wrote (a file edited since is kept and named)."""
    from slurm_acme.admin.install import uninstall as do_uninstall

    for line in do_uninstall(prefix, dry_run=dry_run).lines:
        click.echo(("would " if dry_run else "") + line)


@admin.command()
@click.option("--node", help="This node's Slurm name (default: $SLURMD_NODENAME, else the short hostname).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_app
def check(app: AppContext, node: str | None, as_json: bool) -> None:
    """Check this node: hooks, PrologFlags, collector and spool, samplers, store, clock.

    Exit 1 when anything failed; each failure says how to fix it.
    """
    from slurm_acme.admin.check import run_checks
    from slurm_acme.errors import CheckFailed

    results = run_checks(app, node=node)
    if as_json:
        click.echo(json.dumps({"ok": all(r.ok for r in results), "checks": [r.as_dict() for r in results]}))
    else:
        _table(results)
    failed = [r for r in results if not r.ok]
    if failed:
        raise CheckFailed(f"{len(failed)} of {len(results)} checks failed: "
                          + ", ".join(r.name for r in failed))


def _table(results) -> None:  # type: ignore[no-untyped-def]
    import sys

    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(r.name, r.status.upper(), r.detail, r.fix or "")
    Console(width=None if sys.stdout.isatty() else 160).print(table)
