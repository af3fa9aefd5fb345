"""The report's monthly rollups built from an import's own columns, and written.

When an import wrote a cluster's first jobs, every job of the months it
touched is in the batches it just wrote: the partitions are computed from
those columns (numpy, pyarrow) instead of being read back out of ``jobs``.
The rows are the ones :func:`slurm_acme.store.report._rebuild_partition`
aggregates in SQL, with its definitions (outcome, GPU time, GPU jobs only in
the distributions), and this module owns those definitions and figures.

Plain SQL on the store's DB-API connection, no SQLAlchemy: ``sacme
import-trace`` loads neither it nor the report's queries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from slurm_acme.slurm.states import JobState
from slurm_acme.store.dbapi import Db, quoted

#: Slurm end states the paper counts as a failed job; JobState.is_failed owns the list.
FAILED_STATES = JobState.failed_states()
#: Outcome classes of a job; ``other`` is running, pending, preempted, requeued.
OUTCOMES = ("completed", "cancelled", "failed", "other")
#: Postgres advisory lock serialising rollup rebuilds (two ingests at once).
ROLLUP_LOCK = 716372

#: The columns each rollup table is written with, in the order the rows here hold them
#: (the tables are :mod:`slurm_acme.store.schema.report`'s).
GROUP_FIELDS = ("cluster", "month_ts", "wtype", "outcome", "gpus", "jobs", "gtime", "dur_sum", "dur_n", "dur_max",
                "que_sum", "que_n")
VALUE_FIELDS = ("cluster", "month_ts", "metric", "wtype", "value", "jobs")
POINT_FIELDS = ("cluster", "month_ts", "metric", "wtype", "kind", "x", "value")
PART_FIELDS = ("cluster", "month_ts", "jobs", "built_ts")
ROLLUP_FIELDS = {"report_job_points": POINT_FIELDS, "report_job_values": VALUE_FIELDS,
                 "report_job_groups": GROUP_FIELDS, "report_rollup_parts": PART_FIELDS}


#: Which figures ``report_job_points`` keeps (see its schema).
POINT_PERCENTS = range(1, 101)
POINT_CDF_KS = range(41)
ALL_TYPES = "*"


def distribution_points(pairs: list[tuple[float, int]]) -> list[tuple[str, float, float]]:
    """``(kind, x, value)`` figures of the values given as sorted ``(value,
    count)`` pairs: their number, nearest-rank percentiles, counts ``<= 2**k``."""
    return distribution_points_of(np.array([v for v, _ in pairs], dtype=np.float64),
                                  np.array([c for _, c in pairs], dtype=np.int64))


_PERCENTS = np.array(POINT_PERCENTS, dtype=np.int64)
_CDF_X = 2.0 ** np.array(POINT_CDF_KS, dtype=np.float64)


def distribution_points_of(values: np.ndarray, counts: np.ndarray) -> list[tuple[str, float, float]]:
    """:func:`distribution_points` of sorted distinct ``values`` and their ``counts``."""
    n = int(counts.sum())
    if not n:
        return [("n", 0.0, 0.0)]
    cumulative = np.cumsum(counts)
    ranks = (_PERCENTS * n + 99) // 100  # nearest_rank
    at = values[np.searchsorted(cumulative, ranks, side="left")]
    below = np.searchsorted(values, _CDF_X, side="right")
    le = np.where(below > 0, cumulative[np.maximum(below - 1, 0)], 0)
    out = [("n", 0.0, float(n))]
    out += zip(["p"] * len(ranks), _PERCENTS.astype(np.float64).tolist(), at.astype(np.float64).tolist(), strict=True)
    out += zip(["le"] * len(_CDF_X), _CDF_X.tolist(), le.astype(np.float64).tolist(), strict=True)
    return out


def _outcomes(states: list[str]) -> np.ndarray:
    def outcome(state: str) -> int:
        if state == "COMPLETED":
            return OUTCOMES.index("completed")
        if state.upper().startswith("CANCELLED"):  # SQL LIKE 'CANCELLED%' (case-blind on SQLite)
            return OUTCOMES.index("cancelled")
        return OUTCOMES.index("failed" if state in FAILED_STATES else "other")
    return np.array([outcome(s) for s in states], dtype=np.int64)


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` by hashing (pyarrow) instead of
    sorting every value: only the distinct values are sorted, a few of a million."""
    import pyarrow.compute as pc

    from slurm_acme.columns import from_numpy, to_numpy

    values = np.ascontiguousarray(values)
    if values.dtype.kind == "f":
        values = values + 0.0  # -0.0 is 0.0, as np.unique has it
    encoded = pc.dictionary_encode(from_numpy(values.astype(np.float64 if values.dtype.kind == "f" else np.int64)))
    found = to_numpy(encoded.dictionary)
    order = np.argsort(found, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return found[order], rank[to_numpy(encoded.indices)]


def _codes(array: Any, *, ordered: bool = False) -> tuple[np.ndarray, list[str]]:
    """Dictionary codes and labels of a string column; ``ordered``: codes in label
    order, so rows grouped by code come out in the rollup tables' key order."""
    import pyarrow.compute as pc

    from slurm_acme.columns import to_numpy

    encoded = pc.dictionary_encode(array)
    codes, labels = to_numpy(encoded.indices).astype(np.int64), encoded.dictionary.to_pylist()
    if not ordered:
        return codes, labels
    order = sorted(range(len(labels)), key=labels.__getitem__)
    rank = np.empty(len(labels), dtype=np.int64)
    rank[order] = np.arange(len(labels))
    return rank[codes], [labels[i] for i in order]


def _month_points(cluster: str, metric: str, months: np.ndarray, wtypes: list[str], at_month: np.ndarray,
                  at_type: np.ndarray, value: np.ndarray, count: np.ndarray) -> list[tuple]:
    """``report_job_points`` rows of one metric: per month, per type and over all
    types, from distinct (month, type, value) counts sorted in that order."""
    out: list[tuple] = []
    for m, month in enumerate(months.tolist()):
        in_month = at_month == m
        types, values, counts = at_type[in_month], value[in_month], count[in_month]
        per_type = {wtypes[t]: types == t for t in np.unique(types).tolist()}
        figures = {w: distribution_points_of(values[mask], counts[mask]) for w, mask in sorted(per_type.items())}
        distinct, merged = np.unique(values, return_inverse=True)
        figures[ALL_TYPES] = distribution_points_of(distinct, np.bincount(merged, weights=counts,
                                                                         minlength=len(distinct)).astype(np.int64))
        out += [(cluster, float(month), metric, w, kind, x, v) for w, rows in figures.items() for kind, x, v in rows]
    return out


@dataclass(frozen=True)
class ColumnRollups:
    """The rollup rows of one cluster's months, computed from an import's own
    columns by :func:`prepare_rollups` and written by :func:`write_rollups`."""

    cluster: str
    months: list[float]
    groups: list[tuple]
    values: Any  # a pyarrow table in the key order of report_job_values, or None
    points: list[tuple]
    parts: list[tuple]


def prepare_rollups(cluster: str, batches: Sequence[Any]) -> ColumnRollups | None:
    """The partitions of ``cluster`` that ``batches`` (pyarrow tables with
    ``submit_ts, workload_type, gpus, duration_s, queue_s, gpu_time_s, state``)
    fall in, computed from those rows, which must be every job of those months.
    Touches no database, so it can run while the store is still loading them."""
    import pyarrow as pa

    from slurm_acme.columns import constant_strings, from_numpy, strings, to_numpy, valid

    if not batches:
        return None
    table = pa.concat_tables(batches).combine_chunks()
    submit_col = table["submit_ts"].chunk(0) if table.num_rows else None
    if submit_col is None:
        return None
    has_submit = valid(submit_col)
    table = table.filter(pa.Array.from_buffers(pa.bool_(), len(has_submit), [
        None, pa.py_buffer(np.packbits(has_submit, bitorder="little"))]))
    if not table.num_rows:
        return None

    def column(name: str) -> tuple[np.ndarray, np.ndarray]:
        array = table[name].chunk(0)
        return to_numpy(array), valid(array)

    submit, _ = column("submit_ts")
    seconds = np.floor(submit).astype(np.int64)
    month_of = seconds.astype("datetime64[s]").astype("datetime64[M]").astype("datetime64[s]").astype(np.int64)
    months, month_idx = _distinct(month_of)
    wtype_idx, wtypes = _codes(table["workload_type"].chunk(0), ordered=True)
    state_idx, states = _codes(table["state"].chunk(0))
    outcome_idx = _outcomes(states)[state_idx]
    gpus, _ = column("gpus")
    gpus = gpus.astype(np.int64)
    dur, has_dur = column("duration_s")
    que, has_que = column("queue_s")
    gtime_raw, has_gtime = column("gpu_time_s")
    gtime = np.where(has_gtime, gtime_raw, dur * gpus)
    has_gtime = has_gtime | has_dur

    now = time.time()
    groups: list[tuple] = []
    gpu_values, gpu_idx = _distinct(gpus)
    group_shape = (len(months), len(wtypes), len(OUTCOMES), len(gpu_values))
    unique_keys, group_of = _distinct(np.ravel_multi_index((month_idx, wtype_idx, outcome_idx, gpu_idx), group_shape))
    g = len(unique_keys)

    def total(weights: np.ndarray, present: np.ndarray) -> np.ndarray:
        return np.bincount(group_of, weights=np.where(present, weights, 0.0), minlength=g)

    jobs_n = np.bincount(group_of, minlength=g)
    gtime_sum = total(gtime, has_gtime)
    dur_n = np.bincount(group_of, weights=has_dur.astype(np.float64), minlength=g).astype(np.int64)
    que_n = np.bincount(group_of, weights=has_que.astype(np.float64), minlength=g).astype(np.int64)
    dur_sum, que_sum = total(dur, has_dur), total(que, has_que)
    dur_max = np.full(g, -np.inf)
    np.maximum.at(dur_max, group_of[has_dur], dur[has_dur])
    columns_of = [np.asarray(a).tolist() for a in np.unravel_index(unique_keys, group_shape)]
    for k, (m, w, o, gp) in enumerate(zip(*columns_of, strict=True)):
        groups.append((cluster, float(months[m]), wtypes[w], OUTCOMES[o], int(gpu_values[gp]), int(jobs_n[k]),
                       float(gtime_sum[k]), float(dur_sum[k]) if dur_n[k] else None, int(dur_n[k]),
                       float(dur_max[k]) if dur_n[k] else None, float(que_sum[k]) if que_n[k] else None,
                       int(que_n[k])))
    values: list[Any] = []  # pyarrow tables, one per metric
    value_months: list[np.ndarray] = []  # the month index of each of their rows
    points: list[tuple] = []
    gpu_job = gpus > 0
    for metric, v, present in (("dur", dur, has_dur), ("que", que, has_que)):
        take = gpu_job & present
        if take.any():
            seen, value_idx = _distinct(v[take])
            value_shape = (len(months), len(wtypes), len(seen))
            keys, key_of = _distinct(np.ravel_multi_index((month_idx[take], wtype_idx[take], value_idx), value_shape))
            counts = np.bincount(key_of, minlength=len(keys))
            at_month, at_type, at_value = (np.asarray(a) for a in np.unravel_index(keys, value_shape))
            value_months.append(at_month)
            values.append(pa.Table.from_arrays([
                constant_strings(cluster, len(keys)), from_numpy(months[at_month].astype(np.float64)),
                constant_strings(metric, len(keys)), strings(wtypes).take(from_numpy(at_type.astype(np.int64))),
                from_numpy(seen[at_value].astype(np.float64)), from_numpy(counts.astype(np.int64)),
            ], names=list(VALUE_FIELDS)))
            points += _month_points(cluster, metric, months, wtypes, at_month, at_type, seen[at_value], counts)
        else:
            points += _month_points(cluster, metric, months, wtypes, *(np.zeros(0, dtype=t) for t in
                                                                       (np.int64, np.int64, np.float64, np.int64)))
    parts = [(cluster, float(m), int(n), now) for m, n in zip(months.tolist(), np.bincount(month_idx).tolist(),
                                                                 strict=True)]
    merged = None
    if values:  # in key order (VALUE_FIELDS but jobs): the b-tree is appended to, not split
        # each metric's rows are in (month, wtype, value) order and the metrics in name order,
        # so a stable sort by month alone puts them in key order
        order = np.argsort(np.concatenate(value_months), kind="stable")
        merged = pa.concat_tables(values).take(from_numpy(order.astype(np.int64)))
    return ColumnRollups(cluster, [float(m) for m in months], groups, merged, points, parts)


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value: Any) -> str:
    """One field of COPY's text format (psycopg's write_row, without its per-row cost)."""
    if value is None:
        return "\\N"
    if isinstance(value, float):
        return repr(value)  # round-trips; 'inf' and 'nan' are what Postgres reads too
    if isinstance(value, str):
        return value.translate(_COPY_ESCAPES)
    return str(value)


def _write_rows(db: Db, table: str, rows: list[tuple]) -> None:
    """Many rows (in :data:`ROLLUP_FIELDS` order) into a rollup table in ``db``'s
    transaction: COPY on Postgres, one executemany on SQLite."""
    if not rows:
        return
    names = ROLLUP_FIELDS[table]
    if db.dialect == "postgresql":
        text_rows = "".join("\t".join(map(_copy_text, row)) + "\n" for row in rows)
        with db.raw.cursor() as cur, cur.copy(f"COPY {table} ({quoted(names)}) FROM STDIN") as copy:
            copy.write(text_rows)
        return
    db.executemany(f"INSERT INTO {table} ({quoted(names)}) VALUES ({', '.join('?' for _ in names)})", rows)


def _write_table(db: Db, table: str, batch: Any) -> None:
    """A pyarrow table (columns named as ``table``'s) into ``table`` in ``db``'s
    transaction: a COPY on Postgres (:mod:`slurm_acme.store.pg_copy`), multi-row
    INSERTs on SQLite."""
    names = batch.column_names
    if db.dialect == "postgresql":
        from slurm_acme.store.pg_copy import CopyEncoder

        with db.raw.cursor() as cur:
            encoder = CopyEncoder(cur, table, names)
            with cur.copy(encoder.sql) as copy:
                copy.write(encoder.header())
                copy.write(encoder.batch(batch))
                copy.write(encoder.trailer())
        return
    from contextlib import closing

    from slurm_acme.store.job_import import sqlite_insert_rows

    with closing(db.raw.cursor()) as cur:
        sqlite_insert_rows(cur, table, names, [], batch)


def write_rollups(store: Any, rollups: ColumnRollups | None, *,
                  before_commit: Callable[[], object] | None = None) -> int:
    """Replace the partitions ``rollups`` holds, in one transaction; returns how many.
    ``before_commit`` is called once the rows are written: the transaction commits
    when it returns and rolls back if it raises (an import whose jobs failed)."""
    if rollups is None:
        return 0
    with store.reading() as db:
        missing = not all(db.has_table(name) for name in ROLLUP_FIELDS)
    if missing:  # a store made before the rollups existed
        from slurm_acme.store.report import ensure_rollup_tables

        ensure_rollup_tables(store)
    months = ", ".join("?" for _ in rollups.months)
    with store.writing() as db:
        if db.dialect == "postgresql":
            db.execute(f"SELECT pg_advisory_xact_lock({ROLLUP_LOCK})").close()
        for name in ROLLUP_FIELDS:
            db.execute(f"DELETE FROM {name} WHERE cluster = ? AND month_ts IN ({months})",
                       [rollups.cluster, *rollups.months]).close()
        _write_rows(db, "report_job_groups", rollups.groups)
        if rollups.values is not None:
            _write_table(db, "report_job_values", rollups.values)
        _write_rows(db, "report_job_points", rollups.points)
        _write_rows(db, "report_rollup_parts", rollups.parts)
        if before_commit is not None:
            before_commit()
    return len(rollups.months)
