"""Plain SQL on a DB-API connection, written once for SQLite and Postgres.

Why: the commands people wait on at a prompt (``sacme status``, ``sacme
diagnose``) need a handful of simple queries, and SQLAlchemy costs them more
start-up than everything else they do. Their queries are written here in the
SQL both databases share, with ``?`` placeholders (``%s`` for psycopg), and
return rows as mappings of column name to value, as SQLAlchemy's do. Only the
store's query modules use it (:meth:`slurm_acme.store.engine.Store.reading`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def quoted(names: Iterable[str]) -> str:
    """A column list with each name quoted (``user`` is a keyword in Postgres)."""
    return ", ".join(f'"{name}"' for name in names)


class Db:
    """One borrowed DB-API connection of the ``dialect`` (``sqlite`` or ``postgresql``)."""

    def __init__(self, raw: Any, dialect: str) -> None:
        self.raw = raw
        self.dialect = dialect

    def _sql(self, sql: str) -> str:
        if self.dialect == "postgresql":
            if "%" in sql:
                raise ValueError("plain SQL must not contain '%' (psycopg placeholders)")
            return sql.replace("?", "%s")
        return sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement; the cursor."""
        cursor = self.raw.cursor()
        cursor.execute(self._sql(sql), tuple(params))
        return cursor

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        cursor = self.raw.cursor()
        cursor.executemany(self._sql(sql), [tuple(r) for r in rows])
        cursor.close()

    def insert(self, table: str, rows: Sequence[Mapping[str, Any]], *, ignore_conflicts_on: Sequence[str] = (),
               returning: str | None = None) -> Any:
        """Insert ``rows`` (mappings with the same keys). With ``returning``, one row and
        that column's new value; else the number of rows sent. ``ignore_conflicts_on``
        skips a row whose key is already stored (``ON CONFLICT (key) DO NOTHING``)."""
        if not rows:
            return 0
        names = list(rows[0])
        sql = f"INSERT INTO {table} ({quoted(names)}) VALUES ({', '.join('?' for _ in names)})"
        if ignore_conflicts_on:
            sql += f" ON CONFLICT ({quoted(ignore_conflicts_on)}) DO NOTHING"
        if returning is not None:
            if len(rows) != 1:
                raise ValueError("insert ... returning takes one row")
            return self.scalar(f"{sql} RETURNING {returning}", [rows[0][n] for n in names])
        self.executemany(sql, [[row[n] for n in names] for row in rows])
        return len(rows)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cursor = self.execute(sql, params)
        names = [d[0] for d in cursor.description]
        out = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        cursor.close()
        return out

    def first(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        cursor = self.execute(sql, params)
        row = cursor.fetchone()
        cursor.close()
        return row[0] if row else None

    def has_table(self, name: str) -> bool:
        """Whether ``name`` is a table this connection sees (Postgres: on its search path)."""
        if self.dialect == "postgresql":
            return self.scalar("SELECT to_regclass(?) IS NOT NULL", (name,)) is True
        return self.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)) == 1

    # Transactions. sqlite3's and psycopg's commit() and rollback() end whatever
    # transaction is open, whichever mode the connection is in; SQLite takes the
    # write lock first (BEGIN IMMEDIATE), so a writer queues on the busy timeout
    # rather than failing when it upgrades from reading.
    def begin(self) -> None:
        if self.dialect == "sqlite":
            self.raw.execute("BEGIN IMMEDIATE")
        elif self.raw.autocommit:
            self.raw.execute("BEGIN")

    def commit(self) -> None:
        self.raw.commit()

    def rollback(self) -> None:
        self.raw.rollback()

    def end_read(self) -> None:
        """Leave no transaction open after reading (a pooled connection opens them implicitly)."""
        if self.dialect == "sqlite" and self.raw.in_transaction:
            self.raw.rollback()
        elif self.dialect == "postgresql" and not self.raw.autocommit:
            self.raw.rollback()
