"""Bulk writes of job rows: the fast path behind ``sacme import-trace``.

One transaction per import, so a failed or ``--strict``-aborted import leaves
nothing behind. SQLite stages raw text and checks and converts it in SQL
(:class:`StagedJobImport`); Postgres gets ``COPY`` of converted rows into a
temporary table and one ``INSERT ... SELECT ... ON CONFLICT`` at the end, the
way a site-scale store wants it (:class:`TraceWriter`). Both collect the days
the import touched (new rows and the rows they replace), so only those months'
report rollups are rebuilt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from slurm_acme.store.engine import Store
from slurm_acme.store.schema.core import jobs

_KEY = ("cluster", "job_id")
#: Page cache for one import connection, in KiB (SQLite's default is 2 MiB).
SQLITE_IMPORT_CACHE_KIB = 512 * 1024
DAY_S = 86400.0


def _days(values: Iterable[Any]) -> set[int]:
    """UTC day numbers (days since the epoch) of epoch seconds; NULLs skipped."""
    return {math.floor(float(v)) for v in values if v is not None}


class TraceWriter:
    """Upserts rows of ``fields`` (plus cluster and source) into ``jobs`` on Postgres.

    ``touched_days`` collects the UTC days (of ``submit_ts``) of the rows
    written and of the rows they replace, so only those months' report
    rollups are rebuilt afterwards.
    """

    def __init__(self, store: Store, *, cluster: str, source: str, fields: Sequence[str]):
        if store.dialect != "postgresql":
            raise ValueError("TraceWriter is the Postgres path; use StagedJobImport")
        unknown = [f for f in fields if f not in jobs.c]
        if unknown:
            raise ValueError(f"not jobs columns: {unknown}")
        self.store = store
        self.cluster = cluster
        self.source = source
        self.fields = tuple(fields)
        self.columns = ("cluster", "source", *self.fields)
        self._submit = self.fields.index("submit_ts") if "submit_ts" in self.fields else None
        self.touched_days: set[int] = set()
        self._conn: Any = None
        self._cursor: Any = None

    # -- context management -------------------------------------------------
    def __enter__(self) -> TraceWriter:
        self._conn = self.store.engine.raw_connection()
        self._cursor = self._conn.cursor()
        cols = ", ".join(f'"{c}"' for c in self.columns)
        self._cursor.execute(f"CREATE TEMP TABLE acme_import ON COMMIT DROP AS SELECT {cols} FROM jobs WITH NO DATA")
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
                # the days of the rows about to be replaced: their months lose them
                self._cursor.execute(
                    f"SELECT DISTINCT floor(j.submit_ts / {DAY_S}) FROM jobs j JOIN acme_import i "
                    "ON j.cluster = i.cluster AND j.job_id = i.job_id WHERE j.submit_ts IS NOT NULL")
                self.touched_days |= _days(r[0] for r in self._cursor.fetchall())
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
        if self._submit is not None:
            at = self._submit
            self.touched_days |= _days(row[at] / DAY_S for row in rows if row[at] is not None)
        prefix = (self.cluster, self.source)
        cols = ", ".join(f'"{c}"' for c in self.columns)
        with self._cursor.copy(f"COPY acme_import ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(prefix + row)

    def _assignments(self) -> str:
        return ", ".join(f'"{c}" = excluded."{c}"' for c in self.columns if c not in _KEY)

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


def _bad_predicate(kind: str, col: str, choices: Sequence[str], int_max: int) -> str | None:
    """SQL that is true when ``col`` breaks the rules of its kind (see ingest.trace.Column)."""
    if kind == "key":
        return f"({col} = '' OR instr({col}, char(0)) > 0)"
    if kind == "text":
        return f"instr({col}, char(0)) > 0"  # Postgres refuses NUL in text; both backends reject it
    if kind == "int":
        # CAST clamps a longer digit string to 2**63-1, which is past the limit too.
        return f"({col} != '' AND ({col} GLOB '*[^0-9]*' OR CAST({col} AS INTEGER) > {int_max}))"
    if kind == "num":
        return f"({col} != '' AND ({col} GLOB '*[^0-9.]*' OR {col} GLOB '*.*.*' OR {col} = '.'))"
    if kind == "time":
        # Cheap tests first: SQLite stops at the first true OR term, and the
        # costly date normalisation runs only for days 29-31.
        suffix = f"substr({col}, 20)"
        return (
            f"({col} != '' AND ({col} NOT GLOB '{_TIME_SHAPE}' OR julianday({col}) IS NULL"
            f" OR substr({col}, 12, 2) > '23' OR substr({col}, 15, 2) > '59' OR substr({col}, 18, 2) > '59'"
            f" OR NOT ({suffix} = '' OR {suffix} GLOB '[+-][0-9][0-9]:[0-9][0-9]'"
            f" OR rtrim({suffix}, '0123456789.+-:Z') = '')"
            f" OR (substr({col}, 9, 2) > '28'"
            f" AND date(substr({col}, 1, 10), '+0 days') IS NOT substr({col}, 1, 10))))"
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


@dataclass(frozen=True)
class StagedBatch:
    """What one staged batch came to."""

    merged: int
    bad_count: int
    #: The first bad rows: (index in the batch, CSV position of the first bad column, its value).
    first_bad: list[tuple[int, int, str]]


class StagedJobImport:
    """Bulk import into ``jobs`` on SQLite, at close to the sqlite3 shell's speed.

    Each batch of records is appended as raw text to an in-memory temporary
    table with one ``executemany``; one scan marks the rows that break a rule;
    one ``INSERT ... SELECT`` converts and upserts the rest. Everything runs in
    one transaction, rolled back if the caller raises. ``columns`` gives, per
    CSV position, an object with ``target``, ``kind`` and ``choices``
    (``slurm_acme.ingest.trace.Column``), or None to ignore that position;
    ``int_max`` bounds integers and ``ordered`` names two time columns whose
    order is checked (the trace module owns those rules).
    """

    def __init__(self, store: Store, *, cluster: str, source: str, columns: Sequence,
                 int_max: int, ordered: tuple[str, str]) -> None:
        if store.dialect != "sqlite":
            raise ValueError("StagedJobImport is the SQLite path; use TraceWriter")
        self.store = store
        self.cluster = cluster
        self._width = len(columns)
        self._conn: Any = None
        self._cursor: Any = None
        self._had_rows = True
        self.touched_days: set[int] = set()
        predicates = [(i, _bad_predicate(c.kind, f"c{i}", c.choices, int_max))
                      for i, c in enumerate(columns) if c is not None]
        checks = [(i, p) for i, p in predicates if p]
        names = [c.name if c is not None else None for c in columns]
        if all(n in names for n in ordered):  # last: the columns' own rules come first
            start, end = (f"c{names.index(n)}" for n in ordered)
            checks.append((names.index(ordered[1]),
                           f"({start} != '' AND {end} != '' AND julianday({end}) < julianday({start}))"))
        any_bad = " OR ".join(p for _i, p in checks) or "0"
        which = " ".join(f"WHEN {p} THEN {i}" for i, p in checks)
        value = " ".join(f"WHEN {p} THEN c{i}" for i, p in checks)
        used = [(i, c) for i, c in enumerate(columns) if c is not None]
        targets = ["cluster", "source", *(c.target for _i, c in used)]
        values = [_sql_literal(cluster), _sql_literal(source), *(_conversion(c.kind, f"c{i}") for i, c in used)]
        update = ", ".join(f'"{t}" = excluded."{t}"' for t in targets if t not in _KEY)
        marks = ", ".join("?" for _ in range(self._width))
        self._sql_stage = f"INSERT INTO acme_stage VALUES ({marks})"
        # Bad rows are found with one scan; their CASE columns are computed only for them.
        self._sql_mark = f"INSERT INTO acme_bad SELECT rowid FROM acme_stage WHERE {any_bad}"
        self._sql_first_bad = (
            f"SELECT s.rowid, CASE {which} END, CASE {value} END FROM acme_stage s "
            f"JOIN acme_bad b ON b.id = s.rowid ORDER BY s.rowid LIMIT ?"
        )
        self._sql_merge = (
            f"INSERT INTO jobs ({', '.join(chr(34) + t + chr(34) for t in targets)}) "
            f"SELECT {', '.join(values)} FROM acme_stage WHERE rowid NOT IN (SELECT id FROM acme_bad) "
            f"ORDER BY rowid ON CONFLICT (cluster, job_id) DO UPDATE SET {update}"
        )
        position = {c.target: i for i, c in used}
        good = "s.rowid NOT IN (SELECT id FROM acme_bad)"
        self._sql_new_days = self._sql_old_days = None
        if "submit_ts" in position:
            submit = f"s.c{position['submit_ts']}"
            self._sql_new_days = (f"SELECT DISTINCT julianday({submit}) - 2440587.5 FROM acme_stage s "
                                  f"WHERE {submit} != '' AND {good}")
        if "job_id" in position:
            self._sql_old_days = (f"SELECT DISTINCT j.submit_ts / {DAY_S} FROM acme_stage s JOIN jobs j "
                                  f"ON j.cluster = ? AND j.job_id = s.c{position['job_id']} "
                                  f"WHERE j.submit_ts IS NOT NULL AND {good}")

    def __enter__(self) -> StagedJobImport:
        self._conn = self.store.engine.raw_connection()
        self._cursor = self._conn.cursor()
        self._cursor.execute(f"PRAGMA cache_size=-{SQLITE_IMPORT_CACHE_KIB}")
        self._cursor.execute("PRAGMA temp_store=MEMORY")
        self._cursor.execute("DROP TABLE IF EXISTS temp.acme_stage")
        self._cursor.execute("DROP TABLE IF EXISTS temp.acme_bad")
        cols = ", ".join(f"c{i} TEXT" for i in range(self._width))
        self._cursor.execute(f"CREATE TEMP TABLE acme_stage ({cols})")
        self._cursor.execute("CREATE TEMP TABLE acme_bad (id INTEGER PRIMARY KEY)")
        self._had_rows = self._cursor.execute(
            "SELECT 1 FROM jobs WHERE cluster = ? LIMIT 1", (self.cluster,)).fetchone() is not None
        return self

    def __exit__(self, exc_type, exc, tb) -> None:  # type: ignore[no-untyped-def]
        assert self._conn is not None and self._cursor is not None
        try:
            if exc_type is None:
                self._conn.commit()
            else:
                self._conn.rollback()
            self._cursor.execute("DROP TABLE IF EXISTS temp.acme_stage")
            self._cursor.execute("DROP TABLE IF EXISTS temp.acme_bad")
        finally:
            self._cursor.close()
            self._conn.close()

    def load(self, records: Sequence[Sequence[str]], *, report: int) -> StagedBatch:
        """Stage, check, convert and upsert one batch (each record exactly as
        wide as the header); describe up to ``report`` bad rows."""
        if not records:
            return StagedBatch(0, 0, [])
        cur = self._cursor
        cur.execute("DELETE FROM acme_stage")  # rowids restart at 1: rowid n is records[n - 1]
        cur.execute("DELETE FROM acme_bad")
        cur.executemany(self._sql_stage, records)
        cur.execute(self._sql_mark)
        bad_count = cur.execute("SELECT count(*) FROM acme_bad").fetchone()[0]
        first_bad = []
        if bad_count and report > 0:
            first_bad = [(int(r[0]) - 1, int(r[1]), r[2]) for r in cur.execute(self._sql_first_bad, (report,))]
        if self._sql_new_days is not None:
            self.touched_days |= _days(r[0] for r in cur.execute(self._sql_new_days))
        if self._sql_old_days is not None and self._had_rows:
            self.touched_days |= _days(r[0] for r in cur.execute(self._sql_old_days, (self.cluster,)))
        cur.execute(self._sql_merge)
        return StagedBatch(len(records) - bad_count, bad_count, first_bad)


# -- columnar batches (pyarrow tables of converted rows), both backends ----------

#: The temporary table an upsert stages its rows in.
STAGE_TABLE = "acme_trace_stage"


class BulkConflict(Exception):
    """A bulk import met a job id twice (in the file); the caller redoes it as an upsert."""


def python_values(array: Any) -> list[Any]:
    """A column's values as Python objects (None for nulls), numbers through numpy."""
    import pyarrow as pa

    from slurm_acme.columns import python_strings, to_numpy, valid

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type not in (pa.int64(), pa.float64()):
        return python_strings(array)
    values = to_numpy(array).tolist()
    if array.null_count:
        for i in np.flatnonzero(~valid(array)).tolist():
            values[i] = None
    return values


class _DbapiConn:
    """The store's own DBAPI connection (sqlite3 or psycopg)."""

    def __init__(self, store: Store):
        self._conn = store.engine.raw_connection()
        self._cursor = self._conn.cursor()
        self._copy: tuple[str, Any] | None = None
        self._copy_context: Any = None
        self.postgres = store.dialect == "postgresql"
        if self.postgres:
            import psycopg

            self.integrity: tuple[type[Exception], ...] = (psycopg.errors.UniqueViolation,)
            self.driver_error: type[Exception] = psycopg.Error
        else:
            import sqlite3

            self.integrity = (sqlite3.IntegrityError,)
            self.driver_error = sqlite3.Error

    @staticmethod
    def conflict(exc: Exception) -> bool:
        return True

    def finish(self, exc: BaseException | None = None) -> None:
        """End the COPY in progress, if any (failing it when ``exc`` is given)."""
        if self._copy is not None:
            context, self._copy = self._copy_context, None
            context.__exit__(type(exc) if exc else None, exc, None)

    def execute(self, sql: str) -> None:
        self.finish()
        self._cursor.execute(sql)

    def query(self, sql: str) -> list[tuple]:
        self.finish()
        self._cursor.execute(sql)
        return [tuple(r) for r in self._cursor.fetchall()]

    def ingest(self, table_name: str, table: Any, constants: dict[str, str]) -> None:
        """Append ``table`` plus the ``constants`` columns to ``table_name``."""
        names = [*constants, *table.column_names]
        cols = ", ".join(f'"{c}"' for c in names)
        if self.postgres:
            # CSV through COPY, what psql \copy sends; pyarrow writes it in C
            import pyarrow as pa
            import pyarrow.csv as pa_csv

            from slurm_acme.columns import constant_strings

            for at, (name, value) in enumerate(constants.items()):
                table = table.add_column(at, name, constant_strings(value, table.num_rows))
            sink = pa.BufferOutputStream()
            pa_csv.write_csv(table, sink, pa_csv.WriteOptions(include_header=False))
            if self._copy is None:
                # one COPY for the whole import: the server loads a batch while the next is read
                from psycopg.copy import QueuedLibpqWriter

                # a writer thread sends each batch, so the next one is read and checked meanwhile
                self._copy_context = self._cursor.copy(f"COPY {table_name} ({cols}) FROM STDIN (FORMAT csv)",
                                                       writer=QueuedLibpqWriter(self._cursor))  # type: ignore[arg-type]
                self._copy = (table_name, self._copy_context.__enter__())
            assert self._copy[0] == table_name
            self._copy[1].write(sink.getvalue())
            return
        # constants as literals; the rest bound from Python lists (numpy's tolist is C)
        marks = [_sql_literal(v) for v in constants.values()] + ["?"] * table.num_columns
        sql = f"INSERT INTO {table_name} ({cols}) VALUES ({', '.join(marks)})"
        rows = zip(*(python_values(c) for c in table.columns), strict=True)
        self._cursor.executemany(sql, rows)  # type: ignore[arg-type]  # sqlite3 takes any iterable

    def commit(self) -> None:
        self.finish()
        self._conn.commit()

    def rollback(self) -> None:
        try:
            self.finish(RuntimeError("import abandoned"))
        except self.driver_error:
            pass  # the COPY had failed already (that error is the one the caller sees); roll back regardless
        self._conn.rollback()

    def close(self) -> None:
        self._cursor.close()
        self._conn.close()


class ColumnarJobWriter:
    """Writes pyarrow tables of converted trace rows (``jobs`` column names) in one transaction.

    *Bulk* when the cluster has no jobs yet (a fresh cluster, the common case):
    batches go straight into ``jobs`` and the narrow columns the monthly
    rollups need are kept (``kept``), so they can be built in memory. A job id
    the file repeats raises :class:`BulkConflict` (the transaction is rolled
    back; the caller redoes the import as an upsert). Otherwise *upsert*:
    batches are staged in a temporary table and merged with ``ON CONFLICT``
    at the end (the last copy of a repeated job id wins), and ``touched_days``
    includes the days of the rows replaced.
    """

    #: What :func:`slurm_acme.store.report.rollups_from_columns` reads.
    ROLLUP_COLUMNS = ("submit_ts", "workload_type", "gpus", "duration_s", "queue_s", "gpu_time_s", "state")

    def __init__(self, store: Store, *, cluster: str, source: str, bulk: bool = True):
        self.store = store
        self.cluster = cluster
        self.source = source
        self.allow_bulk = bulk
        self.bulk = False
        self.touched_days: set[int] = set()
        self.kept: list[Any] = []
        self._db: _DbapiConn | None = None
        self._columns: tuple[str, ...] = ()
        self._indexes: list[tuple[str, str]] = []

    def _may_alter(self, db: _DbapiConn) -> bool:
        """Whether this user may drop and rebuild the indexes (Postgres: owns ``jobs``)."""
        if self.store.dialect != "postgresql":
            return True
        return bool(db.query("SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = 'jobs'::regclass")[0][0])

    def _index_ddl(self, db: _DbapiConn) -> list[tuple[str, str]]:
        """(DROP, CREATE) of the indexes of ``jobs`` that can be built after a load,
        from the schema: the secondary ones, and on Postgres the primary key
        (re-adding it is what finds a job id the file repeats)."""
        from sqlalchemy.schema import CreateIndex, DropIndex

        dialect = self.store.engine.dialect
        ddl = [(str(DropIndex(ix).compile(dialect=dialect)), str(CreateIndex(ix).compile(dialect=dialect)))
               for ix in sorted(jobs.indexes, key=lambda ix: str(ix.name))]
        if self.store.dialect == "postgresql":  # a SQLite table WITHOUT ROWID is its primary key
            # by the name the store has (stores made before the naming convention differ)
            found = db.query("SELECT conname FROM pg_constraint WHERE conrelid = 'jobs'::regclass AND contype = 'p'")
            if found:
                name, cols = found[0][0].replace('"', '""'), ", ".join(c.name for c in jobs.primary_key.columns)
                ddl.insert(0, (f'ALTER TABLE jobs DROP CONSTRAINT "{name}"',
                               f'ALTER TABLE jobs ADD CONSTRAINT "{name}" PRIMARY KEY ({cols})'))
        return ddl

    def __enter__(self) -> ColumnarJobWriter:
        self._db = db = _DbapiConn(self.store)
        try:
            if self.store.dialect == "sqlite":
                db.execute(f"PRAGMA busy_timeout={30_000}")
                db.execute(f"PRAGMA cache_size=-{SQLITE_IMPORT_CACHE_KIB}")
                db.execute("PRAGMA temp_store=MEMORY")
                db.execute("BEGIN IMMEDIATE")  # the index DDL below must roll back with the rows
            had_rows = bool(db.query(f"SELECT 1 FROM jobs WHERE cluster = {_sql_literal(self.cluster)} LIMIT 1"))
            self.bulk = self.allow_bulk and not had_rows
            if self.bulk and not db.query("SELECT 1 FROM jobs LIMIT 1") and self._may_alter(db):
                # load, then index: an empty store's secondary indexes are built once, at the end
                self._indexes = self._index_ddl(db)
                for drop, _create in self._indexes:
                    db.execute(drop)
        except BaseException:
            db.rollback()
            db.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:  # type: ignore[no-untyped-def]
        db = self._db
        assert db is not None
        try:
            if exc_type is None:
                if not self.bulk and self._columns:
                    self._merge(db)
                for _drop, create in self._indexes:
                    db.execute(create)
                db.commit()
            else:
                db.rollback()
        except db.integrity as error:
            db.rollback()
            if not db.conflict(error):
                raise
            raise BulkConflict(self.cluster) from None
        finally:
            db.close()

    def write(self, table: Any) -> None:
        """Queue ``table`` (columns named after ``jobs`` columns) into the transaction."""
        import pyarrow.compute as pc

        from slurm_acme.columns import to_numpy, valid

        if not table.num_rows:
            return
        assert self._db is not None
        constants = {"cluster": self.cluster, "source": self.source}
        if "submit_ts" in table.column_names:
            submit = table["submit_ts"].combine_chunks()
            self.touched_days |= set(np.unique(np.floor(to_numpy(submit)[valid(submit)] / DAY_S)).astype(int).tolist())
        if self.bulk:
            self.kept.append(table.select(list(self.ROLLUP_COLUMNS)))
            try:
                self._db.ingest("jobs", table.take(pc.sort_indices(table["job_id"])), constants)
            except self._db.integrity as error:
                if not self._db.conflict(error):
                    raise
                raise BulkConflict(self.cluster) from None
            return
        if not self._columns:
            self._columns = ("cluster", "source", *table.column_names)
            cols = ", ".join(f'"{c}"' for c in self._columns)
            if self.store.dialect == "postgresql":
                self._db.execute(f"CREATE TEMP TABLE {STAGE_TABLE} ON COMMIT DROP AS "
                                 f"SELECT {cols} FROM jobs WITH NO DATA")
            else:
                self._db.execute(f"DROP TABLE IF EXISTS temp.{STAGE_TABLE}")
                self._db.execute(f"CREATE TEMP TABLE {STAGE_TABLE} AS SELECT {cols} FROM jobs WHERE 0")
        self._db.ingest(STAGE_TABLE, table, constants)

    def _merge(self, db: _DbapiConn) -> None:
        cols = ", ".join(f'"{c}"' for c in self._columns)
        update = ", ".join(f'"{c}" = excluded."{c}"' for c in self._columns if c not in _KEY)
        cluster = _sql_literal(self.cluster)
        # the days of the rows about to be replaced: their months lose them
        self.touched_days |= _days(r[0] for r in db.query(
            f"SELECT DISTINCT j.submit_ts / {DAY_S} FROM jobs j JOIN {STAGE_TABLE} i "
            f"ON j.cluster = {cluster} AND j.job_id = i.job_id WHERE j.submit_ts IS NOT NULL"))
        if self.store.dialect == "postgresql":
            # DISTINCT ON keeps the last copy of a job id repeated within one file.
            db.execute(f"INSERT INTO jobs ({cols}) SELECT DISTINCT ON (cluster, job_id) {cols} FROM {STAGE_TABLE} "
                       f"ORDER BY cluster, job_id, ctid DESC ON CONFLICT (cluster, job_id) DO UPDATE SET {update}")
        else:
            # in file order within a job id, so its last copy is the one kept
            db.execute(f"INSERT INTO jobs ({cols}) SELECT {cols} FROM {STAGE_TABLE} WHERE true "
                       f"ORDER BY job_id, rowid ON CONFLICT (cluster, job_id) DO UPDATE SET {update}")
            db.execute(f"DROP TABLE temp.{STAGE_TABLE}")
