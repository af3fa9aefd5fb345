"""Queries for diagnosed failures, labelled cases and learned rules.

The diagnose package hands in plain values and gets plain records back; it
never sees SQL. Works the same on SQLite and Postgres. What ``sacme diagnose``
and ``sacme status`` run (record a diagnosis, read diagnoses and learned rules)
is plain SQL (:mod:`slurm_acme.store.dbapi`), so they start without SQLAlchemy.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_acme.store.dbapi import Db
from slurm_acme.store.engine import Store, is_database_error
from slurm_acme.store.rows import columns_of, upsert


@dataclass(frozen=True)
class FailureRecord:
    """One stored diagnosis: the only record of the ``failures`` table.

    ``evidence`` is always a tuple of lines, whichever writer stored the row
    (rows written before the writers were merged hold either a JSON list or
    newline-separated text; :func:`decode_evidence` reads both).
    """

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
    cluster: str | None = None
    job_id: str | None = None
    run_id: str | None = None
    attempt: int | None = None
    gpus: int | None = None
    time_to_failure_s: float | None = None
    recovery_s: float | None = None
    log_path: str | None = None


def encode_evidence(evidence: Iterable[str] | str | None) -> str:
    """Evidence lines as stored: a JSON list (a bare string is one line per text line)."""
    if evidence is None:
        lines: list[str] = []
    elif isinstance(evidence, str):
        lines = evidence.splitlines()
    else:
        lines = [str(line) for line in evidence]
    return json.dumps(lines, ensure_ascii=False)


def decode_evidence(stored: str | None) -> tuple[str, ...]:
    """Evidence lines of a stored row: a JSON list, or the old newline-separated text."""
    if not stored:
        return ()
    if stored.startswith("["):
        try:
            value = json.loads(stored)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, list):
            return tuple(str(line) for line in value)
    return tuple(stored.splitlines())


def _as_mapping(diagnosis: Any) -> Mapping[str, Any]:
    if isinstance(diagnosis, Mapping):
        return diagnosis
    to_dict = getattr(diagnosis, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raise TypeError(f"record_failure needs a Diagnosis or a mapping, got {type(diagnosis).__name__}")


def record_failure(
    store: Store,
    diagnosis: Any,
    *,
    cluster: str | None = None,
    job_id: str | None = None,
    run_id: str | None = None,
    attempt: int | None = None,
    log_path: str | None = None,
    gpus: int | None = None,
    time_to_failure_s: float | None = None,
    ts: float | None = None,
) -> int:
    """Store a diagnosis (a ``Diagnosis``, anything with ``to_dict()``, or its mapping);
    returns the new row id. The one writer of the ``failures`` table."""
    data = _as_mapping(diagnosis)
    row = {
        "cluster": cluster, "job_id": job_id, "run_id": run_id, "attempt": attempt,
        "ts": time.time() if ts is None else ts,
        "category": data["category"], "origin": data["origin"],
        "action": data.get("action"), "node": data.get("node"),
        "rule_id": data.get("rule_id"), "confidence": data.get("confidence"),
        "evidence": encode_evidence(data.get("evidence")),
        "source": data.get("source"), "gpus": gpus, "time_to_failure_s": time_to_failure_s,
        "log_path": log_path,
    }
    with store.writing() as db:
        failure_id = int(db.insert("failures", [row], returning="id"))
        event = culprit_event(row, failure_id)
        if event is not None:
            from slurm_acme.store.nodes import insert_events

            insert_events(db, [event])
        return failure_id


def culprit_event(row: Mapping[str, Any], failure_id: int) -> Any:
    """The ledger event of a stored diagnosis: an infrastructure failure that names
    its culprit node; None otherwise. A health check's finding (``source`` health)
    is not one: the health check writes its own events, one per bad node."""
    if row["origin"] != "infrastructure" or not row.get("node") or row.get("source") == "health":
        return None
    from slurm_acme.store.nodes import NodeEvent, diagnosis_code

    evidence = decode_evidence(row["evidence"])
    return NodeEvent(cluster=row.get("cluster") or "", node=str(row["node"]), ts=float(row["ts"]),
                     source="diagnosis", category=str(row["category"]),
                     code=diagnosis_code(row.get("rule_id"), evidence), job_id=row.get("job_id"),
                     run_id=row.get("run_id"), failure_id=failure_id, evidence=evidence)


#: The stored columns of a diagnosis (``evidence`` decoded into lines on reading).
_FAILURE_COLUMNS = columns_of(FailureRecord)


def _failure_record(r: Mapping[str, Any]) -> FailureRecord:
    return FailureRecord(**{**r, "evidence": decode_evidence(r["evidence"])})


def list_failures(store: Store, *, job_id: str | None = None, limit: int = 100) -> list[FailureRecord]:
    """Most recent diagnoses first, optionally of one job."""
    of_job = " WHERE job_id = ?" if job_id is not None else ""
    params = (job_id, int(limit)) if job_id is not None else (int(limit),)
    with store.reading() as db:
        rows = db.rows(f"SELECT {_FAILURE_COLUMNS} FROM failures{of_job} ORDER BY ts DESC, id DESC LIMIT ?", params)
    return [_failure_record(r) for r in rows]


def get_failures(store: Store, ids: Iterable[int]) -> dict[int, FailureRecord]:
    """Stored diagnoses by row id."""
    wanted = [int(i) for i in ids]
    if not wanted:
        return {}
    marks = ", ".join("?" for _ in wanted)
    with store.reading() as db:
        rows = db.rows(f"SELECT {_FAILURE_COLUMNS} FROM failures WHERE id IN ({marks})", wanted)
    return {r["id"]: _failure_record(r) for r in rows}


def set_failure_recovery(store: Store, failure_id: int, recovery_s: float) -> None:
    """How long the run took to get going again after this failure."""
    from slurm_acme.store.schema.failures import failures

    with store.engine.begin() as conn:
        conn.execute(failures.update().where(failures.c.id == failure_id).values(recovery_s=recovery_s))


@dataclass(frozen=True)
class CaseRecord:
    """One labelled case as stored."""

    id: int
    text: str
    category: str
    origin: str
    source: str | None


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def add_cases(store: Store, cases: Iterable[tuple[str, str, str, str]]) -> int:
    """Insert (text, category, origin, source) cases; a text already stored is skipped."""
    rows = [
        {"text": text, "category": category, "origin": origin, "source": source, "digest": text_digest(text)}
        for text, category, origin, source in cases
    ]
    rows = list({r["digest"]: r for r in rows}.values())
    from slurm_acme.store.schema.failures import failure_cases

    with store.engine.begin() as conn:
        return upsert(conn, failure_cases, rows, ["digest"], update=())


def add_case(store: Store, text: str, category: str, origin: str, source: str) -> int:
    """Insert one labelled case (a confirmed diagnosis); returns its id (the existing one for a known text)."""
    add_cases(store, [(text, category, origin, source)])
    from sqlalchemy import select

    from slurm_acme.store.schema.failures import failure_cases

    with store.engine.connect() as conn:
        return int(conn.execute(select(failure_cases.c.id).where(
            failure_cases.c.digest == text_digest(text))).scalar_one())


def save_vectors(store: Store, model: str, vectors: Mapping[int, Any]) -> int:
    """Store case vectors (case id -> float32 numpy vector) for ``model``; existing rows are kept."""
    rows = [{"case_id": int(case_id), "model": model, "dims": len(vector),
             "vector": vector.astype("<f4").tobytes()} for case_id, vector in vectors.items()]
    if not rows:
        return 0
    from slurm_acme.store.schema.failures import failure_case_vectors

    with store.engine.begin() as conn:
        return upsert(conn, failure_case_vectors, rows, ["case_id", "model"], update=())


def load_vectors(store: Store, model: str) -> dict[int, Any]:
    """Case id -> float32 numpy vector for ``model``."""
    import numpy as np
    from sqlalchemy import select

    from slurm_acme.store.schema.failures import failure_case_vectors

    with store.engine.connect() as conn:
        rows = conn.execute(select(failure_case_vectors.c.case_id, failure_case_vectors.c.vector)
                            .where(failure_case_vectors.c.model == model)).all()
    return {int(case_id): np.frombuffer(blob, dtype="<f4") for case_id, blob in rows}


def count_cases(store: Store) -> int:
    from sqlalchemy import func, select

    from slurm_acme.store.schema.failures import failure_cases

    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(failure_cases)).scalar_one())


def load_cases(store: Store) -> list[CaseRecord]:
    from sqlalchemy import select

    from slurm_acme.store.schema.failures import failure_cases

    with store.engine.connect() as conn:
        rows = conn.execute(select(failure_cases).order_by(failure_cases.c.id)).mappings().all()
    return [
        CaseRecord(id=r["id"], text=r["text"], category=r["category"], origin=r["origin"], source=r["source"])
        for r in rows
    ]


def _ensure_rules_table(conn) -> None:  # type: ignore[no-untyped-def]
    """Stores created before learned rules existed get the table on first use."""
    from slurm_acme.store.schema.failures import failure_rules

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
    from slurm_acme.store.schema.failures import failure_rules

    with store.engine.begin() as conn:
        _ensure_rules_table(conn)
        upsert(conn, failure_rules, [row], ["rule_id"])


def load_rules(store: Store) -> list[dict[str, Any]]:
    """Learned rules, oldest first, as rule-book mappings."""
    try:
        with store.reading() as db:
            rows = _stored_rules(db)
    except Exception as exc:
        if not is_database_error(exc):
            raise
        with store.engine.begin() as conn:  # a store older than learned rules: make the table
            _ensure_rules_table(conn)
        with store.reading() as db:
            rows = _stored_rules(db)
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


def _stored_rules(db: Db) -> list[dict[str, Any]]:
    return db.rows("SELECT rule_id, pattern, category, origin, action, node, keywords FROM failure_rules "
                   "ORDER BY id")


def failures_by_category(store: Store) -> Sequence[tuple[str, str, int]]:
    """(category, origin, count) over all stored diagnoses, largest first."""
    from sqlalchemy import func, select

    from slurm_acme.store.schema.failures import failures

    query = (
        select(failures.c.category, failures.c.origin, func.count())
        .group_by(failures.c.category, failures.c.origin)
        .order_by(func.count().desc())
    )
    with store.engine.connect() as conn:
        return [(c, o, int(n)) for c, o, n in conn.execute(query)]
