"""Dialect-aware bulk writes shared by every domain: upsert and key/value facts;
and the pieces the plain-SQL readers share (column lists, newest rows).

SQLAlchemy is imported by the functions that use it, so a plain-SQL reader
(``sacme status``) that imports this module does not pay for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from slurm_acme.store.dbapi import Db, quoted

if TYPE_CHECKING:
    from sqlalchemy import Connection, Table
    from sqlalchemy.dialects import postgresql, sqlite


def upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    key: Sequence[str],
    *,
    update: Iterable[str] | None = None,
    grow_only: Iterable[str] = (),
) -> int:
    """Insert ``rows``; on a clash of ``key`` update the other columns.

    ``update=()`` means insert-or-ignore. A ``grow_only`` column keeps the larger
    of the stored and the new value (a count that one source's view can only
    understate, never lower). Returns the number of rows sent.
    Idempotent re-runs of ingest and import rely on this.
    """
    if not rows:
        return 0
    from sqlalchemy import func

    stmt = _dialect_insert(conn.dialect.name, table)
    columns = list(update) if update is not None else [c for c in rows[0] if c not in key]
    if columns:
        larger = func.greatest if conn.dialect.name == "postgresql" else func.max  # SQLite's 2-argument max
        growing = set(grow_only)
        stmt = stmt.on_conflict_do_update(
            index_elements=list(key),
            set_={c: (larger(func.coalesce(table.c[c], stmt.excluded[c]), func.coalesce(stmt.excluded[c], table.c[c]))
                      if c in growing else stmt.excluded[c]) for c in columns}
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(key))
    conn.execute(stmt, list(rows))
    return len(rows)


def _dialect_insert(dialect: str, table: Table) -> postgresql.Insert | sqlite.Insert:
    """The dialect's own INSERT, the one with ``ON CONFLICT`` (core ``insert`` has none).

    Each dialect is imported when first used: Postgres's costs a SQLite
    command a tenth of a second of start-up."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    if dialect == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)
    raise NotImplementedError(f"upsert on {dialect}")  # pragma: no cover - only the two supported backends


def get_meta(conn: Connection, key: str) -> str | None:
    from sqlalchemy import select

    from slurm_acme.store.schema.core import meta

    row = conn.execute(select(meta.c.value).where(meta.c.key == key)).first()
    return row[0] if row else None


def set_meta(conn: Connection, key: str, value: str) -> None:
    from slurm_acme.store.schema.core import meta

    upsert(conn, meta, [{"key": key, "value": value}], ["key"])


def columns_of(record: type) -> str:
    """The quoted column list of a row record (a dataclass whose fields are columns)."""
    return quoted(f.name for f in fields(record))


def newest_rows(db: Db, table: str, columns: str, *, limit: int, user: str | None) -> list[dict[str, Any]]:
    """The ``limit`` newest rows of ``table`` by ``created_ts``, of ``user`` only when given
    (the listings of training runs and of evaluations: `sacme status`, `seval status`)."""
    mine = ' WHERE "user" = ?' if user is not None else ""
    params: tuple[Any, ...] = (user, int(limit)) if user is not None else (int(limit),)
    return db.rows(f"SELECT {columns} FROM {table}{mine} ORDER BY created_ts DESC LIMIT ?", params)
