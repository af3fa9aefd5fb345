"""Evaluation runs, their trials, results, and runtime priors per dataset."""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, String, Table, Text, UniqueConstraint

from slurm_acme.store.schema.base import metadata

eval_runs = Table(
    "eval_runs",
    metadata,
    Column("eval_id", String(64), primary_key=True),
    Column("checkpoint", Text, nullable=False),
    Column("model_size_b", Float),
    Column("cluster", String(64)),
    #: Who submitted it: only they (and admins) see and cancel it.
    Column("user", String(64)),
    Column("created_ts", Float, nullable=False),
    Column("state", String(32), nullable=False, default="PLANNED"),
    Column("plan", Text),  # JSON
    Column("job_ids", Text),  # JSON
    Column("run_dir", Text),
    Column("mode", String(16)),
    Column("finished_ts", Float),
)

eval_trials = Table(
    "eval_trials",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("eval_id", String(64), nullable=False),
    Column("trial", String(128), nullable=False),
    Column("node", String(128)),
    Column("slot", Integer),
    Column("datasets", Text),  # JSON list of dataset shards
    Column("job_id", String(64)),
    Column("gpu_start_ts", Float),
    Column("gpu_end_ts", Float),
    Column("cpu_start_ts", Float),
    Column("cpu_end_ts", Float),
    Column("state", String(32)),
    Column("gpu_s", Float),  # measured inference seconds, model load excluded
    Column("load_s", Float),  # measured model load seconds
    Column("cpu_s", Float),  # measured scoring seconds
    UniqueConstraint("eval_id", "trial"),
)

eval_results = Table(
    "eval_results",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("eval_id", String(64), nullable=False),
    Column("dataset", String(128), nullable=False),
    Column("metric", String(64)),
    Column("score", Float),
    Column("examples", Integer),
    Column("gpu_s", Float),
    Column("cpu_s", Float),
    UniqueConstraint("eval_id", "dataset"),
)

#: Measured runtime priors (EWMA) per dataset and model size bucket.
eval_priors = Table(
    "eval_priors",
    metadata,
    Column("dataset", String(128), primary_key=True),
    Column("model_size_b", Float, primary_key=True),
    Column("gpu_s", Float, nullable=False),
    Column("cpu_s", Float, nullable=False),
    Column("samples", Integer, nullable=False, default=0),
    Column("updated_ts", Float),
)
