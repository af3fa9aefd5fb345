"""Queries for diagnosed failures, labelled cases and learned rules.

The diagnose package hands in plain values and gets plain records back; it
never sees SQL. Works the same on SQLite and Postgres.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from slurm_acme.store.engine import Store
from slurm_acme.store.rows import upsert
from slurm_acme.store.schema.failures import failure_cases, failure_rules, failures


@dataclass(frozen=True)
class FailureRecord:
    """One stored diagnosis."""

    id: int
    ts: float
    category: str
    origin: str
    action: str | None
    node: str | None
    rule_id: str | None
    confidence: float | None
    evidence: tuple[str, ...]
    source: str | None
    job_id: str | None
    run_id: str | None
    attempt: int | None
    log_path: str | None


@dataclass(frozen=True)
class CaseRecord:
    """One labelled case as stored."""

    id: int
    text: str
    category: str
    origin: str
    source: str | None


def record_failure(
    store: Store,
    diagnosis: Mapping[str, Any],
    *,
    cluster: str | None = None,
    job_id: str | None = None,
    run_id: str | None = None,
    attempt: int | None = None,
    log_path: str | None = None,
    gpus: int | None = None,
    ts: float | None = None,
) -> int:
    """Store a diagnosis (``Diagnosis.to_dict()``); returns the new row id."""
    row = {
        "cluster": cluster, "job_id": job_id, "run_id": run_id, "attempt": attempt,
        "ts": time.time() if ts is None else ts,
        "category": diagnosis["category"], "origin": diagnosis["origin"],
        "action": diagnosis.get("action"), "node": diagnosis.get("node"),
        "rule_id": diagnosis.get("rule_id"), "confidence": diagnosis.get("confidence"),
        "evidence": json.dumps(list(diagnosis.get("evidence") or ()), ensure_ascii=False),
        "source": diagnosis.get("source"), "gpus": gpus, "log_path": log_path,
    }
    with store.engine.begin() as conn:
        result = conn.execute(failures.insert().returning(failures.c.id), row)
        return int(result.scalar_one())


def list_failures(store: Store, *, job_id: str | None = None, limit: int = 100) -> list[FailureRecord]:
    """Most recent diagnoses first, optionally of one job."""
    query = select(failures).order_by(failures.c.ts.desc(), failures.c.id.desc()).limit(limit)
    if job_id is not None:
        query = query.where(failures.c.job_id == job_id)
    with store.engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    return [
        FailureRecord(
            id=r["id"], ts=r["ts"], category=r["category"], origin=r["origin"], action=r["action"],
            node=r["node"], rule_id=r["rule_id"], confidence=r["confidence"],
            evidence=tuple(json.loads(r["evidence"] or "[]")), source=r["source"],
            job_id=r["job_id"], run_id=r["run_id"], attempt=r["attempt"], log_path=r["log_path"],
        )
        for r in rows
    ]


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def add_cases(store: Store, cases: Iterable[tuple[str, str, str, str]]) -> int:
    """Insert (text, category, origin, source) cases; a text already stored is skipped."""
    rows = [
        {"text": text, "category": category, "origin": origin, "source": source, "digest": text_digest(text)}
        for text, category, origin, source in cases
    ]
    rows = list({r["digest"]: r for r in rows}.values())
    with store.engine.begin() as conn:
        return upsert(conn, failure_cases, rows, ["digest"], update=())


def count_cases(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(failure_cases)).scalar_one())


def load_cases(store: Store) -> list[CaseRecord]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(failure_cases).order_by(failure_cases.c.id)).mappings().all()
    return [
        CaseRecord(id=r["id"], text=r["text"], category=r["category"], origin=r["origin"], source=r["source"])
        for r in rows
    ]


def _ensure_rules_table(conn) -> None:  # type: ignore[no-untyped-def]
    """Stores created before learned rules existed get the table on first use."""
    failure_rules.create(conn, checkfirst=True)


def save_rule(store: Store, rule: Mapping[str, Any], *, case_text: str | None = None, source: str = "llm") -> None:
    """Store a learned rule (``id``, ``pattern``, ``category``, ``origin``, ``action``, ``node``, ``keywords``)."""
    row = {
        "rule_id": rule["id"], "pattern": rule["pattern"], "category": rule["category"],
        "origin": rule["origin"], "action": rule["action"], "node": rule.get("node"),
        "keywords": json.dumps(list(rule.get("keywords") or [])),
        "created_ts": time.time(), "case_digest": text_digest(case_text) if case_text else None,
        "source": source,
    }
    with store.engine.begin() as conn:
        _ensure_rules_table(conn)
        upsert(conn, failure_rules, [row], ["rule_id"])


def load_rules(store: Store) -> list[dict[str, Any]]:
    """Learned rules, oldest first, as rule-book mappings."""
    with store.engine.begin() as conn:
        _ensure_rules_table(conn)
        rows = conn.execute(select(failure_rules).order_by(failure_rules.c.id)).mappings().all()
    out: list[dict[str, Any]] = []
    for r in rows:
        rule = {k: r[k] for k in ("pattern", "category", "origin", "action")}
        rule["id"] = r["rule_id"]
        if r["node"]:
            rule["node"] = r["node"]
        if r["keywords"]:
            rule["keywords"] = json.loads(r["keywords"])
        out.append(rule)
    return out


def failures_by_category(store: Store) -> Sequence[tuple[str, str, int]]:
    """(category, origin, count) over all stored diagnoses, largest first."""
    query = (
        select(failures.c.category, failures.c.origin, func.count())
        .group_by(failures.c.category, failures.c.origin)
        .order_by(func.count().desc())
    )
    with store.engine.connect() as conn:
        return [(c, o, int(n)) for c, o, n in conn.execute(query)]
