"""Monthly rollups of ``jobs`` that let ``sacme report --month`` skip the job rows.

A report's job sections need, per (cluster, month): counts and sums per
(workload type, outcome, GPUs per job), and the exact distribution of run
time and queue delay per workload type. Both are kept here, one *partition*
per (cluster, UTC month by submit time), rebuilt whole from ``jobs`` by
:func:`slurm_acme.store.report.refresh_job_rollups` after every import and
ingest. Distributions are kept as counts per distinct value (whole seconds),
so nearest-rank percentiles and CDFs read off them are exact.

``report_rollup_parts`` records how many jobs a partition was built from; a
report uses a partition only while ``jobs`` still holds that many jobs in it,
and falls back to the job rows otherwise (e.g. rows written by other code).
Keyed tables without a rowid on SQLite: one b-tree each, cheaper to rebuild.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Integer, String, Table

from slurm_acme.store.schema.base import metadata

#: One row per built (cluster, month): the job count it was built from.
report_rollup_parts = Table(
    "report_rollup_parts",
    metadata,
    Column("cluster", String(64), primary_key=True),
    Column("month_ts", Float, primary_key=True),  # UTC epoch of the month's first instant
    Column("jobs", BigInteger, nullable=False),
    Column("built_ts", Float, nullable=False),
    sqlite_with_rowid=False,
)

#: Counts and sums of every job (CPU jobs too, ``gpus = 0``) per
#: (cluster, month, workload type, outcome, GPUs per job).
report_job_groups = Table(
    "report_job_groups",
    metadata,
    Column("cluster", String(64), primary_key=True),
    Column("month_ts", Float, primary_key=True),
    Column("wtype", String(16), primary_key=True),
    Column("outcome", String(16), primary_key=True),
    Column("gpus", Integer, primary_key=True, autoincrement=False),
    Column("jobs", BigInteger, nullable=False),
    Column("gtime", Float, nullable=False),
    Column("dur_sum", Float),
    Column("dur_n", BigInteger, nullable=False),
    Column("dur_max", Float),
    Column("que_sum", Float),
    Column("que_n", BigInteger, nullable=False),
    sqlite_with_rowid=False,
)

#: GPU jobs per distinct run time (``metric = 'dur'``) or queue delay
#: (``'que'``) per (cluster, month, workload type).
report_job_values = Table(
    "report_job_values",
    metadata,
    Column("cluster", String(64), primary_key=True),
    Column("month_ts", Float, primary_key=True),
    Column("metric", String(8), primary_key=True),
    Column("wtype", String(16), primary_key=True),
    Column("value", Float, primary_key=True),
    Column("jobs", BigInteger, nullable=False),
    sqlite_with_rowid=False,
)

#: A one-month, one-cluster report's run-time and queue-delay figures, read
#: off ``report_job_values`` when the partition is built: per metric and
#: workload type (``'*'`` = all types), ``kind = 'n'`` the number of values,
#: ``'p'`` the nearest-rank ``x``-th percentile (x = 1..100), ``'le'`` how
#: many values are ``<= x`` (x = 2**k, k = 0..40). A few hundred rows instead
#: of one per distinct value.
report_job_points = Table(
    "report_job_points",
    metadata,
    Column("cluster", String(64), primary_key=True),
    Column("month_ts", Float, primary_key=True),
    Column("metric", String(8), primary_key=True),
    Column("wtype", String(16), primary_key=True),
    Column("kind", String(4), primary_key=True),
    Column("x", Float, primary_key=True),
    Column("value", Float, nullable=False),
    sqlite_with_rowid=False,
)

ROLLUP_TABLES = (report_rollup_parts, report_job_groups, report_job_values, report_job_points)
