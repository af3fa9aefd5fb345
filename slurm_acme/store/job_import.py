"""Bulk writes of job rows: the fast path behind ``sacme import-trace``.

One transaction per import, so a failed or ``--strict``-aborted import leaves
nothing behind. SQLite gets one prepared upsert run with ``executemany``;
Postgres gets ``COPY`` into a temporary table and one ``INSERT ... SELECT ...
ON CONFLICT`` at the end, the way a site-scale store wants it.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from slurm_acme.store.engine import Store
from slurm_acme.store.schema.core import jobs

_KEY = ("cluster", "job_id")
#: Page cache for one import connection, in KiB (SQLite's default is 2 MiB).
SQLITE_IMPORT_CACHE_KIB = 512 * 1024


class TraceWriter:
    """Upserts rows of ``fields`` (plus cluster and source) into ``jobs``."""

    def __init__(self, store: Store, *, cluster: str, source: str, fields: Sequence[str]):
        unknown = [f for f in fields if f not in jobs.c]
        if unknown:
            raise ValueError(f"not jobs columns: {unknown}")
        self.store = store
        self.cluster = cluster
        self.source = source
        self.fields = tuple(fields)
        self.columns = ("cluster", "source", *self.fields)
        self._conn = None
        self._cursor = None

    # -- context management -------------------------------------------------
    def __enter__(self) -> "TraceWriter":
        self._conn = self.store.engine.raw_connection()
        self._cursor = self._conn.cursor()
        if self.store.dialect == "sqlite":
            # A big page cache keeps hot b-tree pages from spilling to the WAL
            # again and again inside the one long transaction.
            self._cursor.execute(f"PRAGMA cache_size=-{SQLITE_IMPORT_CACHE_KIB}")
        if self.store.dialect == "postgresql":
            cols = ", ".join(f'"{c}"' for c in self.columns)
            self._cursor.execute(
                f"CREATE TEMP TABLE acme_import ON COMMIT DROP AS SELECT {cols} FROM jobs WITH NO DATA"
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._conn is not None and self._cursor is not None
        try:
            if exc_type is None:
                if self.store.dialect == "postgresql":
                    self._cursor.execute(self._merge_sql())
                self._conn.commit()
            else:
                self._conn.rollback()
        finally:
            self._cursor.close()
            self._conn.close()

    # -- writing ------------------------------------------------------------
    def write(self, rows: Sequence[tuple]) -> None:
        """Queue ``rows`` (tuples in ``fields`` order) into the transaction."""
        if not rows:
            return
        prefix = (self.cluster, self.source)
        if self.store.dialect == "postgresql":
            cols = ", ".join(f'"{c}"' for c in self.columns)
            with self._cursor.copy(f"COPY acme_import ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(prefix + row)
        else:
            self._cursor.executemany(self._sqlite_sql(), [prefix + row for row in rows])

    def _assignments(self) -> str:
        return ", ".join(f'"{c}" = excluded."{c}"' for c in self.columns if c not in _KEY)

    def _sqlite_sql(self) -> str:
        cols = ", ".join(f'"{c}"' for c in self.columns)
        marks = ", ".join("?" for _ in self.columns)
        return (
            f"INSERT INTO jobs ({cols}) VALUES ({marks}) "
            f"ON CONFLICT (cluster, job_id) DO UPDATE SET {self._assignments()}"
        )

    def _merge_sql(self) -> str:
        cols = ", ".join(f'"{c}"' for c in self.columns)
        # DISTINCT ON keeps the last copy of a job id repeated within one file.
        return (
            f"INSERT INTO jobs ({cols}) SELECT DISTINCT ON (cluster, job_id) {cols} FROM acme_import "
            "ORDER BY cluster, job_id, ctid DESC "
            f"ON CONFLICT (cluster, job_id) DO UPDATE SET {self._assignments()}"
        )
