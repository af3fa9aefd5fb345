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


# -- SQLite: stage raw text, check and convert in SQL ----------------------------

_TIME_SHAPE = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9][ T][0-9][0-9]:[0-9][0-9]:[0-9][0-9]*"


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _bad_predicate(kind: str, col: str, choices: Sequence[str]) -> str | None:
    """SQL that is true when ``col`` breaks the rules of its kind (see ingest.trace.Column)."""
    if kind == "key":
        return f"{col} = ''"
    if kind == "int":
        return f"({col} != '' AND {col} GLOB '*[^0-9]*')"
    if kind == "num":
        return f"({col} != '' AND ({col} GLOB '*[^0-9.]*' OR {col} GLOB '*.*.*' OR {col} = '.'))"
    if kind == "time":
        return (
            f"({col} != '' AND ({col} NOT GLOB '{_TIME_SHAPE}' OR julianday({col}) IS NULL"
            f" OR date(substr({col}, 1, 10), '+0 days') IS NOT substr({col}, 1, 10)"
            f" OR substr({col}, 12, 2) > '23' OR substr({col}, 15, 2) > '59' OR substr({col}, 18, 2) > '59'"
            f" OR rtrim(substr({col}, 20), '0123456789.+-:Z') != ''))"
        )
    if kind == "enum":
        return f"{col} NOT IN ({', '.join(_sql_literal(c) for c in choices)})"
    return None


def _conversion(kind: str, col: str) -> str:
    if kind == "int":
        return f"CASE WHEN {col} = '' THEN 0 ELSE CAST({col} AS INTEGER) END"
    if kind == "num":
        return f"CASE WHEN {col} = '' THEN NULL ELSE CAST({col} AS REAL) END"
    if kind == "time":
        # julianday() honours the +HH:MM offset; rounding hides float noise.
        return f"CASE WHEN {col} = '' THEN NULL ELSE round((julianday({col}) - 2440587.5) * 86400.0, 3) END"
    return col


class StagedJobImport:
    """Bulk import into ``jobs`` on SQLite, at the speed of the sqlite3 shell.

    Records are appended as raw text to a temporary table with one
    ``executemany`` per batch; ``find_bad`` checks every rule in one scan and
    ``merge`` converts and upserts the good rows with one ``INSERT ... SELECT``,
    all inside one transaction (rolled back if the caller raises).
    ``columns`` gives, per CSV position, an object with ``target``, ``kind``
    and ``choices`` (``slurm_acme.ingest.trace.Column``), or None to ignore.
    """

    def __init__(self, store: Store, *, cluster: str, source: str, columns: Sequence) -> None:
        if store.dialect != "sqlite":
            raise ValueError("StagedJobImport is the SQLite path; use TraceWriter")
        self.store = store
        self.cluster = cluster
        self.source = source
        self.columns = list(columns)
        self._width = len(self.columns)
        self._conn = None
        self._cursor = None
        checks = [
            (i, _bad_predicate(c.kind, f"c{i}", c.choices))
            for i, c in enumerate(self.columns) if c is not None
        ]
        self._checks = [(i, p) for i, p in checks if p]

    def __enter__(self) -> "StagedJobImport":
        self._conn = self.store.engine.raw_connection()
        self._cursor = self._conn.cursor()
        self._cursor.execute(f"PRAGMA cache_size=-{SQLITE_IMPORT_CACHE_KIB}")
        self._cursor.execute("DROP TABLE IF EXISTS temp.acme_stage")
        cols = ", ".join(f"c{i} TEXT" for i in range(self._width))
        self._cursor.execute(f"CREATE TEMP TABLE acme_stage ({cols})")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:  # type: ignore[no-untyped-def]
        assert self._conn is not None and self._cursor is not None
        try:
            if exc_type is None:
                self._conn.commit()
            else:
                self._conn.rollback()
            self._cursor.execute("DROP TABLE IF EXISTS temp.acme_stage")
        finally:
            self._cursor.close()
            self._conn.close()

    def add(self, records: Sequence[Sequence[str]]) -> None:
        """Stage raw records (each exactly as wide as the header)."""
        if records:
            marks = ", ".join("?" for _ in range(self._width))
            self._cursor.executemany(f"INSERT INTO acme_stage VALUES ({marks})", records)

    def _any_bad(self) -> str:
        return " OR ".join(p for _i, p in self._checks) or "0"

    def find_bad(self, *, limit: int) -> tuple[int, list[tuple[int, int, str]]]:
        """How many staged rows break a rule, and the first ``limit`` of them
        as (staging rowid, CSV position of the first bad column, its value)."""
        count = self._cursor.execute(f"SELECT count(*) FROM acme_stage WHERE {self._any_bad()}").fetchone()[0]
        if not count:
            return 0, []
        which = " ".join(f"WHEN {p} THEN {i}" for i, p in self._checks)
        value = " ".join(f"WHEN {p} THEN c{i}" for i, p in self._checks)
        rows = self._cursor.execute(
            f"SELECT rowid, CASE {which} END, CASE {value} END FROM acme_stage "
            f"WHERE {self._any_bad()} ORDER BY rowid LIMIT ?", (limit,)
        ).fetchall()
        return count, [(int(r[0]), int(r[1]), r[2]) for r in rows]

    def merge(self) -> int:
        """Convert and upsert every good staged row; return how many."""
        used = [(i, c) for i, c in enumerate(self.columns) if c is not None]
        targets = ["cluster", "source", *(c.target for _i, c in used)]
        values = [_sql_literal(self.cluster), _sql_literal(self.source),
                  *(_conversion(c.kind, f"c{i}") for i, c in used)]
        update = ", ".join(f'"{t}" = excluded."{t}"' for t in targets if t not in _KEY)
        self._cursor.execute(
            f"INSERT INTO jobs ({', '.join(f'{chr(34)}{t}{chr(34)}' for t in targets)}) "
            f"SELECT {', '.join(values)} FROM acme_stage WHERE NOT ({self._any_bad()}) ORDER BY rowid "
            f"ON CONFLICT (cluster, job_id) DO UPDATE SET {update}"
        )
        return self._cursor.execute(f"SELECT count(*) FROM acme_stage WHERE NOT ({self._any_bad()})").fetchone()[0]
