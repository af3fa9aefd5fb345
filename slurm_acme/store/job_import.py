"""Bulk writes of job rows: the store's side of ``sacme import-trace``.

One transaction per import, so a failed or ``--strict``-aborted import leaves
nothing behind. :class:`ColumnarJobWriter` takes pyarrow tables (the columnar
lane): a cluster's first import goes straight into ``jobs`` (an empty store's
indexes built after the load), any other is staged and merged with ``ON
CONFLICT``. :class:`TraceWriter` takes converted row tuples (the row lane, when
pyarrow is not installed) and always merges. Both collect the days the import
touched (new rows and the rows they replace), so only those months' report
rollups are rebuilt.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from slurm_acme.store.engine import Store

_KEY = ("cluster", "job_id")
#: Page cache for one import connection, in KiB (SQLite's default is 2 MiB).
SQLITE_IMPORT_CACHE_KIB = 512 * 1024
DAY_S = 86400.0


def _days(values: Iterable[Any]) -> set[int]:
    """UTC day numbers (days since the epoch) of epoch seconds; NULLs skipped."""
    return {math.floor(float(v)) for v in values if v is not None}


class TraceWriter:
    """Upserts rows of ``fields`` (plus cluster and source) into ``jobs``: the row lane.

    Rows are staged in a temporary table (``COPY`` on Postgres, one
    ``executemany`` per batch on SQLite) and merged with one ``INSERT ...
    SELECT ... ON CONFLICT`` at the end, where the last copy of a job id the
    file repeats wins. ``touched_days`` collects the UTC days (of ``submit_ts``)
    of the rows written and of the rows they replace, so only those months'
    report rollups are rebuilt afterwards.
    """

    def __init__(self, store: Store, *, cluster: str, source: str, fields: Sequence[str]):
        from slurm_acme.store.schema.core import jobs

        unknown = [f for f in fields if f not in jobs.c]
        if unknown:
            raise ValueError(f"not jobs columns: {unknown}")
        self.store = store
        self.postgres = store.dialect == "postgresql"
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
        self._conn = self.store.bulk_connection()
        self._cursor = self._conn.cursor()
        cols = ", ".join(f'"{c}"' for c in self.columns)
        if self.postgres:
            self._cursor.execute(f"CREATE TEMP TABLE acme_import ON COMMIT DROP AS "
                                 f"SELECT {cols} FROM jobs WITH NO DATA")
        else:
            self._cursor.execute(f"PRAGMA cache_size=-{SQLITE_IMPORT_CACHE_KIB}")
            self._cursor.execute("PRAGMA temp_store=MEMORY")
            self._cursor.execute("BEGIN IMMEDIATE")
            self._cursor.execute("DROP TABLE IF EXISTS temp.acme_import")
            self._cursor.execute(f"CREATE TEMP TABLE acme_import AS SELECT {cols} FROM jobs WHERE 0")
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
                    f"SELECT DISTINCT j.submit_ts / {DAY_S} FROM jobs j JOIN acme_import i "
                    "ON j.cluster = i.cluster AND j.job_id = i.job_id WHERE j.submit_ts IS NOT NULL")
                self.touched_days |= _days(r[0] for r in self._cursor.fetchall())
                self._cursor.execute(self._merge_sql())
                if not self.postgres:
                    self._cursor.execute("DROP TABLE temp.acme_import")
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
        if not self.postgres:
            marks = ", ".join("?" for _ in self.columns)
            self._cursor.executemany(f"INSERT INTO acme_import ({cols}) VALUES ({marks})",
                                     [prefix + row for row in rows])
            return
        with self._cursor.copy(f"COPY acme_import ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(prefix + row)

    def _assignments(self) -> str:
        return ", ".join(f'"{c}" = excluded."{c}"' for c in self.columns if c not in _KEY)

    def _merge_sql(self) -> str:
        cols = ", ".join(f'"{c}"' for c in self.columns)
        if not self.postgres:
            # in file order, so the last copy of a repeated job id is the one kept
            return (f"INSERT INTO jobs ({cols}) SELECT {cols} FROM acme_import WHERE true ORDER BY rowid "
                    f"ON CONFLICT (cluster, job_id) DO UPDATE SET {self._assignments()}")
        # DISTINCT ON keeps the last copy of a job id repeated within one file.
        return (
            f"INSERT INTO jobs ({cols}) SELECT DISTINCT ON (cluster, job_id) {cols} FROM acme_import "
            "ORDER BY cluster, job_id, ctid DESC "
            f"ON CONFLICT (cluster, job_id) DO UPDATE SET {self._assignments()}"
        )


def _name(identifier: str) -> str:
    """An identifier for inside double quotes."""
    return identifier.replace('"', '""')


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# -- columnar batches (pyarrow tables of converted rows), both backends ----------

#: The temporary table an upsert stages its rows in.
STAGE_TABLE = "acme_trace_stage"


class BulkConflict(Exception):
    """A bulk import met a job id twice (in the file); the caller redoes it as an upsert."""


#: Rows per ``INSERT ... VALUES`` statement on SQLite: binding a row costs a
#: quarter of what one ``executemany`` step per row does.
SQLITE_ROWS_PER_INSERT = 128


def sqlite_insert_rows(cursor: Any, table_name: str, columns: Sequence[str], literals: Sequence[str],
                       table: Any, flat: list[Any] | None = None) -> None:
    """Append a pyarrow ``table`` to ``table_name`` through sqlite3: multi-row
    ``INSERT ... VALUES`` statements bound from one flat list of its values
    (``flat``, its :func:`~slurm_acme.columns.row_major`, when made already).
    ``columns`` names the target columns: the ``literals`` (SQL text) first,
    then ``table``'s columns in order."""
    from slurm_acme.columns import row_major

    width = table.num_columns
    if flat is None:
        flat = row_major(table)
    cols = ", ".join(f'"{c}"' for c in columns)
    row = "(" + ", ".join([*literals, *["?"] * width]) + ")"

    def statement(rows: int) -> str:
        return f"INSERT INTO {table_name} ({cols}) VALUES " + ", ".join([row] * rows)

    step = SQLITE_ROWS_PER_INSERT * width
    whole = table.num_rows // SQLITE_ROWS_PER_INSERT * step
    if whole:
        cursor.executemany(statement(SQLITE_ROWS_PER_INSERT), (flat[at:at + step] for at in range(0, whole, step)))
    if whole < len(flat):
        cursor.execute(statement((len(flat) - whole) // width), flat[whole:])


class _DbapiConn:
    """The store's own DBAPI connection (sqlite3 or psycopg)."""

    def __init__(self, store: Store):
        self._conn = store.bulk_connection()
        self._cursor = self._conn.cursor()
        self._copy: tuple[str, Any, Any] | None = None  # (table, psycopg Copy, CopyEncoder)
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
            (_table, copy, encoder), self._copy = self._copy, None
            context = self._copy_context
            if exc is None:
                copy.write(encoder.trailer())
            context.__exit__(type(exc) if exc else None, exc, None)

    def execute(self, sql: str) -> None:
        self.finish()
        self._cursor.execute(sql)

    def query(self, sql: str) -> list[tuple]:
        self.finish()
        self._cursor.execute(sql)
        return [tuple(r) for r in self._cursor.fetchall()]

    def ingest(self, table_name: str, table: Any, constants: dict[str, str], flat: list[Any] | None = None) -> None:
        """Append ``table`` plus the ``constants`` columns to ``table_name`` (SQLite:
        ``flat``, the table's values row after row, when made already)."""
        names = [*constants, *table.column_names]
        if self.postgres:
            from slurm_acme.columns import constant_strings
            from slurm_acme.store.pg_copy import CopyEncoder

            for at, (name, value) in enumerate(constants.items()):
                table = table.add_column(at, name, constant_strings(value, table.num_rows))
            if self._copy is None:
                # one COPY for the whole import: the server loads a batch while the next is read
                from psycopg.copy import QueuedLibpqWriter

                encoder = CopyEncoder(self._cursor, table_name, names)
                # a writer thread sends each batch, so the next one is read and checked meanwhile
                self._copy_context = self._cursor.copy(encoder.sql, writer=QueuedLibpqWriter(self._cursor))  # type: ignore[arg-type]
                self._copy = (table_name, self._copy_context.__enter__(), encoder)
                self._copy[1].write(encoder.header())
            assert self._copy[0] == table_name
            self._copy[1].write(self._copy[2].batch(table))
            return
        # constants as literals; the rest bound from Python values (made in C)
        sqlite_insert_rows(self._cursor, table_name, names, [_sql_literal(v) for v in constants.values()], table,
                           flat)

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


def _checkpoint_in_background(db: _DbapiConn) -> threading.Thread:
    """A PASSIVE checkpoint of ``db``'s SQLite database on a thread, then ``db`` closed.
    Best effort, as SQLite's own automatic checkpoint is: a failed or partial one
    leaves the frames in the WAL, for the next checkpoint (the data is committed)."""
    def run() -> None:
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except db.driver_error:
            pass
        finally:
            db.close()

    thread = threading.Thread(target=run, name="acme-import-checkpoint", daemon=False)
    thread.start()
    return thread


@dataclass(frozen=True)
class PreparedBatch:
    """A pyarrow table of ``jobs`` rows readied for :meth:`ColumnarJobWriter.write`."""

    table: Any
    days: set[int]  # the UTC days of its submit times
    flat: list[Any] | None  # SQLite: its values row after row


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

    #: What :func:`slurm_acme.store.column_rollups.prepare_rollups` reads.
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
        self._checkpoint = False
        self._settling: threading.Thread | None = None

    def _may_alter(self, db: _DbapiConn) -> bool:
        """Whether this user may drop and rebuild the indexes (Postgres: owns ``jobs``)."""
        if self.store.dialect != "postgresql":
            return True
        return bool(db.query("SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = 'jobs'::regclass")[0][0])

    def _index_ddl(self, db: _DbapiConn) -> list[tuple[str, str]]:
        """(DROP, CREATE) of the indexes of ``jobs`` that can be built after a load, as
        the database has them (whoever made them): the secondary ones, and on Postgres
        the primary key (re-adding it is what finds a job id the file repeats)."""
        if self.store.dialect == "sqlite":  # a SQLite table WITHOUT ROWID is its primary key
            found = db.query("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs' "
                             "AND sql IS NOT NULL ORDER BY name")
            return [(f'DROP INDEX "{_name(name)}"', sql) for name, sql in found]
        # the primary key by the name the store has (stores made before the naming convention differ)
        keys = db.query("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                        "WHERE conrelid = 'jobs'::regclass AND contype = 'p'")
        ddl = [(f'ALTER TABLE jobs DROP CONSTRAINT "{_name(name)}"',
                f'ALTER TABLE jobs ADD CONSTRAINT "{_name(name)}" {definition}') for name, definition in keys]
        found = db.query(  # not those behind a constraint: the key, or a UNIQUE one (dropped with it)
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = 'jobs'::regclass AND NOT EXISTS "
            "(SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid) ORDER BY c.relname")
        return ddl + [(f'DROP INDEX "{_name(name)}"', sql) for name, sql in found]

    def __enter__(self) -> ColumnarJobWriter:
        self._db = db = _DbapiConn(self.store)
        try:
            if self.store.dialect == "sqlite":
                db.execute(f"PRAGMA busy_timeout={30_000}")
                db.execute(f"PRAGMA cache_size=-{SQLITE_IMPORT_CACHE_KIB}")
                db.execute("PRAGMA temp_store=MEMORY")
                if db.query("PRAGMA journal_mode")[0][0] == "wal":
                    # copying the WAL into the database (about half the commit of a big import)
                    # is left to settle(), on a thread, while the caller writes the rollups
                    db.execute("PRAGMA wal_autocheckpoint=0")
                    self._checkpoint = True
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
        committed = False
        try:
            if exc_type is None:
                if not self.bulk and self._columns:
                    self._merge(db)
                for _drop, create in self._indexes:
                    db.execute(create)
                db.commit()
                committed = True
            else:
                db.rollback()
        except db.integrity as error:
            db.rollback()
            if not db.conflict(error):
                raise
            raise BulkConflict(self.cluster) from None
        finally:
            if committed and self._checkpoint:
                self._settling = _checkpoint_in_background(db)
            else:
                db.close()

    def settle(self) -> None:
        """Wait for the committed import's WAL to be copied into the SQLite database
        (started at commit; the other writes of the import may run meanwhile)."""
        if self._settling is not None:
            self._settling.join()
            self._settling = None

    def prepare(self, table: Any) -> PreparedBatch:
        """What :meth:`write` needs of ``table`` besides the connection. Pure, so the
        thread that reads the next batches makes it (the writing thread only binds)."""
        from slurm_acme.columns import row_major, to_numpy, valid

        days: set[int] = set()
        if "submit_ts" in table.column_names and table.num_rows:
            submit = table["submit_ts"].combine_chunks()
            days = set(np.unique(np.floor(to_numpy(submit)[valid(submit)] / DAY_S)).astype(int).tolist())
        flat = row_major(table) if self.store.dialect == "sqlite" and table.num_rows else None
        return PreparedBatch(table, days, flat)

    def write(self, prepared: PreparedBatch) -> None:
        """Queue a :meth:`prepare`'d batch into the transaction."""
        table = prepared.table
        if not table.num_rows:
            return
        assert self._db is not None
        constants = {"cluster": self.cluster, "source": self.source}
        self.touched_days |= prepared.days
        if self.bulk:
            self.kept.append(table.select(list(self.ROLLUP_COLUMNS)))
            try:
                self._db.ingest("jobs", table, constants, prepared.flat)
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
        self._db.ingest(STAGE_TABLE, table, constants, prepared.flat)

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
