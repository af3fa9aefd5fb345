"""Schema versioning: an ordered list of migrations and the version applied.

Version 1 creates the schema as declared in :mod:`slurm_acme.store.schema`.
Later changes append a migration (a function of a connection) and bump the
version; ``upgrade`` applies the missing ones in order, each in a transaction.
Opening a store upgrades it, so every command sees the schema it expects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurm_acme.errors import StoreUnavailable
from slurm_acme.store.dbapi import Db
from slurm_acme.store.engine import Store

if TYPE_CHECKING:
    from sqlalchemy import Connection

VERSION_KEY = "schema_version"
#: The table that holds the schema version (``schema.core.meta``).
META_TABLE = "acme_meta"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _create_initial(conn: Connection) -> None:
    from slurm_acme.store.schema import metadata

    metadata.create_all(conn, checkfirst=True)


def _hourly_rollups(conn: Connection) -> None:
    """Telemetry rollup tables, built from the raw samples already held; the
    sample-by-job index goes (nothing reads samples by job alone any more)."""
    from sqlalchemy import text

    from slurm_acme.store.rollup_rows import rebuild_window, rebuild_windows
    from slurm_acme.store.schema.telemetry import ROLLUP_TABLES

    for table in ROLLUP_TABLES:
        table.create(conn, checkfirst=True)
    for index in ROLLUP_TABLES[0].indexes:
        index.create(conn, checkfirst=True)
    conn.execute(text("DROP INDEX IF EXISTS ix_gpu_samples_job"))
    for start, end in rebuild_windows(conn):
        rebuild_window(conn, start, end)


def _day_partitions(conn: Connection) -> None:
    from slurm_acme.store.partitions import partition_raw_tables

    partition_raw_tables(conn)


def _add_eval_runs_user(conn: Connection) -> None:
    """Evaluations get an owner (stores made before it have none: admins only see those)."""
    from sqlalchemy import inspect, text

    if "user" not in {c["name"] for c in inspect(conn).get_columns("eval_runs")}:
        conn.execute(text('ALTER TABLE eval_runs ADD COLUMN "user" VARCHAR(64)'))


def _row_security(conn: Connection) -> None:
    from slurm_acme.store.security import apply_row_security

    apply_row_security(conn)


#: From this version on, policies and grants are re-applied after every migration
#: (a table a later migration adds gets its policy and its grants too).
ROW_SECURITY_FROM = 5

def _case_vectors(conn: Connection) -> None:
    from slurm_acme.store.schema.failures import failure_case_vectors

    failure_case_vectors.create(conn, checkfirst=True)


def _server_power_rollups(conn: Connection) -> None:
    from slurm_acme.store.rollup_rows import server_totals_from_nodes

    server_totals_from_nodes(conn)


def _node_ledger(conn: Connection) -> None:
    """The node-health ledger (events per node) and the drains and resumes made."""
    from slurm_acme.store.schema.nodes import node_actions, node_events

    for table in (node_events, node_actions):
        table.create(conn, checkfirst=True)
        for index in table.indexes:
            index.create(conn, checkfirst=True)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _create_initial),
    Migration(2, "hourly telemetry rollups", _hourly_rollups),
    Migration(3, "raw telemetry samples in day partitions (Postgres)", _day_partitions),
    Migration(4, "eval_runs.user (owner of an evaluation)", _add_eval_runs_user),
    Migration(5, "row-level security keyed on the Slurm user (Postgres)", _row_security),
    Migration(6, "failure case vectors (embedding retrieval)", _case_vectors),
    Migration(7, "GPU share of server power in the cluster-hour rollups", _server_power_rollups),
    Migration(8, "node-health ledger: node_events, node_actions", _node_ledger),
)

LATEST = MIGRATIONS[-1].version


def stored_version(db: Db) -> int:
    """The applied schema version read with plain SQL (no SQLAlchemy); 0 for an empty database."""
    if not db.has_table(META_TABLE):
        return 0
    value = db.scalar(f"SELECT value FROM {META_TABLE} WHERE key = ?", (VERSION_KEY,))
    return int(value) if value is not None else 0


def current_version(conn: Connection) -> int:
    """The applied schema version; 0 for an empty database."""
    from sqlalchemy import select

    from slurm_acme.store.schema.core import meta

    if not conn.dialect.has_table(conn, meta.name):
        return 0
    row = conn.execute(select(meta.c.value).where(meta.c.key == VERSION_KEY)).first()
    return int(row[0]) if row else 0


def schema_version(store: Store) -> int:
    """The applied schema version of an open store (what ``sacme db info`` shows)."""
    with store.reading() as db:
        return stored_version(db)


def _lock(conn: Connection) -> None:
    """Serialise concurrent upgraders (many collectors may start at once)."""
    from sqlalchemy import text

    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(716371)"))
    elif conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def upgrade(store: Store) -> int:
    """Apply pending migrations; return the version now in force.

    A current store is recognised with plain SQL, so opening one imports no SQLAlchemy."""
    with store.reading() as db:
        version = stored_version(db)
    if version >= LATEST:
        if version > LATEST:
            raise StoreUnavailable(
                f"database schema version {version} is newer than this slurm-acme ({LATEST}); upgrade slurm-acme"
            )
        return version
    if store.dialect == "sqlite":
        # pysqlite's implicit transactions fight BEGIN IMMEDIATE; drive it by hand.
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            _lock(conn)
            try:
                version = _apply_pending(conn)
                conn.exec_driver_sql("COMMIT")
            except BaseException:
                conn.exec_driver_sql("ROLLBACK")
                raise
        return version
    with store.engine.begin() as conn:
        _lock(conn)
        return _apply_pending(conn)


def _apply_pending(conn: Connection) -> int:
    version = current_version(conn)
    applied = []
    for migration in MIGRATIONS:
        if migration.version > version:
            migration.apply(conn)
            version = migration.version
            applied.append(version)
            _set_version(conn, version)
    if applied and applied[-1] > ROW_SECURITY_FROM:
        _row_security(conn)
    return version


def _set_version(conn: Connection, version: int) -> None:
    from slurm_acme.store.schema.core import meta

    conn.execute(meta.delete().where(meta.c.key == VERSION_KEY))
    conn.execute(meta.insert().values(key=VERSION_KEY, value=str(version)))
