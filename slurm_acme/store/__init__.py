"""The one door to SQL. Nothing outside this package builds SQL or knows tables
beyond the names exported by :mod:`slurm_acme.store.schema`."""

from __future__ import annotations

from slurm_acme.store.engine import Store, open_store, resolve_url

__all__ = ["Store", "open_store", "resolve_url"]
