"""Jobs (from sacct or an imported trace), runs and attempts, and a key/value table."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text, UniqueConstraint

from slurm_acme.store.schema.base import metadata

#: Small key/value facts: schema version, ingest watermarks, ...
meta = Table(
    "acme_meta",
    metadata,
    Column("key", String(200), primary_key=True),
    Column("value", Text, nullable=False),
)

#: One row per Slurm allocation (steps are not jobs). ``job_id`` is text because
#: trace ids (Kalos) and array ids (``123_4``) are not integers. The natural key
#: is the primary key (clustered, WITHOUT ROWID on SQLite): imports of millions
#: of rows then maintain two b-trees instead of three.
jobs = Table(
    "jobs",
    metadata,
    Column("cluster", String(64), primary_key=True),
    Column("job_id", String(64), primary_key=True),
    Column("user", String(64)),
    Column("name", Text),
    Column("account", String(64)),
    Column("partition", String(64)),
    Column("workload_type", String(16), nullable=False, server_default="Other"),
    Column("nodes", Integer, nullable=False, server_default="0"),
    Column("gpus", Integer, nullable=False, server_default="0"),
    Column("cpus", Integer, nullable=False, server_default="0"),
    Column("submit_ts", Float),
    Column("start_ts", Float),
    Column("end_ts", Float),
    #: Run time and queue delay in seconds, kept so reports need no arithmetic.
    Column("duration_s", Float),
    Column("queue_s", Float),
    Column("gpu_time_s", Float),
    Column("state", String(32), nullable=False),
    Column("exit_code", Integer),
    Column("restarts", Integer, nullable=False, server_default="0"),
    Column("nodelist", Text),
    Column("comment", Text),
    #: Kalos trace extras (AcmeTrace): memory per pod, and when it failed/stopped.
    Column("mem_per_pod_gb", Float),
    Column("shared_mem_per_pod", Float),
    Column("fail_ts", Float),
    Column("stop_ts", Float),
    Column("run_id", String(64)),
    #: 'sacct' or 'trace:<file>' -- where the row came from.
    Column("source", String(200), nullable=False, server_default="sacct"),
    sqlite_with_rowid=False,
)
Index("ix_jobs_cluster_submit", jobs.c.cluster, jobs.c.submit_ts)

#: A fault-tolerant training run: one identity across every attempt and job id.
runs = Table(
    "runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("name", Text, nullable=False),
    Column("cluster", String(64), nullable=False),
    Column("user", String(64)),
    Column("spec", Text, nullable=False),  # the validated train.yaml, as JSON
    Column("workdir", Text),
    Column("created_ts", Float, nullable=False),
    Column("state", String(32), nullable=False, default="SUBMITTED"),
    Column("last_job_id", String(64)),
    Column("reason", Text),
)

#: One execution of a run inside one Slurm allocation (``SLURM_RESTART_COUNT``).
attempts = Table(
    "attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("job_id", String(64), nullable=False),
    Column("nodelist", Text),
    Column("start_ts", Float, nullable=False),
    Column("end_ts", Float),
    Column("outcome", String(32)),  # completed / requeue / rollback / stop / ...
    Column("exit_code", Integer),
    Column("resumed_from_step", Integer),
    Column("resumed_from", Text),
    Column("excluded_nodes", Text),  # JSON list
    Column("skip_steps", Text),
    Column("last_step", Integer),
    Column("time_lost_s", Float),
    Column("failure_id", Integer),
    Column("detail", Text),
    UniqueConstraint("run_id", "attempt", "job_id"),
)
