"""Writes of accounting job rows into ``jobs``, with the watermark of the ingest that made them.

``sacme ingest`` decides which jobs and which watermark; this module owns the
one transaction that writes both, so a failed ingest moves neither (the next
run then re-reads the same window).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, select

from slurm_acme.store.engine import Store
from slurm_acme.store.rows import get_meta, set_meta, upsert
from slurm_acme.store.schema.core import jobs

_CHUNK = 500
_KEY = ("cluster", "job_id")


def read_fact(store: Store, key: str) -> str | None:
    """The value kept under ``key`` in the store's key/value table (None if never set)."""
    with store.engine.connect() as conn:
        return get_meta(conn, key)


def write_job_rows(store: Store, rows: Sequence[Mapping[str, Any]], *,
                   facts: Mapping[str, str]) -> int:
    """Upsert ``rows`` on (cluster, job_id) and set ``facts``, in one transaction.

    Returns how many of the rows were new (the rest refreshed a row already there).
    ``restarts`` only grows: Slurm 22.05's sacct shows every attempt of a requeued
    job as its own record, so a window that starts after the first attempts
    sees fewer of them (the count would drop on the next incremental ingest).
    """
    with store.engine.begin() as conn:
        known = _present(conn, rows)
        for i in range(0, len(rows), _CHUNK):
            upsert(conn, jobs, rows[i:i + _CHUNK], list(_KEY), grow_only=("restarts",))
        for key, value in facts.items():
            set_meta(conn, key, value)
    return sum((r["cluster"], r["job_id"]) not in known for r in rows)


def _present(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """The (cluster, job_id) of ``rows`` that ``jobs`` already holds."""
    found: set[tuple[str, str]] = set()
    for cluster in {r["cluster"] for r in rows}:
        ids = [r["job_id"] for r in rows if r["cluster"] == cluster]
        for i in range(0, len(ids), _CHUNK):
            query = select(jobs.c.job_id).where(jobs.c.cluster == cluster,
                                                jobs.c.job_id.in_(ids[i:i + _CHUNK]))
            found.update((cluster, job_id) for (job_id,) in conn.execute(query))
    return found
