"""Diagnosed failures, and the labelled cases that retrieval learns from."""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Index, Integer, LargeBinary, String, Table, Text

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

#: Sentence-embedding vectors of the labelled cases (float32 bytes, searched
#: with numpy): the vector store retrieval answers from. One row per case and
#: model; a new model re-embeds what it lacks.
failure_case_vectors = Table(
    "failure_case_vectors",
    metadata,
    Column("case_id", Integer, ForeignKey("failure_cases.id", ondelete="CASCADE"), primary_key=True),
    Column("model", String(64), primary_key=True),
    Column("dims", Integer, nullable=False),
    Column("vector", LargeBinary, nullable=False),
)
