"""Checkpoints a run wrote, as its supervisor saw them on disk."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, Integer, String, Table, Text, UniqueConstraint

from slurm_acme.store.schema.base import metadata

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("job_id", String(64)),
    Column("step", Integer, nullable=False),
    Column("path", Text, nullable=False),
    Column("bytes", Float),
    Column("checksum", String(128)),
    Column("healthy", Boolean, nullable=False, default=False),
    Column("created_ts", Float, nullable=False),
    UniqueConstraint("run_id", "step"),
)
