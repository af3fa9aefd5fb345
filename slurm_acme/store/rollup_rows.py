"""Reading and writing the hourly rollup tables (format: :mod:`slurm_acme.store.rollups`).

Three writers, one rule: a ``gpu_hourly`` or ``node_hourly`` row is always
written *whole* (it replaces what was there), and ``cluster_hourly`` gets the
difference between the new row and the one replaced. So re-sending a row
(a flush retried after a crash, ``collectd flush --all`` over a spool that was
already flushed, a Prometheus import run twice) changes nothing.

- the node spool merges every sampling tick into its own rows
  (:func:`merge_tick`), marking them unsynced;
- a flush sends the unsynced rows to the central store (:func:`apply_rollups`);
- :func:`rebuild_from_samples` rebuilds hours from the raw samples a store
  still holds (stores written before the rollups existed, backfills).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam, func, select, text, true, tuple_, update

from slurm_acme.store.rollups import (
    GPU_KEY,
    GPU_METRICS,
    METRICS,
    NODE_KEY,
    NODE_METRICS,
    SERVER_METRICS,
    BinSpec,
    Distribution,
    Hist,
    RollupRow,
    decode,
    encode,
    gpu_rollups,
    hour_of,
    merged,
    node_rollups,
    sum_blobs,
)
from slurm_acme.store.rows import set_meta, upsert
from slurm_acme.store.schema.telemetry import (
    cluster_hourly,
    gpu_hourly,
    gpu_samples,
    node_hourly,
    node_samples,
)

_KINDS: tuple[tuple[Table, tuple[str, ...], tuple[BinSpec, ...]], ...] = (
    (gpu_hourly, GPU_KEY, GPU_METRICS),
    (node_hourly, NODE_KEY, NODE_METRICS),
)
#: Postgres advisory lock class for rollup writers of one (cluster, node).
_NODE_LOCK = 716373


def _key_cond(table: Table, key_names: Sequence[str], keys: Sequence[tuple]) -> Any:
    return tuple_(*[table.c[k] for k in key_names]).in_(list(keys))


def _existing(conn: Connection, table: Table, key_names: Sequence[str], specs: Sequence[BinSpec],
              keys: Sequence[tuple]) -> dict[tuple, RollupRow]:
    out: dict[tuple, RollupRow] = {}
    for i in range(0, len(keys), 400):
        chunk = keys[i:i + 400]
        for r in conn.execute(select(table).where(_key_cond(table, key_names, chunk))):
            row = RollupRow.from_row(dict(r._mapping), key_names, specs)
            out[row.key] = row
    return out


def _write(conn: Connection, table: Table, key_names: Sequence[str], rows: Iterable[RollupRow],
           synced: int) -> None:
    payload = [{**row.columns(key_names), "synced": synced} for row in rows]
    for i in range(0, len(payload), 500):
        upsert(conn, table, payload[i:i + 500], list(key_names))


# ------------------------------------------------------------------ spool side

def merge_tick(conn: Connection, gpu_rows: Sequence[Mapping[str, Any]], node_row: Mapping[str, Any]) -> None:
    """Add one sampling tick to the spool's rollup rows (same transaction as the samples)."""
    for table, key_names, specs, fresh in (
        (gpu_hourly, GPU_KEY, GPU_METRICS, gpu_rollups(gpu_rows)),
        (node_hourly, NODE_KEY, NODE_METRICS, node_rollups([node_row], gpu_rows)),
    ):
        if not fresh:
            continue
        rows = _existing(conn, table, key_names, specs, list(fresh))
        for key, row in fresh.items():
            if key in rows:
                rows[key].merge(row)
            else:
                rows[key] = row
        _write(conn, table, key_names, rows.values(), synced=0)


def unsynced(conn: Connection, table: Table, limit: int) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(
        select(table).where(table.c.synced == 0).limit(limit))]


def mark_synced(conn: Connection, table: Table, key_names: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
    """Mark rows synced unless a tick changed them since they were read (one
    statement, executed for every row)."""
    if not rows:
        return
    conds = [table.c[k] == bindparam(f"key_{k}") for k in key_names]
    stmt = update(table).where(and_(*conds, table.c.samples == bindparam("key_samples"))).values(synced=1)
    conn.execute(stmt, [{**{f"key_{k}": row[k] for k in key_names}, "key_samples": row["samples"]}
                        for row in rows])


# ------------------------------------------------------------------ central side

def _lock_nodes(conn: Connection, nodes: Iterable[tuple[str, str]]) -> None:
    """Serialise rollup writers of the same node (two flushers of one spool).

    Postgres: an advisory lock per (cluster, node), taken in the order of
    their lock keys, all in one statement (``unnest`` hands the sorted array
    out in order). SQLite: a write first, so this transaction holds the
    write lock before it reads the rows it replaces."""
    if conn.dialect.name == "postgresql":
        keys = sorted({zlib.crc32(f"{cluster}/{node}".encode()) & 0x7FFFFFFF for cluster, node in set(nodes)})
        conn.execute(text("SELECT count(pg_advisory_xact_lock(:c, k)) FROM unnest(CAST(:keys AS int[])) AS k"),
                     {"c": _NODE_LOCK, "keys": keys})
    else:
        set_meta(conn, "telemetry.rollups.writer", "1")


class _Delta:
    """One ``cluster_hourly`` cell's change: count, sum and samples as
    numbers, the histogram as the signed blobs (and dense counts) to add up
    once at the end (:func:`~slurm_acme.store.rollups.sum_blobs`)."""

    __slots__ = ("blobs", "dense", "n", "samples", "spec", "total")

    def __init__(self, spec: BinSpec) -> None:
        self.spec = spec
        self.n = 0
        self.total = 0.0
        self.samples = 0
        self.blobs: list[tuple[bytes, int]] = []
        self.dense = 0

    def add(self, row: Mapping[Any, Any], name: str, sign: int) -> None:
        self.n += sign * int(row.get(f"{name}_n") or 0)
        self.total += sign * float(row.get(f"{name}_sum") or 0.0)
        self.samples += sign * int(row.get("samples") or 0)
        blob = row.get(f"{name}_hist")
        if blob:
            self.blobs.append((blob, sign))

    def hist(self) -> Hist:
        counts = sum_blobs(self.blobs, self.spec.bins)
        counts[0] += self.dense
        return Hist(self.spec, self.n, self.total, counts)


def _whole_row(row: Mapping[str, Any], key_names: Sequence[str], specs: Sequence[BinSpec],
               synced: int) -> dict[str, Any]:
    """The row as written: its key, counts and sums (missing ones 0), blobs as given."""
    out: dict[str, Any] = {k: row[k] for k in key_names}
    out["samples"] = int(row.get("samples") or 0)
    for spec in specs:
        name = spec.name
        blob = row.get(f"{name}_hist")
        out[f"{name}_n"] = int(row.get(f"{name}_n") or 0)
        out[f"{name}_sum"] = float(row.get(f"{name}_sum") or 0.0)
        out[f"{name}_hist"] = bytes(blob) if blob else b""
    if "gpu_index" not in key_names:
        out["gpu_power_sum"] = float(row.get("gpu_power_sum") or 0.0)
        out["gpu_power_ticks"] = int(row.get("gpu_power_ticks") or 0)
    out["synced"] = synced
    return out


def apply_rollups(conn: Connection, gpu_rows: Sequence[Mapping[str, Any]],
                  node_rows: Sequence[Mapping[str, Any]]) -> int:
    """Replace these rollup rows and move ``cluster_hourly`` by the difference.

    Rows are dicts with every column of their table (as :func:`unsynced`
    returns them). Returns how many rows were written. The rows are written
    as given (their blobs are not decoded and encoded again); the cluster
    deltas add every new row and take away the row it replaces, in row order."""
    if not gpu_rows and not node_rows:
        return 0
    _lock_nodes(conn, [(r["cluster"], r["node"]) for r in (*gpu_rows, *node_rows)])
    deltas: dict[tuple[str, float, str], _Delta] = {}
    for (table, key_names, specs), rows in zip(_KINDS, (gpu_rows, node_rows), strict=True):
        if not rows:
            continue
        new = {tuple(r[k] for k in key_names): r for r in rows}
        old = _existing_rows(conn, table, key_names, list(new))
        hour_at = key_names.index("hour_ts")
        for key, row in new.items():
            before = old.get(key)
            cluster, hour = key[0], key[hour_at]
            for spec in specs:
                cell = deltas.get((cluster, hour, spec.name))
                if cell is None:
                    cell = deltas[(cluster, hour, spec.name)] = _Delta(spec)
                cell.add(row, spec.name, 1)
                if before is not None:
                    cell.add(before, spec.name, -1)
            if table is node_hourly:
                _server_delta(deltas, cluster, hour, row, 1)
                if before is not None:
                    _server_delta(deltas, cluster, hour, before, -1)
        payload = [_whole_row(row, key_names, specs, 1) for row in new.values()]
        for i in range(0, len(payload), 500):
            upsert(conn, table, payload[i:i + 500], list(key_names))
    _add_to_cluster(conn, {k: [d.hist(), d.samples] for k, d in deltas.items()})
    return len(gpu_rows) + len(node_rows)


def _existing_rows(conn: Connection, table: Table, key_names: Sequence[str],
                   keys: Sequence[tuple]) -> dict[tuple, Mapping[Any, Any]]:
    out: dict[tuple, Mapping[Any, Any]] = {}
    for i in range(0, len(keys), 400):
        for r in conn.execute(select(table).where(_key_cond(table, key_names, keys[i:i + 400]))):
            m = r._mapping
            out[tuple(m[k] for k in key_names)] = m
    return out


def _server_delta(deltas: dict, cluster: str, hour: float, row: Mapping[Any, Any], sign: int) -> None:
    """A node-hour's part of the GPU share of server power (when it has both)."""
    ticks = int(row.get("gpu_power_ticks") or 0)
    power_n = int(row.get("node_power_n") or 0)
    if not (ticks and power_n):
        return
    means = (float(row.get("gpu_power_sum") or 0.0) / ticks, float(row.get("node_power_sum") or 0.0) / power_n)
    for spec, mean in zip(SERVER_METRICS, means, strict=True):
        cell = deltas.get((cluster, hour, spec.name))
        if cell is None:
            cell = deltas[(cluster, hour, spec.name)] = _Delta(spec)
        cell.n += sign
        cell.total += sign * mean
        cell.dense += sign


def server_totals_from_nodes(conn: Connection) -> None:
    """Rebuild the ``server_*`` rows of ``cluster_hourly`` from ``node_hourly``
    (stores whose cluster rows were built before those rows existed)."""
    c = cluster_hourly.c
    conn.execute(cluster_hourly.delete().where(c.metric.in_([m.name for m in SERVER_METRICS])))
    deltas: dict[tuple[str, float, str], _Delta] = {}
    for r in conn.execute(select(node_hourly)):
        m = r._mapping
        _server_delta(deltas, m["cluster"], m["hour_ts"], m, 1)
    _add_to_cluster(conn, {k: [d.hist(), d.samples] for k, d in deltas.items()})


def _add_to_cluster(conn: Connection, deltas: Mapping[tuple[str, float, str], list]) -> None:
    keys = sorted(k for k, (hist, samples) in deltas.items() if hist.n or samples or hist.total)
    if not keys:
        return
    c = cluster_hourly.c
    empty = [{"cluster": k[0], "hour_ts": k[1], "metric": k[2], "n": 0, "sum": 0.0, "hist": b"", "samples": 0}
             for k in keys]
    for i in range(0, len(empty), 500):
        upsert(conn, cluster_hourly, empty[i:i + 500], ["cluster", "hour_ts", "metric"], update=())
    rows = []
    for i in range(0, len(keys), 400):
        q = select(cluster_hourly).where(tuple_(c.cluster, c.hour_ts, c.metric).in_(keys[i:i + 400]))
        if conn.dialect.name == "postgresql":
            q = q.order_by(c.cluster, c.hour_ts, c.metric).with_for_update()
        for r in conn.execute(q):
            m = r._mapping
            hist, samples = deltas[(m["cluster"], m["hour_ts"], m["metric"])]
            counts = decode(m["hist"], hist.spec.bins) + hist.counts
            rows.append({"cluster": m["cluster"], "hour_ts": m["hour_ts"], "metric": m["metric"],
                         "n": int(m["n"]) + hist.n, "sum": float(m["sum"]) + hist.total,
                         "hist": encode(counts), "samples": int(m["samples"]) + samples})
    for i in range(0, len(rows), 500):
        upsert(conn, cluster_hourly, rows[i:i + 500], ["cluster", "hour_ts", "metric"])


def _sample_span(conn: Connection, cluster: str | None) -> tuple[float, float] | None:
    spans = []
    for table in (gpu_samples, node_samples):
        q = select(func.min(table.c.ts), func.max(table.c.ts))
        if cluster is not None:
            q = q.where(table.c.cluster == cluster)
        lo, hi = conn.execute(q).one()
        if lo is not None:
            spans.append((float(lo), float(hi)))
    if not spans:
        return None
    return min(s[0] for s in spans), max(s[1] for s in spans)


def rebuild_window(conn: Connection, start: float, end: float, cluster: str | None = None) -> int:
    """Rebuild the rollups of the hours in ``[start, end)`` (hour-aligned) from raw samples."""
    g, n = gpu_samples.c, node_samples.c
    gconds = [g.ts >= start, g.ts < end] + ([g.cluster == cluster] if cluster else [])
    nconds = [n.ts >= start, n.ts < end] + ([n.cluster == cluster] if cluster else [])
    grows = [dict(r._mapping) for r in conn.execute(select(gpu_samples).where(and_(*gconds)))]
    nrows = [dict(r._mapping) for r in conn.execute(select(node_samples).where(and_(*nconds)))]
    gpu = [r.columns(GPU_KEY) for r in gpu_rollups(grows).values()]
    node = [r.columns(NODE_KEY) for r in node_rollups(nrows, grows).values()]
    return apply_rollups(conn, gpu, node)


def rebuild_windows(conn: Connection, *, cluster: str | None = None, since: float | None = None,
                    until: float | None = None, window_s: float = 6 * 3600.0) -> list[tuple[float, float]]:
    """Hour-aligned windows covering the raw samples held (within ``[since, until)``)."""
    span = _sample_span(conn, cluster)
    if span is None:
        return []
    lo = hour_of(span[0] if since is None else max(span[0], since))
    hi = span[1] if until is None else min(span[1], until - 1e-6)
    out, start = [], lo
    while start <= hi:
        out.append((start, start + window_s))
        start += window_s
    return out


def rebuild_from_samples(store: Any, *, cluster: str | None = None, since: float | None = None,
                         until: float | None = None, window_s: float = 6 * 3600.0) -> int:
    """(Re)build the rollups of every hour that raw samples exist for, from
    those samples; one transaction per window of hours. Hours without raw
    samples keep their rollups. Returns how many rollup rows were written."""
    with store.engine.connect() as conn:
        windows = rebuild_windows(conn, cluster=cluster, since=since, until=until, window_s=window_s)
    written = 0
    for start, end in windows:
        with store.engine.begin() as conn:
            written += rebuild_window(conn, start, end, cluster)
    return written


# ------------------------------------------------------------------ report side

@dataclass(frozen=True)
class RolledTelemetry:
    """What the utilisation and power sections need, read off the rollups:
    one merged distribution per metric, sample counts, and the summed hourly
    mean GPU and server draws of the node-hours that have both."""

    gpu_samples: int
    node_samples: int
    distributions: dict[str, Distribution]
    #: Summed over node-hours with both: mean GPU draw and mean server draw (None: no such node-hour).
    server_gpu_w: float | None
    server_w: float | None


def _hour_conds(table: Table, cluster: str | None, since: float | None, until: float | None) -> list[Any]:
    conds = []
    if cluster is not None:
        conds.append(table.c.cluster == cluster)
    if since is not None:
        conds.append(table.c.hour_ts >= since)
    if until is not None:
        conds.append(table.c.hour_ts < until)
    return conds


def cluster_telemetry(conn: Connection, cluster: str | None, since: float | None,
                      until: float | None) -> RolledTelemetry:
    """Whole-cluster figures of the hours starting in ``[since, until)``."""
    c = cluster_hourly.c
    parts: dict[str, list] = defaultdict(list)
    samples: dict[str, int] = defaultdict(int)
    for metric, n, total, blob, count in conn.execute(
            select(c.metric, c.n, c.sum, c.hist, c.samples)
            .where(and_(true(), *_hour_conds(cluster_hourly, cluster, since, until)))):
        parts[metric].append((n, total, blob))
        samples[metric] += int(count or 0)
    dists = {name: merged(spec, parts.get(name, ())) for name, spec in METRICS.items()}
    gpu_w, server_w = (sum(float(total or 0.0) for n, total, _ in parts.get(m.name, ()) if n)
                       for m in SERVER_METRICS)
    has = any(n for n, _, _ in parts.get("server_w", ()))
    return RolledTelemetry(samples["util"], samples["cpu"], dists, gpu_w if has else None,
                           server_w if has else None)


def jobs_telemetry(conn: Connection, selected: Table, cluster: str | None, since: float | None,
                   until: float | None) -> RolledTelemetry:
    """GPU figures of the selected jobs' GPU-hours (node figures need the
    whole cluster: a node is shared, so they are empty here)."""
    gh = gpu_hourly.c
    s = selected.c
    cols = [gh.samples] + [gh[f"{m.name}_{part}"] for m in GPU_METRICS for part in ("n", "sum", "hist")]
    q = select(*cols).where(and_(
        *_hour_conds(gpu_hourly, cluster, since, until),
        tuple_(gh.cluster, gh.job_id).in_(select(s.cluster, s.job_id))))
    parts: dict[str, list] = defaultdict(list)
    total = 0
    for r in conn.execute(q):
        m = r._mapping
        total += int(m["samples"] or 0)
        for spec in GPU_METRICS:
            parts[spec.name].append((m[f"{spec.name}_n"], m[f"{spec.name}_sum"], m[f"{spec.name}_hist"]))
    dists = {name: merged(spec, parts.get(name, ())) for name, spec in METRICS.items()}
    return RolledTelemetry(total, 0, dists, None, None)
