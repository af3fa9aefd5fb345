"""Telemetry queries: the node-local spool and the central store share these tables.

The spool is a :class:`Store` on a node-local SQLite file with the same schema
as the central store, so a flush is a copy of rows between two stores with
the same columns. Sample rows are keyed by (cluster, node, ts[, gpu_index])
and copied with insert-or-ignore, which makes every flush idempotent: a
collector killed between the central commit and its own watermark update
re-sends a batch and the store keeps one copy.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Float,
    Integer,
    LargeBinary,
    String,
    and_,
    case,
    delete,
    func,
    select,
    text,
    update,
)

from slurm_acme.store import partitions, rollup_rows
from slurm_acme.store.engine import Store, store_door
from slurm_acme.store.nodes import EVENT_KEY
from slurm_acme.store.rollups import GPU_KEY as GPU_HOUR_KEY
from slurm_acme.store.rollups import NODE_KEY as NODE_HOUR_KEY
from slurm_acme.store.rows import get_meta, set_meta, upsert
from slurm_acme.store.schema.nodes import node_events
from slurm_acme.store.schema.telemetry import (
    cluster_hourly,
    gpu_hourly,
    gpu_samples,
    job_nodes,
    job_summaries,
    node_hourly,
    node_samples,
)

GPU_KEY = ("cluster", "node", "ts", "gpu_index")
NODE_KEY = ("cluster", "node", "ts")
JOB_NODE_KEY = ("cluster", "job_id", "node")
_WATERMARK = "telemetry.spool.flushed.{}"
_SUMMED = ("gpu_util", "sm_active", "gpu_mem")


# ------------------------------------------------------------------ spool side

@store_door
def insert_tick(spool: Store, node_row: Mapping[str, Any], gpu_rows: Sequence[Mapping[str, Any]]) -> None:
    """One sampling tick and its share of the hourly rollups, committed as a
    unit (kill -9 loses at most this tick). A tick whose time stamp the spool
    already has is ignored whole, so it is never counted twice."""
    n = node_samples.c
    with spool.engine.begin() as conn:
        known = conn.execute(select(n.id).where(and_(
            n.cluster == node_row["cluster"], n.node == node_row["node"], n.ts == node_row["ts"]))).first()
        if known is not None:
            return
        upsert(conn, node_samples, [node_row], NODE_KEY, update=())
        upsert(conn, gpu_samples, list(gpu_rows), GPU_KEY, update=())
        rollup_rows.merge_tick(conn, gpu_rows, node_row)


@store_door
def record_start(spool: Store, row: Mapping[str, Any]) -> None:
    """A prolog mark: the job started on this node with these GPUs (a requeue restarts it)."""
    fields = {**row, "end_ts": None, "exit_code": None, "synced": 0}
    with spool.engine.begin() as conn:
        upsert(conn, job_nodes, [fields], JOB_NODE_KEY)


@store_door
def record_end(spool: Store, key: Mapping[str, str], end_ts: float, exit_code: int | None,
               partial: Mapping[str, Any]) -> None:
    """An epilog mark plus this node's share of the job summary."""
    row = {**key, "end_ts": end_ts, "exit_code": exit_code, **partial, "synced": 0}
    with spool.engine.begin() as conn:
        upsert(conn, job_nodes, [row], JOB_NODE_KEY)


@store_door
def job_node(spool: Store, cluster: str, job_id: str, node: str) -> dict[str, Any] | None:
    c = job_nodes.c
    with spool.engine.connect() as conn:
        row = conn.execute(select(job_nodes).where(and_(
            c.cluster == cluster, c.job_id == job_id, c.node == node))).first()
    return dict(row._mapping) if row else None


@store_door
def open_jobs(spool: Store, cluster: str, node: str) -> list[dict[str, Any]]:
    """Jobs whose prolog ran on ``node`` and whose epilog has not (yet)."""
    c = job_nodes.c
    with spool.engine.connect() as conn:
        rows = conn.execute(select(job_nodes).where(and_(
            c.cluster == cluster, c.node == node, c.end_ts.is_(None), c.start_ts.isnot(None))))
        return [dict(r._mapping) for r in rows]


@store_door
def node_share(spool: Store, cluster: str, node: str, job_id: str, start: float,
               end: float) -> dict[str, Any]:
    """SQL aggregates of one job's samples on one node, for its summary share."""
    g, n = gpu_samples.c, node_samples.c
    gpu_window = and_(g.cluster == cluster, g.node == node, g.job_id == job_id,
                      g.ts >= start, g.ts <= end)
    node_window = and_(n.cluster == cluster, n.node == node, n.ts >= start, n.ts <= end)
    sentinel = g.flags.like("%sentinel:%") | g.flags.like("%garbage:%")
    with spool.engine.connect() as conn:
        gpu = conn.execute(select(
            func.count(), func.sum(g.util_percent), func.count(g.util_percent), func.max(g.util_percent),
            func.sum(g.sm_active), func.count(g.sm_active), func.max(g.sm_active),
            func.sum(g.mem_used_bytes), func.count(g.mem_used_bytes), func.max(g.mem_used_bytes),
            func.sum(g.power_w), func.count(func.distinct(g.ts)),
            func.sum(case((sentinel, 1), else_=0)),
            func.max(g.source),
        ).where(gpu_window)).one()
        node_row = conn.execute(select(
            func.count(), func.sum(n.node_power_w), func.count(n.node_power_w),
        ).where(node_window)).one()
    return {"n_gpu_samples": int(gpu[0]), "gpu_util_sum": gpu[1], "gpu_util_n": int(gpu[2]),
            "gpu_util_max": gpu[3], "sm_active_sum": gpu[4], "sm_active_n": int(gpu[5]),
            "sm_active_max": gpu[6], "gpu_mem_sum": gpu[7], "gpu_mem_n": int(gpu[8]),
            "gpu_mem_max": gpu[9], "gpu_power_sum": gpu[10], "gpu_ticks": int(gpu[11]),
            "bad_values": int(gpu[12] or 0), "gpu_source": gpu[13],
            "n_node_samples": int(node_row[0]), "node_power_sum": node_row[1],
            "node_power_n": int(node_row[2])}


# ------------------------------------------------------------------ flush

@dataclass(frozen=True)
class FlushResult:
    gpu_rows: int = 0
    node_rows: int = 0
    job_rows: int = 0
    #: Hardware events sent to the node-health ledger.
    event_rows: int = 0

    def __add__(self, other: FlushResult) -> FlushResult:
        return FlushResult(self.gpu_rows + other.gpu_rows, self.node_rows + other.node_rows,
                           self.job_rows + other.job_rows, self.event_rows + other.event_rows)


def _watermark(conn: Connection, table: str) -> int:
    return int(get_meta(conn, _WATERMARK.format(table)) or 0)


@dataclass(frozen=True)
class SpoolBacklog:
    """How far a node spool is behind the central store (``sacme admin check``)."""

    #: Time of the newest node sample in the spool (None: never sampled).
    newest_ts: float | None
    #: Time of the oldest node sample not yet flushed (None: everything is flushed).
    oldest_unflushed_ts: float | None
    unflushed_rows: int


@store_door
def spool_backlog(spool: Store) -> SpoolBacklog:
    """The spool's newest sample and the oldest one above its flush watermark."""
    n = node_samples.c
    with spool.engine.connect() as conn:
        mark = _watermark(conn, node_samples.name)
        newest = conn.execute(select(func.max(n.ts))).scalar()
        oldest, count = conn.execute(select(func.min(n.ts), func.count()).where(n.id > mark)).one()
    return SpoolBacklog(newest, oldest, int(count or 0))


def _read_batch(spool: Store, last_id: str, query: str, after: int, batch: int) -> tuple[int | None, list]:
    """The spool's next ``batch`` rows after id ``after`` and the last id among them."""
    # The spool is SQLite: its own cursor hands back plain tuples of exactly
    # the columns sent (no SQLAlchemy rows, no per-row slicing off the id);
    # the batch's last id is asked separately, off the rowid alone.
    with spool.engine.connect() as sconn:
        raw = sconn.connection.driver_connection
        top = raw.execute(last_id, (after, batch)).fetchone()[0]  # type: ignore[union-attr]
        if top is None:
            return None, []
        return top, raw.execute(query, (after, top)).fetchall()  # type: ignore[union-attr]


def _copy_samples(spool: Store, central: Store, table, key: Sequence[str], batch: int) -> int:  # type: ignore[no-untyped-def]
    """Send rows above the spool's watermark in id order, one batch per transaction.

    A reader thread fetches the next batch from the spool while this one is
    copied and committed: reading the spool and the server's COPY are about
    equal halves of a flush's CPU, and this way they overlap instead of
    taking turns. The watermark moves only after each central commit, as
    before."""
    sent = 0
    names = [c.name for c in table.c if c.name != "id"]
    last_id = f'SELECT max(id) FROM (SELECT id FROM "{table.name}" WHERE id > ? ORDER BY id LIMIT ?)'
    query = (f'SELECT {", ".join(chr(34) + n + chr(34) for n in names)} FROM "{table.name}" '
             f"WHERE id > ? AND id <= ? ORDER BY id")
    with spool.engine.connect() as sconn:
        mark = _watermark(sconn, table.name)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="acme-spool-read") as reader:
        pending = reader.submit(_read_batch, spool, last_id, query, mark, batch)
        while True:
            top, rows = pending.result()
            if top is None:
                return sent
            pending = reader.submit(_read_batch, spool, last_id, query, top, batch)
            with central.engine.begin() as cconn:
                insert_ignore_tuples(cconn, table, names, rows, key)
            with spool.engine.begin() as sconn:
                set_meta(sconn, _WATERMARK.format(table.name), str(top))
            sent += len(rows)


def insert_ignore(conn: Connection, table, rows: Sequence[Mapping[str, Any]],  # type: ignore[no-untyped-def]
                  key: Sequence[str]) -> None:
    """Insert row dicts (same keys each), skipping those whose key exists."""
    if rows:
        columns = list(rows[0])
        insert_ignore_tuples(conn, table, columns, [tuple(r[c] for c in columns) for r in rows], key)


def insert_ignore_tuples(conn: Connection, table, columns: Sequence[str],  # type: ignore[no-untyped-def]
                         rows: Sequence[tuple], key: Sequence[str]) -> None:
    """Insert rows (tuples in ``columns`` order), skipping those whose key
    exists: binary COPY on Postgres, the driver's executemany of ``INSERT OR
    IGNORE`` on SQLite (no per-row statement compilation on either).

    COPY cannot skip duplicates: on Postgres a batch is copied straight in
    (into the day partitions it needs, created first) and only a batch that
    hits the unique key (one re-sent after a crash) is copied into a
    temporary table and moved with ``INSERT ... SELECT ... ON CONFLICT DO
    NOTHING``; so it still lands once.

    Binary COPY (each value packed by psycopg's C dumpers, read by the
    server's receive functions) costs the client and the server about a
    third of text COPY's CPU per row, and stores the same values (a float
    travels as its 8 bytes; text COPY relies on repr round-tripping). A
    value the binary dumper of its column cannot pack (a string in a float
    column of a hand-edited spool) sends that batch as text instead.
    """
    if not rows:
        return
    names = ", ".join(f'"{c}"' for c in columns)
    if conn.dialect.name != "postgresql":
        marks = ", ".join("?" for _ in columns)
        conn.exec_driver_sql(f'INSERT OR IGNORE INTO "{table.name}" ({names}) VALUES ({marks})', list(rows))
        return
    if "ts" in columns and is_partitioned_table(conn, table.name):
        i = list(columns).index("ts")
        stamps = [r[i] for r in rows]
        partitions.ensure_days(conn, table.name, float(min(stamps)), float(max(stamps)))
    from psycopg import DataError

    types = copy_types(table, columns)
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        # The common case, a batch never sent before: COPY straight into the
        # table. A re-sent batch trips the unique key; then, and only then,
        # the batch goes through a staging table and ON CONFLICT DO NOTHING.
        try:
            if _copy_new_rows(cursor, table.name, names, rows, types):
                return
        except (DataError, TypeError, ValueError, OverflowError):
            if types is None:
                raise
            cursor.execute("ROLLBACK TO SAVEPOINT acme_copy")
            types = None
            if _copy_new_rows(cursor, table.name, names, rows, None):
                return
        staging = f"acme_stage_{table.name}"
        cursor.execute(f'CREATE TEMP TABLE IF NOT EXISTS "{staging}" ON COMMIT DELETE ROWS '
                       f'AS SELECT {names} FROM "{table.name}" WITH NO DATA')
        _copy_rows(cursor, staging, names, rows, types)
        conflict = ", ".join(f'"{c}"' for c in key)
        cursor.execute(f'INSERT INTO "{table.name}" ({names}) SELECT {names} FROM "{staging}" '
                       f"ON CONFLICT ({conflict}) DO NOTHING")
    finally:
        cursor.close()


#: Postgres type of each column kind, for binary COPY (anything else: text
#: COPY). BigInteger before Integer, its base class.
_COPY_TYPES = ((BigInteger, "int8"), (Integer, "int4"), (Float, "float8"), (String, "text"),
               (LargeBinary, "bytea"))


def copy_types(table, columns: Sequence[str]) -> list[str] | None:  # type: ignore[no-untyped-def]
    """The binary COPY types of ``columns`` of ``table``; None if one has no binary mapping."""
    out = []
    for name in columns:
        column_type = table.c[name].type
        kind = next((pg for sa_type, pg in _COPY_TYPES if isinstance(column_type, sa_type)), None)
        if kind is None:
            return None
        out.append(kind)
    return out


def _copy_new_rows(cursor, target: str, names: str, rows: Sequence[tuple],  # type: ignore[no-untyped-def]
                   types: list[str] | None) -> bool:
    """COPY ``rows`` straight into ``target`` inside savepoint ``acme_copy``.

    True when they landed; False, rolled back to the savepoint, when one of them
    is already there (a re-sent batch: the caller goes through a staging table).
    Any other error leaves the savepoint open for the caller to roll back.
    """
    from psycopg.errors import UniqueViolation

    cursor.execute("SAVEPOINT acme_copy")
    try:
        _copy_rows(cursor, target, names, rows, types)
        cursor.execute("RELEASE SAVEPOINT acme_copy")
        return True
    except UniqueViolation:
        cursor.execute("ROLLBACK TO SAVEPOINT acme_copy")
        return False


def _copy_rows(cursor, target: str, names: str, rows: Sequence[tuple],  # type: ignore[no-untyped-def]
               types: list[str] | None) -> None:
    """One COPY of ``rows`` into ``target``: binary when ``types`` are known, else text."""
    binary = " (FORMAT BINARY)" if types is not None else ""
    with cursor.copy(f'COPY "{target}" ({names}) FROM STDIN{binary}') as copy:
        if types is not None:
            copy.set_types(types)
        for row in rows:
            copy.write_row(row)


@store_door
def flush(spool: Store, central: Store, *, batch: int, min_coverage: float) -> FlushResult:
    """Push everything the central store has not acknowledged; raises if it is down.

    Samples first, then job rows, so a job summary is computed over samples
    that are already central. A failure leaves the spool untouched past the
    last acknowledged batch.
    """
    gpu = _copy_samples(spool, central, gpu_samples, GPU_KEY, batch)
    node = _copy_samples(spool, central, node_samples, NODE_KEY, batch)
    events = _copy_samples(spool, central, node_events, EVENT_KEY, batch)
    _send_rollups(spool, central, batch)
    with spool.engine.connect() as sconn:
        pending = [dict(r._mapping) for r in sconn.execute(
            select(job_nodes).where(job_nodes.c.synced == 0))]
    for row in pending:
        _send_job_node(central, row, min_coverage)
        c = job_nodes.c
        with spool.engine.begin() as sconn:
            sconn.execute(update(job_nodes).where(and_(
                c.cluster == row["cluster"], c.job_id == row["job_id"], c.node == row["node"],
                func.coalesce(c.end_ts, -1.0) == (row["end_ts"] if row["end_ts"] is not None else -1.0),
            )).values(synced=1))
    return FlushResult(gpu, node, len(pending), events)


def _send_rollups(spool: Store, central: Store, batch: int) -> int:
    """Send the spool's changed rollup rows (whole rows; the central store
    moves its cluster totals by the difference), then mark them synced."""
    sent = 0
    limit = max(1, batch // 10)
    for table, key in ((gpu_hourly, GPU_HOUR_KEY), (node_hourly, NODE_HOUR_KEY)):
        while True:
            with spool.engine.connect() as sconn:
                rows = rollup_rows.unsynced(sconn, table, limit)
            if not rows:
                break
            with central.engine.begin() as cconn:
                if table is gpu_hourly:
                    rollup_rows.apply_rollups(cconn, rows, [])
                else:
                    rollup_rows.apply_rollups(cconn, [], rows)
            with spool.engine.begin() as sconn:
                rollup_rows.mark_synced(sconn, table, key, rows)
            sent += len(rows)
            if len(rows) < limit:
                break
    return sent


def _send_job_node(central: Store, row: Mapping[str, Any], min_coverage: float) -> None:
    """Upsert one node's job row and recompute the job's summary, serialised per job.

    The lock makes the last node to finish see every other node's committed
    share; without it two nodes ending together could each write a summary
    missing the other.
    """
    with central.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            lock = zlib.crc32(f"{row['cluster']}/{row['job_id']}".encode()) & 0x7FFFFFFF
            conn.execute(text("SELECT pg_advisory_xact_lock(716372, :k)"), {"k": lock})
        upsert(conn, job_nodes, [{**row, "synced": 1}], JOB_NODE_KEY)
        if row.get("end_ts") is not None:
            _write_summary(conn, row["cluster"], row["job_id"], min_coverage)


def _write_summary(conn: Connection, cluster: str, job_id: str, min_coverage: float) -> None:
    c = job_nodes.c
    shares = [dict(r._mapping) for r in conn.execute(
        select(job_nodes).where(and_(c.cluster == cluster, c.job_id == job_id)))]
    upsert(conn, job_summaries, [summarise(shares, min_coverage)], ["cluster", "job_id"])


def summarise(shares: Sequence[Mapping[str, Any]], min_coverage: float) -> dict[str, Any]:
    """Combine per-node shares into the job's summary (exact means from sums and counts)."""
    first = shares[0]
    ended = [s for s in shares if s.get("end_ts") is not None]
    flags: set[str] = set()
    for s in shares:
        flags.update(f for f in (s.get("flags") or "").split(",") if f)
    if len(ended) < len(shares):
        flags.add("nodes_still_running")

    def mean(prefix: str) -> float | None:
        n = sum(s.get(f"{prefix}_n") or 0 for s in shares)
        return sum(s.get(f"{prefix}_sum") or 0.0 for s in shares) / n if n else None

    def peak(prefix: str) -> float | None:
        values = [s[f"{prefix}_max"] for s in shares if s.get(f"{prefix}_max") is not None]
        return max(values) if values else None

    def total(name: str) -> float | None:
        values = [s[name] for s in shares if s.get(name) is not None]
        return sum(values) if values else None

    walltime = sum((s["end_ts"] - s["start_ts"]) for s in ended if s.get("start_ts") is not None)
    covered = sum(s.get("covered_s") or 0.0 for s in ended)
    coverage = min(1.0, covered / walltime) if walltime > 0 else 0.0
    if coverage < min_coverage:
        flags.add("low_coverage")
    starts = [s["start_ts"] for s in shares if s.get("start_ts") is not None]
    ends = [s["end_ts"] for s in ended]
    codes = [s["exit_code"] for s in ended if s.get("exit_code") is not None]
    gpus = sum(len([g for g in (s.get("gpu_indices") or "").split(",") if g]) for s in shares)
    return {
        "cluster": first["cluster"], "job_id": first["job_id"],
        "start_ts": min(starts) if starts else None, "end_ts": max(ends) if ends else None,
        "exit_code": max(codes, key=abs) if codes else None,
        "nodes": ",".join(sorted(s["node"] for s in shares)), "user": first.get("user"),
        "gpus": gpus, "gpu_util_mean": mean("gpu_util"), "gpu_util_max": peak("gpu_util"),
        "sm_active_mean": mean("sm_active"), "sm_active_max": peak("sm_active"),
        "gpu_mem_mean_bytes": mean("gpu_mem"), "gpu_mem_max_bytes": peak("gpu_mem"),
        "gpu_energy_j": total("gpu_energy_j"), "node_energy_j": total("node_energy_j"),
        "coverage": coverage, "n_gpu_samples": int(total("n_gpu_samples") or 0),
        "n_node_samples": int(total("n_node_samples") or 0),
        "flags": ",".join(sorted(flags)),
    }


# ------------------------------------------------------------------ retention

@store_door
def prune_flushed(spool: Store, before_ts: float) -> int:
    """Delete spool samples older than ``before_ts`` that the central store has."""
    removed = 0
    with spool.engine.begin() as conn:
        for table in (gpu_samples, node_samples):
            mark = _watermark(conn, table.name)
            removed += conn.execute(delete(table).where(and_(
                table.c.id <= mark, table.c.ts < before_ts))).rowcount or 0
        c = job_nodes.c
        removed += conn.execute(delete(job_nodes).where(and_(
            c.synced == 1, c.end_ts.isnot(None), c.end_ts < before_ts))).rowcount or 0
        for table in (gpu_hourly, node_hourly):
            removed += conn.execute(delete(table).where(and_(
                table.c.synced == 1, table.c.hour_ts < before_ts - 3600))).rowcount or 0
    return removed


_partitioned: dict[tuple[str, str], bool] = {}


def is_partitioned_table(conn: Connection, table: str) -> bool:
    """Whether ``table`` is day-partitioned here (asked once per database)."""
    key = (str(conn.engine.url), table)
    if key not in _partitioned:
        _partitioned[key] = conn.dialect.name == "postgresql" and partitions.is_partitioned(conn, table)
    return _partitioned[key]


@dataclass(frozen=True)
class PruneResult:
    rows: int = 0
    partitions: int = 0
    before_ts: float = 0.0


@store_door
def prune_raw(store: Store, before_ts: float, *, batch: int = 20000,
              max_batches: int | None = None) -> PruneResult:
    """Retention of raw samples: everything of the UTC days wholly before
    ``before_ts`` goes (rollups, summaries and job rows stay). Postgres drops
    whole day partitions; SQLite deletes ``batch`` rows per transaction, at
    most ``max_batches`` per table (None: until done), so a flush never waits
    for more than one batch."""
    cut = partitions.day_of(before_ts)
    with store.engine.connect() as conn:
        partitioned = is_partitioned_table(conn, gpu_samples.name)
    if partitioned:
        dropped, rows = partitions.drop_old_partitions(store.engine, cut)
        return PruneResult(rows, dropped, cut)
    return PruneResult(partitions.delete_old_rows(store.engine, cut, batch=batch, max_batches=max_batches),
                       0, cut)


def prune_samples(store: Store, before_ts: float) -> int:
    """Every raw sample of the days before ``before_ts``; how many went."""
    return prune_raw(store, before_ts).rows


@store_door
def copy_all(spool: Store, target: Store, *, batch: int, min_coverage: float) -> FlushResult:
    """Send every row the spool still holds to another store (idempotent backfill)."""
    sent = FlushResult()
    for table, key in ((gpu_samples, GPU_KEY), (node_samples, NODE_KEY)):
        columns = [c for c in table.c if c.name != "id"]
        last = 0
        while True:
            with spool.engine.connect() as sconn:
                rows = sconn.execute(select(table.c.id, *columns).where(table.c.id > last)
                                     .order_by(table.c.id).limit(batch)).all()
            if not rows:
                break
            with target.engine.begin() as tconn:
                insert_ignore_tuples(tconn, table, [c.name for c in columns], [tuple(r)[1:] for r in rows], key)
            last = rows[-1][0]
            sent = sent + (FlushResult(gpu_rows=len(rows)) if table is gpu_samples
                           else FlushResult(node_rows=len(rows)))
    for table in (gpu_hourly, node_hourly):
        with spool.engine.connect() as sconn:
            rollups = [dict(r._mapping) for r in sconn.execute(select(table))]
        for i in range(0, len(rollups), 500):
            with target.engine.begin() as tconn:
                chunk = rollups[i:i + 500]
                rollup_rows.apply_rollups(tconn, chunk if table is gpu_hourly else [],
                                          chunk if table is node_hourly else [])
    with spool.engine.connect() as sconn:
        jobs = [dict(r._mapping) for r in sconn.execute(select(job_nodes))]
    for row in jobs:
        _send_job_node(target, row, min_coverage)
    return sent + FlushResult(job_rows=len(jobs))


# ------------------------------------------------------------------ reading back

@store_door
def job_summary(store: Store, cluster: str, job_id: str) -> dict[str, Any] | None:
    c = job_summaries.c
    with store.engine.connect() as conn:
        row = conn.execute(select(job_summaries).where(and_(
            c.cluster == cluster, c.job_id == job_id))).first()
    return dict(row._mapping) if row else None


@store_door
def job_rows(store: Store, cluster: str, job_id: str) -> dict[str, list[dict[str, Any]]]:
    """Everything the store holds about one job: node rows, node and GPU samples."""
    jn, g, n = job_nodes.c, gpu_samples.c, node_samples.c
    with store.engine.connect() as conn:
        nodes = [dict(r._mapping) for r in conn.execute(
            select(job_nodes).where(and_(jn.cluster == cluster, jn.job_id == job_id)))]
        gpus: list[dict[str, Any]] = []
        samples: list[dict[str, Any]] = []
        for row in nodes:  # by (cluster, node, ts): the unique key, the only index raw samples keep
            if row["start_ts"] is None:
                continue
            end = row["end_ts"] if row["end_ts"] is not None else float("inf")
            gpus += [dict(r._mapping) for r in conn.execute(
                select(gpu_samples).where(and_(g.cluster == cluster, g.node == row["node"],
                                               g.ts >= row["start_ts"], g.ts <= end, g.job_id == job_id))
                .order_by(g.ts, g.gpu_index))]
            samples += [dict(r._mapping) for r in conn.execute(
                select(node_samples).where(and_(n.cluster == cluster, n.node == row["node"],
                                                n.ts >= row["start_ts"], n.ts <= end)))]
        gpus.sort(key=lambda r: (r["node"], r["ts"], r["gpu_index"]))
    return {"job_nodes": nodes, "gpu_samples": gpus, "node_samples": samples}


@store_door
def count_rows(store: Store, cluster: str | None = None) -> dict[str, int]:
    """Row counts per telemetry table (for `collectd status` and tests)."""
    out = {}
    with store.engine.connect() as conn:
        for table in (gpu_samples, node_samples, job_nodes, job_summaries, gpu_hourly, node_hourly,
                      cluster_hourly):
            q = select(func.count()).select_from(table)
            if cluster is not None:
                q = q.where(table.c.cluster == cluster)
            out[table.name] = int(conn.execute(q).scalar_one())
    return out


@store_door
def recent_summaries(store: Store, limit: int = 20, job_ids: Iterable[str] | None = None,
                     user: str | None = None) -> list[dict[str, Any]]:
    """The newest per-job summaries (of ``user``'s jobs only when given)."""
    q = select(job_summaries).order_by(job_summaries.c.end_ts.desc()).limit(limit)
    if job_ids is not None:
        q = q.where(job_summaries.c.job_id.in_(list(job_ids)))
    if user is not None:
        q = q.where(job_summaries.c.user == user)
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


# ------------------------------------------------------------------ imported telemetry

@store_door
def import_rollups(store: Store, gpu_rows: Sequence[Mapping[str, Any]],
                   node_rows: Sequence[Mapping[str, Any]] = ()) -> int:
    """Rollups of whole hours of samples read elsewhere (Prometheus), written
    whole like a flush's, so importing an hour again replaces it."""
    from slurm_acme.store.rollups import gpu_rollups, node_rollups

    gpu = [r.columns(GPU_HOUR_KEY) for r in gpu_rollups(gpu_rows).values()]
    node = [r.columns(NODE_HOUR_KEY) for r in node_rollups(node_rows, gpu_rows).values()]
    with store.engine.begin() as conn:
        return rollup_rows.apply_rollups(conn, gpu, node)


@store_door
def write_summaries(store: Store, rows: Sequence[Mapping[str, Any]]) -> None:
    """Upsert per-job summaries computed elsewhere (the Prometheus import)."""
    with store.engine.begin() as conn:
        for row in rows:
            upsert(conn, job_summaries, [dict(row)], ["cluster", "job_id"])
