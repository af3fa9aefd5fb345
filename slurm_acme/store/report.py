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
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

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

from slurm_acme.store.column_rollups import (
    ALL_TYPES,
    FAILED_STATES,
    ROLLUP_LOCK,
    distribution_points,
)
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


def ensure_rollup_tables(store: Any) -> None:
    """:func:`_ensure_rollup_tables` in a transaction of its own."""
    with store.engine.begin() as conn:
        _ensure_rollup_tables(conn)


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
    ensure_rollup_tables(store)
    for name, month in sorted(parts):
        with store.engine.begin() as conn:
            _rebuild_partition(conn, name, month)
    return len(parts)


def _rebuild_partition(conn: Connection, cluster: str, month: float) -> None:
    """Replace one partition. Writes come first, so the transaction holds the
    write lock before it reads ``jobs`` (a stale SQLite read snapshot could
    not be upgraded to a write)."""
    _temp_in_memory(conn)
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"SELECT pg_advisory_xact_lock({ROLLUP_LOCK})"))
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
