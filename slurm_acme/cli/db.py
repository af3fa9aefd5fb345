"""``sacme db``: look at and upgrade the store's schema."""

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

    version = do_upgrade(app.store())
    click.echo(f"schema version {version} at {app.store().engine.url.render_as_string(hide_password=True)}")


@db.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_app
def info(app: AppContext, as_json: bool) -> None:
    """Show the store URL, dialect and schema version."""
    from slurm_acme.store.migrate import current_version

    store = app.store()
    with store.engine.connect() as conn:
        version = current_version(conn)
    data = {
        "url": store.engine.url.render_as_string(hide_password=True),
        "dialect": store.dialect,
        "schema_version": version,
    }
    click.echo(json.dumps(data) if as_json else "\n".join(f"{k}: {v}" for k, v in data.items()))
