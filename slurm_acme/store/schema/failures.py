"""Diagnosed failures, and the labelled cases that retrieval learns from."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text

from slurm_acme.store.schema.base import metadata

failures = Table(
    "failures",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(64)),
    Column("job_id", String(64)),
    Column("run_id", String(64)),
    Column("attempt", Integer),
    Column("ts", Float, nullable=False),
    Column("category", String(64), nullable=False),
    Column("origin", String(32), nullable=False),  # infrastructure / framework / script / unknown
    Column("action", String(32)),
    Column("node", String(128)),
    Column("rule_id", String(128)),
    Column("confidence", Float),
    Column("evidence", Text),
    Column("source", String(16)),  # rule / retrieval / llm / label
    Column("gpus", Integer),
    Column("time_to_failure_s", Float),
    Column("recovery_s", Float),
    Column("log_path", Text),
)
Index("ix_failures_ts", failures.c.ts)

#: Labelled log excerpts (corpus, confirmed diagnoses) for retrieval.
failure_cases = Table(
    "failure_cases",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("text", Text, nullable=False),
    Column("category", String(64), nullable=False),
    Column("origin", String(32), nullable=False),
    Column("source", String(64)),
    Column("digest", String(64), unique=True),
)

#: Rules learned by the LLM agent that passed validation against the corpus;
#: layered after the shipped and site rule books.
failure_rules = Table(
    "failure_rules",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("rule_id", String(128), nullable=False, unique=True),
    Column("pattern", Text, nullable=False),
    Column("category", String(64), nullable=False),
    Column("origin", String(32), nullable=False),
    Column("action", String(32), nullable=False),
    Column("node", Text),
    Column("keywords", Text),  # JSON list of extra prefilter keywords
    Column("created_ts", Float, nullable=False),
    Column("case_digest", String(64)),
    Column("source", String(64)),  # e.g. "llm:<model>"
)
