"""``sacme db``: look at and upgrade the store's schema (SQL stays in the store)."""

from __future__ import annotations

import json

import click

from slurm_acme.cli.context import AppContext, pass_app


@click.group()
def db() -> None:
    """Store administration."""


@db.command("upgrade")
@pass_app
def upgrade(app: AppContext) -> None:
    """Create or migrate the schema (opening the store does this too)."""
    from slurm_acme.store.migrate import upgrade as do_upgrade

    store = app.store()
    version = do_upgrade(store)
    click.echo(f"schema version {version} at {store.shown_url}")


@db.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_app
def info(app: AppContext, as_json: bool) -> None:
    """Show the store URL, dialect and schema version (creates nothing)."""
    from slurm_acme.store.migrate import schema_version

    store = app.store(readonly=True)
    data = {"url": store.shown_url, "dialect": store.dialect, "schema_version": schema_version(store)}
    click.echo(json.dumps(data) if as_json else "\n".join(f"{k}: {v}" for k, v in data.items()))
