"""The whole schema, one SQLAlchemy ``MetaData`` built from one module per domain.

Times are stored as UTC epoch seconds (floats), not DATETIME: SQLite has no
native timestamp type, and reports aggregate over millions of rows with plain
arithmetic (``end_ts - start_ts``) that is fast and identical on SQLite and
Postgres.

``metadata`` (every table) is assembled on first access: a query module
imports only its domain's tables (``schema.failures``, ``schema.core``), so a
command that writes one row, such as ``sacme diagnose``, does not build the
telemetry and report tables it never touches. Whatever needs the whole schema
(migrations, row security, tests) imports ``metadata`` from here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import MetaData

#: The domain modules; each adds its tables to ``base.metadata`` when imported.
DOMAINS = ("ckpt", "core", "evaluate", "failures", "nodes", "report", "telemetry")

__all__ = ["DOMAINS", "metadata"]


def __getattr__(name: str) -> MetaData:
    if name != "metadata":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for domain in DOMAINS:
        importlib.import_module(f"{__name__}.{domain}")
    from slurm_acme.store.schema.base import metadata

    return metadata
