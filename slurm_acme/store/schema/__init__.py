"""The whole schema, one SQLAlchemy ``MetaData`` built from one module per domain.

Times are stored as UTC epoch seconds (floats), not DATETIME: SQLite has no
native timestamp type, and reports aggregate over millions of rows with plain
arithmetic (``end_ts - start_ts``) that is fast and identical on SQLite and
Postgres.
"""

from __future__ import annotations

from slurm_acme.store.schema import ckpt, core, evaluate, failures, nodes, report, telemetry  # noqa: F401  (registers tables)
from slurm_acme.store.schema.base import metadata

__all__ = ["metadata"]
