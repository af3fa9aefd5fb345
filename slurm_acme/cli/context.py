"""What every command shares: the config and the store, opened on first use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # imported on first use: pydantic and SQLAlchemy cost ~1 CPU-s that --help never needs
    from slurm_acme.config import AcmeConfig
    from slurm_acme.store import Store


@dataclass
class AppContext:
    """Carries ``--config`` and ``--db`` down to subcommands, lazily.

    Nothing is read or connected until a command asks, so ``--help`` and
    ``--dry-run`` paths never touch a database or a config file they don't need.
    """

    config_path: str | None = None
    db_url: str | None = None
    _config: AcmeConfig | None = field(default=None, repr=False)
    _store: Store | None = field(default=None, repr=False)

    @property
    def config(self) -> AcmeConfig:
        if self._config is None:
            from slurm_acme.access import warn_ignored_grants
            from slurm_acme.config import load_config

            self._config = load_config(self.config_path)
            warn_ignored_grants(self._config)
        return self._config

    @property
    def store_url(self) -> str:
        from slurm_acme.store import resolve_url

        return resolve_url(self.db_url, self.config.store.url)

    def store(self, *, readonly: bool = False) -> Store:
        """The store; ``readonly`` for commands that only read: they never create one
        (a mistyped ``--db`` is an error, not a new empty store) and can read a
        store they may not write."""
        if self._store is None:
            from slurm_acme.store import open_store

            self._store = open_store(self.store_url, readonly=readonly,
                                     group=self.config.files.group or None)
        return self._store


pass_app = click.make_pass_decorator(AppContext, ensure=True)


def common_options(func):  # type: ignore[no-untyped-def]
    """``--config`` and ``--db`` on a group, stored in an :class:`AppContext`."""
    func = click.option(
        "--db", "db_url", envvar="ACME_DB", default=None,
        help="Store URL (sqlite:///path or postgresql://...). Env: ACME_DB.",
    )(func)
    func = click.option(
        "--config", "config_path", envvar="ACME_CONF", default=None, type=click.Path(),
        help="acme.toml to use. Env: ACME_CONF. Default: /etc/acme/acme.toml, else built-ins.",
    )(func)
    return func
