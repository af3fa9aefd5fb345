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


@db.command("grant")
@click.argument("role")
@click.option("--admin", is_flag=True, help="An admin role: every table, all rows (needs BYPASSRLS).")
@pass_app
def grant(app: AppContext, role: str, admin: bool) -> None:
    """Give a Postgres ROLE the privileges slurm-acme's users (or admins) need.

    Users see only their own rows (row-level security keyed on the role name =
    Slurm user name); re-applied after every schema upgrade.
    """
    from slurm_acme.store.security import grant_role

    store = app.store()
    grant_role(store, role, admin=admin)
    click.echo(f"granted {'admin' if admin else 'user'} privileges to {role} on {store.shown_url}")
