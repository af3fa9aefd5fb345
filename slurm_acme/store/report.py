"""Every SQL aggregate behind ``sacme report`` (SQLite and Postgres alike).

The report never loads job or sample rows into Python. It copies the few
columns it needs of the selected jobs into a per-connection temporary table
(one scan of ``jobs``, using the ``(cluster, submit_ts)`` index when a cluster
is given) and runs a handful of ``GROUP BY`` queries over that narrow table.
Results come back as small lists of aggregate rows.

Quantiles have ONE definition everywhere, *nearest rank*: for ``n`` values
sorted ascending ``x_1 <= ... <= x_n`` the ``p``-th percentile is ``x_k`` with
``k = ceil(p * n / 100)`` (``p`` a whole percent, so ``k >= 1``). Job run
times, queue delays and GPU counts are discrete (whole seconds, whole GPUs),
so the store returns their distribution as ``(value, count)`` groups and
``x_k`` is read off the cumulative counts; continuous sample values use
``ROW_NUMBER()`` over one sorted pass instead (:func:`grouped_quantiles`).
Both give the ``x_k`` Postgres's ``percentile_disc`` would, without its
floating-point ``p * n``, and both run on SQLite.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Float,
    Integer,
    MetaData,
    Select,
    String,
    Table,
    and_,
    case,
    cast,
    exists,
    func,
    literal,
    or_,
    select,
    text,
    true,
)

from slurm_acme.slurm.states import JobState
from slurm_acme.store.nodes import NodeLoss, losses_on, window_conds
from slurm_acme.store.rollup_rows import RolledTelemetry, cluster_telemetry, jobs_telemetry
from slurm_acme.store.schema.core import jobs
from slurm_acme.store.schema.failures import failures
from slurm_acme.store.schema.nodes import node_events
from slurm_acme.store.schema.report import (
    ROLLUP_TABLES,
    report_job_groups,
    report_job_points,
    report_job_values,
    report_rollup_parts,
)

#: Slurm end states the paper counts as a failed job; JobState.is_failed owns the list.
FAILED_STATES = JobState.failed_states()
#: Outcome classes of a job; ``other`` is running, pending, preempted, requeued.
OUTCOMES = ("completed", "cancelled", "failed", "other")


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a report covers. Membership in a period is by *submit* time,
    ``since_ts <= submit_ts < until_ts`` (UTC epoch seconds), as the paper
    counts jobs per month by submission."""

    since_ts: float | None = None
    until_ts: float | None = None
    cluster: str | None = None
    user: str | None = None
    workload_type: str | None = None

    @property
    def narrows_jobs(self) -> bool:
        """True when only some users' or types' jobs count, so samples and
        failures must be matched to the selected jobs."""
        return self.user is not None or self.workload_type is not None


_temp = MetaData()
#: The selected jobs, narrowed to what the report reads. Temporary: private to
#: the connection and gone when it closes.
selected = Table(
    "acme_report_jobs",
    _temp,
    Column("cluster", String(64)),
    Column("job_id", String(64)),
    Column("wtype", String(16)),
    Column("gpus", Integer),
    Column("dur", Float),
    Column("que", Float),
    Column("gtime", Float),
    Column("outcome", String(16)),
    prefixes=["TEMPORARY"],
)
#: Built only when samples or failures must be matched to the selected jobs
#: (plain DDL: an ``Index`` object would bind to the table and always be built).
_SELECTED_KEY_DDL = "CREATE INDEX ix_acme_report_jobs_key ON acme_report_jobs (cluster, job_id)"


def _where(conds: Sequence[ColumnElement[bool]]) -> ColumnElement[bool]:
    return and_(true(), *conds)


def _cluster_exists(conn: Connection, cluster: str) -> bool:
    return conn.execute(select(literal(1)).where(jobs.c.cluster == cluster).limit(1)).first() is not None


def _known_clusters(conn: Connection) -> list[str]:
    return [r[0] for r in conn.execute(select(jobs.c.cluster).distinct().order_by(jobs.c.cluster))]


def _outcome() -> ColumnElement[str]:
    return case(
        (jobs.c.state == "COMPLETED", "completed"),
        (jobs.c.state.like("CANCELLED%"), "cancelled"),
        (jobs.c.state.in_(FAILED_STATES), "failed"),
        else_="other",
    )


def _job_conds(flt: JobFilter) -> list[ColumnElement[bool]]:
    conds: list[ColumnElement[bool]] = []
    if flt.cluster is not None:
        conds.append(jobs.c.cluster == flt.cluster)
    if flt.since_ts is not None:
        conds.append(jobs.c.submit_ts >= flt.since_ts)
    if flt.until_ts is not None:
        conds.append(jobs.c.submit_ts < flt.until_ts)
    if flt.user is not None:
        conds.append(jobs.c.user == flt.user)
    if flt.workload_type is not None:
        conds.append(jobs.c.workload_type == flt.workload_type)
    return conds


def count_jobs(conn: Connection, flt: JobFilter) -> int:
    """All jobs ``flt`` selects, CPU jobs included (an index-only count for a
    cluster and period)."""
    return int(conn.execute(select(func.count()).select_from(jobs).where(_where(_job_conds(flt)))).scalar_one())


def select_jobs(conn: Connection, flt: JobFilter) -> int:
    """Fill the temporary table with the GPU jobs ``flt`` selects (every job
    when it narrows to users or types, so failures of CPU jobs still match);
    return how many rows it holds."""
    conds = _job_conds(flt)
    keyed = flt.narrows_jobs
    if not keyed:
        conds.append(jobs.c.gpus > 0)
    _fill_selected(conn, conds, keyed)
    if keyed:
        conn.execute(text(_SELECTED_KEY_DDL))
    return int(conn.execute(select(func.count()).select_from(selected)).scalar_one())


def _temp_in_memory(conn: Connection) -> None:
    """SQLite: temporary tables in memory (settable only outside a transaction,
    so callers that write do this first)."""
    if conn.dialect.name == "sqlite" and conn.exec_driver_sql("PRAGMA temp_store").scalar() != 2:
        conn.exec_driver_sql("PRAGMA temp_store=MEMORY")


def _fill_selected(conn: Connection, conds: list[ColumnElement[bool]], keyed: bool) -> None:
    """(Re)create the temporary table and copy the jobs ``conds`` select into it."""
    _temp_in_memory(conn)
    selected.drop(conn, checkfirst=True)
    selected.create(conn)
    source = select(
        jobs.c.cluster if keyed else literal(None, String),
        jobs.c.job_id if keyed else literal(None, String),
        jobs.c.workload_type,
        jobs.c.gpus,
        jobs.c.duration_s,
        jobs.c.queue_s,
        func.coalesce(jobs.c.gpu_time_s, jobs.c.duration_s * jobs.c.gpus),
        _outcome(),
    ).where(_where(conds))
    conn.execute(selected.insert().from_select([c.name for c in selected.c], source))


def release_jobs(conn: Connection) -> None:
    selected.drop(conn, checkfirst=True)


@dataclass(frozen=True)
class JobGroup:
    """Counts and sums of the GPU jobs of one (type, outcome, GPUs per job)."""

    wtype: str
    outcome: str
    gpus: int
    jobs: int
    gtime: float
    dur_sum: float | None
    dur_n: int
    dur_max: float | None
    que_sum: float | None
    que_n: int

    @classmethod
    def of_row(cls, m: Any) -> JobGroup:
        return cls(
            wtype=m["wtype"], outcome=m["outcome"], gpus=int(m["gpus"]), jobs=int(m["jobs"]),
            gtime=float(m["gtime"] or 0.0), dur_sum=_opt(m["dur_sum"]), dur_n=int(m["dur_n"] or 0),
            dur_max=_opt(m["dur_max"]), que_sum=_opt(m["que_sum"]), que_n=int(m["que_n"] or 0),
        )


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)


def job_groups(conn: Connection) -> list[JobGroup]:
    """Counts and sums of GPU jobs per (type, outcome, GPUs per job), in one
    grouped pass: overview, workload, GPU demand, scale, states and the
    compare row are all sums over these few hundred rows."""
    s = selected.c
    q = select(
        s.wtype, s.outcome, s.gpus,
        func.count().label("jobs"),
        func.coalesce(func.sum(s.gtime), 0.0).label("gtime"),
        func.sum(s.dur).label("dur_sum"),
        func.count(s.dur).label("dur_n"),
        func.max(s.dur).label("dur_max"),
        func.sum(s.que).label("que_sum"),
        func.count(s.que).label("que_n"),
    ).where(s.gpus > 0).group_by(s.wtype, s.outcome, s.gpus)
    return [JobGroup.of_row(r._mapping) for r in conn.execute(q)]


def value_histogram(conn: Connection, column: str) -> list[tuple[str, float, int]]:
    """``(type, value, jobs)`` per distinct run time (``dur``) or queue delay
    (``que``) of GPU jobs. One grouped pass; Slurm and AcmeTrace times are
    whole seconds, so this is the distribution's support, never the job rows.
    Percentiles and 2**k CDF points of every type and overall are read off it."""
    s = selected.c
    v = s[column]
    q = select(s.wtype, v, func.count()).where(and_(s.gpus > 0, v.isnot(None))).group_by(s.wtype, v)
    return [(str(r[0]), float(r[1]), int(r[2])) for r in conn.execute(q.order_by(s.wtype, v)).all()]


def nearest_rank(p: int, n: int) -> int:
    """The 1-based rank of the ``p``-th percentile of ``n`` values."""
    return (p * n + 99) // 100


def grouped_quantiles(
    conn: Connection,
    source: Select,
    percents: Sequence[int],
    *,
    groups: int = 1,
    overall: bool = True,
) -> dict[tuple | None, dict[int, float]]:
    """Nearest-rank percentiles of ``v`` per group (and overall, key ``None``).

    ``source`` selects ``groups`` group columns then a value column named
    ``v`` (NULLs already excluded). Each window is one sorted pass; only the
    rows that sit at a wanted rank come back.
    """
    src = source.subquery()
    gcols = list(src.c)[:groups]
    value = src.c.v
    ranked_cols: list[Any] = [*gcols, value]
    ranked_cols += [
        func.row_number().over(partition_by=gcols, order_by=value).label("rn_g"),
        func.count().over(partition_by=gcols).label("n_g"),
    ]
    if overall:
        ranked_cols += [
            func.row_number().over(order_by=value).label("rn_a"),
            func.count().over().label("n_a"),
        ]
    ranked = select(*ranked_cols).subquery()

    def at_rank(rn: Any, n: Any) -> ColumnElement[bool]:
        return or_(*[rn == (p * n + 99) // 100 for p in percents])

    hit = at_rank(ranked.c.rn_g, ranked.c.n_g)
    if overall:
        hit = or_(hit, at_rank(ranked.c.rn_a, ranked.c.n_a))
    out: dict[tuple | None, dict[int, float]] = {}
    for row in conn.execute(select(ranked).where(hit)):
        m = row._mapping
        key = tuple(m[c.name] for c in gcols)
        for p in percents:
            if m["rn_g"] == nearest_rank(p, m["n_g"]):
                out.setdefault(key, {})[p] = float(m["v"])
            if overall and m["rn_a"] == nearest_rank(p, m["n_a"]):
                out.setdefault(None, {})[p] = float(m["v"])
    return out


# -- monthly rollups -------------------------------------------------------------
#
# ``--month`` (or month-aligned ``--since/--until``) reports without --user or
# --type read the job sections off small per-(cluster, month) tables instead of
# the month's job rows (see :mod:`slurm_acme.store.schema.report`). A partition
# is used only while ``jobs`` still holds as many jobs in it as it was built
# from; otherwise the report takes the job rows, so its numbers never differ.

def month_start(ts: float) -> float:
    """The first instant (UTC) of the month ``ts`` falls in."""
    dt = datetime.fromtimestamp(ts, timezone.utc)
    return datetime(dt.year, dt.month, 1, tzinfo=timezone.utc).timestamp()


def next_month(month_ts: float) -> float:
    dt = datetime.fromtimestamp(month_ts, timezone.utc)
    return datetime(dt.year + (dt.month == 12), dt.month % 12 + 1, 1, tzinfo=timezone.utc).timestamp()


def _months(since_ts: float, until_ts: float) -> list[float]:
    """Month starts ``m`` with ``since_ts <= m < until_ts`` (``since_ts`` a month start)."""
    out, m = [], since_ts
    while m < until_ts:
        out.append(m)
        m = next_month(m)
    return out


def rollup_months(flt: JobFilter) -> list[float] | None:
    """The months a report for ``flt`` could read off the rollups, or ``None``
    when it cannot (a user or type filter, or a period not made of whole months)."""
    if flt.narrows_jobs or flt.since_ts is None or flt.until_ts is None:
        return None
    try:
        aligned = month_start(flt.since_ts) == flt.since_ts and month_start(flt.until_ts) == flt.until_ts
    except (OverflowError, OSError, ValueError):
        return None
    return _months(flt.since_ts, flt.until_ts) if aligned else None


def _ensure_rollup_tables(conn: Connection) -> None:
    """Stores created before the rollups existed get their tables on first refresh."""
    for table in ROLLUP_TABLES:
        table.create(conn, checkfirst=True)


def _all_partitions(conn: Connection, cluster: str | None) -> set[tuple[str, float]]:
    """Every (cluster, month) from each cluster's first to last submit time."""
    j = jobs.c
    q = select(j.cluster, func.min(j.submit_ts), func.max(j.submit_ts)).group_by(j.cluster)
    if cluster is not None:
        q = q.where(j.cluster == cluster)
    parts: set[tuple[str, float]] = set()
    for name, lo, hi in conn.execute(q):
        if lo is None:
            continue
        try:
            parts.update((name, m) for m in _months(month_start(lo), next_month(month_start(hi))))
        except (OverflowError, OSError, ValueError):
            continue  # absurd submit times: reports over them read the job rows
    return parts


def refresh_job_rollups(store: Any, rows: Iterable[dict[str, Any]] | None = None, *,
                        cluster: str | None = None) -> int:
    """Rebuild the rollup partitions that ``rows`` (job rows just written,
    with ``cluster`` and ``submit_ts``) fall in; without ``rows``, every month
    of ``cluster`` (or of every cluster). One transaction per partition, so a
    long rebuild never holds the write lock for long. Returns how many
    partitions were rebuilt."""
    if rows is not None:
        parts: set[tuple[str, float]] = set()
        for row in rows:
            if row.get("submit_ts") is None:
                continue
            try:
                parts.add((row["cluster"], month_start(float(row["submit_ts"]))))
            except (OverflowError, OSError, ValueError):
                continue
    else:
        with store.engine.connect() as conn:
            parts = _all_partitions(conn, cluster)
    if not parts:
        return 0
    with store.engine.begin() as conn:
        _ensure_rollup_tables(conn)
    for name, month in sorted(parts):
        with store.engine.begin() as conn:
            _rebuild_partition(conn, name, month)
    return len(parts)


#: Postgres advisory lock serialising rollup rebuilds (two ingests at once).
_ROLLUP_LOCK = 716372


def _rebuild_partition(conn: Connection, cluster: str, month: float) -> None:
    """Replace one partition. Writes come first, so the transaction holds the
    write lock before it reads ``jobs`` (a stale SQLite read snapshot could
    not be upgraded to a write)."""
    _temp_in_memory(conn)
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"SELECT pg_advisory_xact_lock({_ROLLUP_LOCK})"))
    for table in (report_job_points, report_job_values, report_job_groups, report_rollup_parts):
        conn.execute(table.delete().where(and_(table.c.cluster == cluster, table.c.month_ts == month)))
    _fill_selected(conn, [jobs.c.cluster == cluster, jobs.c.submit_ts >= month,
                          jobs.c.submit_ts < next_month(month)], keyed=False)
    s = selected.c
    key = [literal(cluster, String).label("cluster"), literal(month, Float).label("month_ts")]
    groups = select(
        *key, s.wtype, s.outcome, s.gpus, func.count(),
        func.coalesce(func.sum(s.gtime), 0.0), func.sum(s.dur), func.count(s.dur), func.max(s.dur),
        func.sum(s.que), func.count(s.que),
    ).group_by(s.wtype, s.outcome, s.gpus)
    conn.execute(report_job_groups.insert().from_select([c.name for c in report_job_groups.c], groups))
    for metric in ("dur", "que"):
        v = s[metric]
        values = (select(*key, literal(metric, String), s.wtype, v, func.count())
                  .where(and_(s.gpus > 0, v.isnot(None))).group_by(s.wtype, v))
        conn.execute(report_job_values.insert().from_select([c.name for c in report_job_values.c], values))
        _build_points(conn, cluster, month, metric)
    count = int(conn.execute(select(func.count()).select_from(selected)).scalar_one())
    conn.execute(report_rollup_parts.insert().values(cluster=cluster, month_ts=month, jobs=count,
                                                     built_ts=time.time()))
    selected.drop(conn)


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


def _build_points(conn: Connection, cluster: str, month: float, metric: str) -> None:
    v = report_job_values.c
    rows = conn.execute(
        select(v.wtype, v.value, v.jobs)
        .where(and_(v.cluster == cluster, v.month_ts == month, v.metric == metric))
        .order_by(v.wtype, v.value)
    ).all()
    per_type: dict[str, list[tuple[float, int]]] = {}
    overall: dict[float, int] = {}
    for wtype, value, count in rows:
        per_type.setdefault(wtype, []).append((float(value), int(count)))
        overall[float(value)] = overall.get(float(value), 0) + int(count)
    per_type[ALL_TYPES] = sorted(overall.items())
    points = [
        {"cluster": cluster, "month_ts": month, "metric": metric, "wtype": wtype, "kind": kind, "x": x, "value": value}
        for wtype, pairs in per_type.items()
        for kind, x, value in distribution_points(pairs)
    ]
    conn.execute(report_job_points.insert(), points)


def _live_counts(conn: Connection, flt: JobFilter, months: list[float], total_jobs: int) -> dict[tuple, int]:
    """Jobs per (cluster, month) in ``jobs`` now (index-only counts)."""
    if flt.cluster is not None and len(months) == 1:
        return {(flt.cluster, months[0]): total_jobs} if total_jobs else {}
    live: dict[tuple, int] = {}
    j = jobs.c
    for month in months:
        conds = [j.submit_ts >= month, j.submit_ts < next_month(month)]
        if flt.cluster is not None:
            conds.append(j.cluster == flt.cluster)
        q = select(j.cluster, func.count()).where(and_(*conds)).group_by(j.cluster)
        live.update(((name, month), int(n)) for name, n in conn.execute(q) if n)
    return live


def _rollup_conds(table: Table, flt: JobFilter) -> list[ColumnElement[bool]]:
    conds = [table.c.month_ts >= flt.since_ts, table.c.month_ts < flt.until_ts]
    if flt.cluster is not None:
        conds.append(table.c.cluster == flt.cluster)
    return conds


@dataclass(frozen=True)
class JobAggregates:
    """Everything the job sections of a report read, for one :class:`JobFilter`.

    ``groups`` as :func:`job_groups` returns them. ``run`` and ``queue`` are
    the run-time and queue-delay distributions of GPU jobs: ``(type, value,
    jobs)`` rows as :func:`value_histogram` returns them or, with ``points``,
    a rollup partition's precomputed ``(type, kind, x, value)`` figures (see
    :func:`distribution_points`; type ``'*'`` is every type).
    ``from_rollups`` says whether the monthly rollups answered."""

    total_jobs: int
    groups: tuple[JobGroup, ...]
    run: tuple[tuple, ...]
    queue: tuple[tuple, ...]
    points: bool
    from_rollups: bool


def rolled_up_jobs(conn: Connection, flt: JobFilter, total_jobs: int) -> JobAggregates | None:
    """What :func:`job_groups` and :func:`value_histogram` (``dur``, ``que``)
    would give for ``flt``, read off current rollups; ``None`` when they
    cannot answer (the caller then takes the job rows). When the period holds
    jobs of one cluster in one month, run time and queue delay come as that
    partition's precomputed figures (a few hundred rows, not one per value)."""
    months = rollup_months(flt)
    if months is None or not conn.dialect.has_table(conn, report_rollup_parts.name):
        return None
    p = report_rollup_parts.c
    built = {(r[0], r[1]): int(r[2]) for r in conn.execute(
        select(p.cluster, p.month_ts, p.jobs).where(and_(*_rollup_conds(report_rollup_parts, flt))))}
    live = _live_counts(conn, flt, months, total_jobs)
    if {k: n for k, n in built.items() if n} != live:
        return None
    g = report_job_groups.c
    def counted(column):
        return cast(func.sum(column), BigInteger)  # Postgres sums integers to numeric
    groups = select(
        g.wtype, g.outcome, g.gpus,
        counted(g.jobs).label("jobs"), func.sum(g.gtime).label("gtime"),
        func.sum(g.dur_sum).label("dur_sum"), counted(g.dur_n).label("dur_n"), func.max(g.dur_max).label("dur_max"),
        func.sum(g.que_sum).label("que_sum"), counted(g.que_n).label("que_n"),
    ).where(and_(g.gpus > 0, *_rollup_conds(report_job_groups, flt))).group_by(g.wtype, g.outcome, g.gpus)
    gpu = tuple(JobGroup.of_row(r._mapping) for r in conn.execute(groups))
    current = [k for k, n in built.items() if n]
    if len(current) == 1:  # one cluster, one month: its figures are stored
        (cluster, month), = current
        pt = report_job_points.c
        figures = conn.execute(
            select(pt.metric, pt.wtype, pt.kind, pt.x, pt.value)
            .where(and_(pt.cluster == cluster, pt.month_ts == month))
        ).all()
        if {r[0] for r in figures} == {"dur", "que"}:  # else built before the figures were kept
            return JobAggregates(total_jobs, gpu, tuple(tuple(r[1:]) for r in figures if r[0] == "dur"),
                                 tuple(tuple(r[1:]) for r in figures if r[0] == "que"),
                                 points=True, from_rollups=True)
    v = report_job_values.c
    histograms = []
    for metric in ("dur", "que"):
        q = (select(v.wtype, v.value, counted(v.jobs))
             .where(and_(v.metric == metric, *_rollup_conds(report_job_values, flt)))
             .group_by(v.wtype, v.value).order_by(v.wtype, v.value))
        histograms.append(tuple((str(r[0]), float(r[1]), int(r[2])) for r in conn.execute(q).all()))
    return JobAggregates(total_jobs, gpu, histograms[0], histograms[1], points=False, from_rollups=True)


# -- failures ------------------------------------------------------------------

def _failure_conds(flt: JobFilter) -> list[ColumnElement[bool]]:
    f = failures.c
    conds: list[ColumnElement[bool]] = []
    if flt.cluster is not None:
        conds.append(f.cluster == flt.cluster)
    if flt.since_ts is not None:
        conds.append(f.ts >= flt.since_ts)
    if flt.until_ts is not None:
        conds.append(f.ts < flt.until_ts)
    if flt.narrows_jobs:
        s = selected.c
        conds.append(exists().where(and_(s.cluster == f.cluster, s.job_id == f.job_id)))
    return conds


def failure_groups(conn: Connection, flt: JobFilter, by_category: bool) -> list[dict[str, Any]]:
    """Count, failed GPU time (``gpus * time_to_failure_s``) and mean GPUs per
    origin (and category)."""
    f = failures.c
    keys = [f.origin, f.category] if by_category else [f.origin]
    q = (
        select(
            *keys,
            func.count().label("count"),
            func.coalesce(func.sum(f.gpus * f.time_to_failure_s), 0.0).label("gpu_time"),
            func.avg(f.gpus).label("mean_gpus"),
        )
        .where(_where(_failure_conds(flt)))
        .group_by(*keys)
        .order_by(*keys)
    )
    return [dict(r._mapping) for r in conn.execute(q)]


def failure_medians(
    conn: Connection, flt: JobFilter, by_category: bool,
) -> dict[str, dict[tuple | None, dict[int, float]]]:
    """Median time to failure and recovery time per origin (and category)."""
    f = failures.c
    keys = [f.origin, f.category] if by_category else [f.origin]
    out = {}
    for name, column in (("ttf", f.time_to_failure_s), ("recovery", f.recovery_s)):
        source = select(*keys, column.label("v")).where(and_(column.isnot(None), *_failure_conds(flt)))
        out[name] = grouped_quantiles(conn, source, [50], groups=len(keys), overall=False)
    return out


# -- the report's door -----------------------------------------------------------
#
# ``slurm_acme.report`` never sees a connection: it opens a :class:`ReportReader`
# for one filter and gets records back.

@dataclass(frozen=True)
class FailureGroup:
    """The failures of one origin (and category, when grouped by it)."""

    origin: str
    category: str | None
    count: int
    gpu_time: float
    mean_gpus: float | None
    ttf_median_s: float | None
    recovery_median_s: float | None


class ReportReader:
    """One read-only connection answering the report's questions about one
    :class:`JobFilter`. Open it with :func:`read_report`.

    The selected jobs are copied into a temporary table at most once, when the
    rollups cannot answer or when samples and failures must be matched to the
    selected jobs (a user or type filter)."""

    def __init__(self, conn: Connection, flt: JobFilter) -> None:
        self._conn = conn
        self.flt = flt
        self._selected = False

    def _select(self) -> None:
        if not self._selected:
            select_jobs(self._conn, self.flt)
            self._selected = True

    def jobs(self) -> JobAggregates:
        """The job sections' aggregates: off current rollups when they can
        answer (whole months, no user or type filter), else off the job rows."""
        total = count_jobs(self._conn, self.flt)
        rolled = rolled_up_jobs(self._conn, self.flt, total)
        if rolled is not None:
            return rolled
        self._select()
        return JobAggregates(total, tuple(job_groups(self._conn)), tuple(value_histogram(self._conn, "dur")),
                             tuple(value_histogram(self._conn, "que")), points=False, from_rollups=False)

    def _matched(self) -> None:
        if self.flt.narrows_jobs:
            self._select()

    def telemetry(self) -> RolledTelemetry:
        """The utilisation and power figures, off the hourly rollups: the
        whole cluster's, or with a user or type filter the selected jobs'
        GPU-hours (see :mod:`slurm_acme.store.rollup_rows`)."""
        f = self.flt
        if f.narrows_jobs:
            self._select()
            return jobs_telemetry(self._conn, selected, f.cluster, f.since_ts, f.until_ts)
        return cluster_telemetry(self._conn, f.cluster, f.since_ts, f.until_ts)

    def failures(self, by_category: bool) -> list[FailureGroup]:
        self._matched()
        groups = failure_groups(self._conn, self.flt, by_category)
        medians = failure_medians(self._conn, self.flt, by_category) if groups else {"ttf": {}, "recovery": {}}
        out = []
        for g in groups:
            key = (g["origin"], g["category"]) if by_category else (g["origin"],)
            out.append(FailureGroup(
                origin=g["origin"], category=g["category"] if by_category else None, count=int(g["count"]),
                gpu_time=float(g["gpu_time"] or 0.0), mean_gpus=_opt(g["mean_gpus"]),
                ttf_median_s=medians["ttf"].get(key, {}).get(50),
                recovery_median_s=medians["recovery"].get(key, {}).get(50),
            ))
        return out


    def node_losses(self) -> list[NodeLoss]:
        """The node-health ledger per node over the report's window: events, jobs
        hit, GPU time lost (only the selected jobs' events under a user or type filter)."""
        self._matched()
        conds = window_conds(self.flt.cluster, self.flt.since_ts, self.flt.until_ts)
        if self.flt.narrows_jobs:
            s, e = selected.c, node_events.c
            conds.append(exists().where(and_(s.cluster == e.cluster, s.job_id == e.job_id)))
        return losses_on(self._conn, conds)


@contextmanager
def read_report(store: Any, flt: JobFilter) -> Iterator[ReportReader]:
    """A :class:`ReportReader` on its own connection; the temporary table and
    the read transaction end with the block."""
    with store.engine.connect() as conn:
        try:
            yield ReportReader(conn, flt)
        finally:
            release_jobs(conn)
            conn.rollback()


def known_clusters(store: Any) -> list[str]:
    with store.engine.connect() as conn:
        return _known_clusters(conn)


def cluster_exists(store: Any, cluster: str) -> bool:
    """An index seek, so validating ``--cluster`` costs nothing on a big store."""
    with store.engine.connect() as conn:
        return _cluster_exists(conn, cluster)


def submit_span(store: Any, flt: JobFilter) -> tuple[float, float] | None:
    """The first and last submit time of the jobs ``flt`` selects (``None``
    without jobs): where a report over open-ended bounds starts and ends."""
    j = jobs.c
    with store.engine.connect() as conn:
        lo, hi = conn.execute(select(func.min(j.submit_ts), func.max(j.submit_ts))
                              .where(_where(_job_conds(flt)))).one()
    return None if lo is None else (float(lo), float(hi))


# -- rollups built from an import's own rows ----------------------------------------
#
# When an import wrote a cluster's first jobs, every job of the months it
# touched is in the batches it just wrote: the partitions are computed from
# those columns (numpy) instead of being read back out of ``jobs``. The rows
# are the same ones :func:`_rebuild_partition` would aggregate, with its
# definitions (outcome, GPU time, GPU jobs only in the distributions).

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


def _copy_rows(conn: Connection, table: Table, rows: list[tuple]) -> None:
    """Many rows into a rollup table inside ``conn``'s transaction (COPY on Postgres)."""
    if not rows:
        return
    names = [c.name for c in table.c]
    if conn.dialect.name == "postgresql":
        cols = ", ".join(f'"{n}"' for n in names)
        text_rows = "".join("\t".join(map(_copy_text, row)) + "\n" for row in rows)
        with conn.connection.driver_connection.cursor() as cur:  # type: ignore[union-attr]
            with cur.copy(f"COPY {table.name} ({cols}) FROM STDIN") as copy:
                copy.write(text_rows)
        return
    marks = ", ".join("?" for _ in names)
    conn.exec_driver_sql(f"INSERT INTO {table.name} VALUES ({marks})", rows)


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


def _copy_table(conn: Connection, table: Table, batch: Any) -> None:
    """A pyarrow table (columns in ``table``'s order) into ``table``, in ``conn``'s
    transaction: CSV through COPY on Postgres, one executemany on SQLite."""
    names = [c.name for c in table.c]
    assert batch.column_names == names
    if conn.dialect.name == "postgresql":
        import pyarrow as pa
        import pyarrow.csv as pa_csv

        sink = pa.BufferOutputStream()
        pa_csv.write_csv(batch, sink, pa_csv.WriteOptions(include_header=False))
        cols = ", ".join(f'"{n}"' for n in names)
        with conn.connection.driver_connection.cursor() as cur:  # type: ignore[union-attr]
            with cur.copy(f"COPY {table.name} ({cols}) FROM STDIN (FORMAT csv)") as copy:
                copy.write(sink.getvalue())
        return
    from slurm_acme.store.job_import import sqlite_insert_rows

    with closing(conn.connection.driver_connection.cursor()) as cur:  # type: ignore[union-attr]
        sqlite_insert_rows(cur, table.name, names, [], batch)


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


def rollups_from_columns(store: Any, cluster: str, batches: Sequence[Any]) -> int:
    """Replace the partitions of ``cluster`` that ``batches`` fall in, computed
    from those rows (see :func:`prepare_rollups`); returns how many were written."""
    return write_rollups(store, prepare_rollups(cluster, batches))


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
            ], names=[c.name for c in report_job_values.c]))
            points += _month_points(cluster, metric, months, wtypes, at_month, at_type, seen[at_value], counts)
        else:
            points += _month_points(cluster, metric, months, wtypes, *(np.zeros(0, dtype=t) for t in
                                                                       (np.int64, np.int64, np.float64, np.int64)))
    parts = [(cluster, float(m), int(n), now) for m, n in zip(months.tolist(), np.bincount(month_idx).tolist(),
                                                                 strict=True)]
    merged = None
    if values:  # in key order (cluster, month, metric, wtype, value): the b-tree is appended to, not split
        # each metric's rows are in (month, wtype, value) order and the metrics in name order,
        # so a stable sort by month alone puts them in key order
        assert [c.name for c in report_job_values.c if c.primary_key] == ["cluster", "month_ts", "metric", "wtype",
                                                                          "value"]
        order = np.argsort(np.concatenate(value_months), kind="stable")
        merged = pa.concat_tables(values).take(from_numpy(order.astype(np.int64)))
    return ColumnRollups(cluster, [float(m) for m in months], groups, merged, points, parts)


def write_rollups(store: Any, rollups: ColumnRollups | None) -> int:
    """Replace the partitions ``rollups`` holds, in one transaction; returns how many."""
    if rollups is None:
        return 0
    cluster = rollups.cluster
    with store.engine.begin() as conn:
        _ensure_rollup_tables(conn)
        if conn.dialect.name == "postgresql":
            conn.execute(text(f"SELECT pg_advisory_xact_lock({_ROLLUP_LOCK})"))
        for table_ in (report_job_points, report_job_values, report_job_groups, report_rollup_parts):
            conn.execute(table_.delete().where(and_(table_.c.cluster == cluster,
                                                    table_.c.month_ts.in_(rollups.months))))
        _copy_rows(conn, report_job_groups, rollups.groups)
        if rollups.values is not None:
            _copy_table(conn, report_job_values, rollups.values)
        _copy_rows(conn, report_job_points, rollups.points)
        _copy_rows(conn, report_rollup_parts, rollups.parts)
    return len(rollups.months)
