"""Raw samples at site scale: day partitions on Postgres, bounded deletes on SQLite.

A 4,704-GPU site writes about 27 M GPU samples a day. On Postgres
``gpu_samples`` and ``node_samples`` are declaratively partitioned by range of
``ts``, one partition per UTC day (``gpu_samples_d20230701``), created ahead of
the rows that need them; retention detaches and drops whole partitions
(``DETACH PARTITION ... CONCURRENTLY`` under a short ``lock_timeout``, so it
never makes a flush wait). Each partition keeps only the unique key the
idempotent insert needs: nothing reads raw samples but per-job lookups on
(cluster, node, ts), which that key serves. On SQLite retention deletes in
bounded batches, one short transaction each.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

from sqlalchemy import Connection, Table, text

from slurm_acme.store.schema.telemetry import gpu_samples, node_samples

DAY_S = 86400.0
RAW_TABLES: tuple[Table, ...] = (gpu_samples, node_samples)
#: The unique key of each raw table (ON CONFLICT target of the idempotent insert).
UNIQUE = {"gpu_samples": ("cluster", "node", "ts", "gpu_index"), "node_samples": ("cluster", "node", "ts")}
_PARTITION_LOCK = 716374
#: Partitions this process knows exist (created or seen), by name.
_known: set[str] = set()


def day_of(ts: float) -> float:
    return math.floor(ts / DAY_S) * DAY_S


def partition_name(table: str, day_ts: float) -> str:
    return f"{table}_d{datetime.fromtimestamp(day_ts, timezone.utc):%Y%m%d}"


def is_partitioned(conn: Connection, table: str) -> bool:
    row = conn.execute(text("SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "WHERE c.relname = :t AND n.nspname = current_schema()"), {"t": table}).first()
    return row is not None and row[0] == "p"


def ensure_days(conn: Connection, table: str, first_ts: float, last_ts: float) -> None:
    """Create the day partitions of ``table`` covering ``[first_ts, last_ts]``
    (Postgres; a no-op elsewhere). Serialised by an advisory lock."""
    if conn.dialect.name != "postgresql":
        return
    day, last = day_of(first_ts), day_of(last_ts)
    wanted = []
    while day <= last:
        name = partition_name(table, day)
        if name not in _known:
            wanted.append((name, day))
        day += DAY_S
    if not wanted:
        return
    conn.execute(text("SELECT pg_advisory_xact_lock(:c, :k)"), {"c": _PARTITION_LOCK, "k": len(table)})
    for name, day in wanted:
        conn.execute(text(f'CREATE TABLE IF NOT EXISTS "{name}" PARTITION OF "{table}" '
                          f"FOR VALUES FROM ({day!r}) TO ({day + DAY_S!r})"))
        _known.add(name)


def partition_raw_tables(conn: Connection) -> None:
    """Migration: turn the plain raw-sample tables into day-partitioned ones
    (Postgres only), moving any rows they hold."""
    if conn.dialect.name != "postgresql":
        return
    for table in RAW_TABLES:
        name = table.name
        if is_partitioned(conn, name):
            continue
        legacy = f"{name}_unpartitioned"
        cols = ", ".join(f'"{c.name}"' for c in table.c if c.name != "id")
        conn.execute(text(f'ALTER TABLE "{name}" RENAME TO "{legacy}"'))
        conn.execute(text(f'CREATE TABLE "{name}" (LIKE "{legacy}") PARTITION BY RANGE (ts)'))
        conn.execute(text(f'ALTER TABLE "{name}" ALTER COLUMN id DROP NOT NULL'))
        key = ", ".join(f'"{c}"' for c in UNIQUE[name])
        conn.execute(text(f'ALTER TABLE "{name}" ADD CONSTRAINT "uq_{name}_key" UNIQUE ({key})'))
        lo, hi = conn.execute(text(f'SELECT min(ts), max(ts) FROM "{legacy}"')).one()
        if lo is not None:
            ensure_days(conn, name, float(lo), float(hi))
            conn.execute(text(f'INSERT INTO "{name}" ({cols}) SELECT {cols} FROM "{legacy}"'))
        conn.execute(text(f'DROP TABLE "{legacy}"'))
    _known.clear()


def _old_partitions(conn: Connection, table: str, before_ts: float) -> list[str]:
    rows = conn.execute(text(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = :t"), {"t": table}).all()
    out = []
    for (name,) in rows:
        try:
            day = datetime.strptime(name.rsplit("_d", 1)[1], "%Y%m%d").replace(tzinfo=timezone.utc).timestamp()
        except (IndexError, ValueError):
            continue
        if day + DAY_S <= before_ts:
            out.append(name)
    return sorted(out)


def drop_old_partitions(engine: object, before_ts: float, *, lock_timeout_ms: int = 2000) -> tuple[int, int]:
    """Detach and drop every day partition wholly before ``before_ts``; one
    that cannot get its lock within ``lock_timeout_ms`` is left for the next
    run, and so is everything while another process prunes. Returns how many
    partitions and rows were dropped."""
    from sqlalchemy.exc import OperationalError

    dropped = rows = 0
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:  # type: ignore[attr-defined]
        if not conn.execute(text("SELECT pg_try_advisory_lock(:c, 0)"), {"c": _PARTITION_LOCK}).scalar():
            return 0, 0  # another pruner is at it
        try:
            conn.execute(text(f"SET lock_timeout = {int(lock_timeout_ms)}"))
            for table in RAW_TABLES:
                for name in _old_partitions(conn, table.name, before_ts):
                    count = int(conn.execute(text(f'SELECT count(*) FROM "{name}"')).scalar_one())
                    try:
                        conn.execute(text(f'ALTER TABLE "{table.name}" DETACH PARTITION "{name}" CONCURRENTLY'))
                    except OperationalError:
                        continue  # busy: next run
                    conn.execute(text(f'DROP TABLE IF EXISTS "{name}"'))
                    _known.discard(name)
                    dropped += 1
                    rows += count
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:c, 0)"), {"c": _PARTITION_LOCK})
    return dropped, rows


def delete_old_rows(engine: object, before_ts: float, *, batch: int, max_batches: int | None) -> int:
    """SQLite: delete raw rows older than ``before_ts``, ``batch`` rows per
    transaction, at most ``max_batches`` transactions per table (None: all)."""
    removed = 0
    for table in RAW_TABLES:
        done = 0
        while max_batches is None or done < max_batches:
            with engine.begin() as conn:  # type: ignore[attr-defined]
                n = conn.execute(text(
                    f'DELETE FROM "{table.name}" WHERE rowid IN (SELECT rowid FROM "{table.name}" '
                    f"WHERE ts < :cut LIMIT :n)"), {"cut": before_ts, "n": batch}).rowcount or 0
            removed += n
            done += 1
            if n < batch:
                break
    return removed
