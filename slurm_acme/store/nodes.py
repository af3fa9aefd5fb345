"""Queries of the node-health ledger: events per node, and drains and resumes.

The one writer of ``node_events`` and ``node_actions``. A diagnosis naming a
culprit is written by :func:`slurm_acme.store.failures.record_failure` through
:func:`insert_events` (plain SQL) in the same transaction, so a failure and its ledger
event never disagree; health checks and the node collector call
:func:`record_events`.
"""

from __future__ import annotations

import getpass
import os
import pwd
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slurm_acme.store.dbapi import Db
from slurm_acme.store.engine import Store, store_door
from slurm_acme.store.failures import decode_evidence, encode_evidence

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Connection

#: Where a ledger event came from.
SOURCES = ("diagnosis", "health", "hardware")
#: The columns that make an event unique (a re-sent collector flush lands once).
EVENT_KEY = ("cluster", "node", "ts", "source", "code", "gpu_index")


_XID = re.compile(r"\b(?:Xid|XID)\b(?:\s*\([^)]*\))?:?\s*(\d+)\b")


def xid_in(lines: Iterable[str]) -> int | None:
    """The first XID code a log excerpt shows (``NVRM: Xid (PCI:...): 79, ...``), if any."""
    for line in lines:
        match = _XID.search(line)
        if match:
            return int(match.group(1))
    return None


def diagnosis_code(rule_id: str | None, evidence: Iterable[str]) -> str:
    """A diagnosis event's code: ``xid:N`` when its evidence shows an XID (so a
    decisive XID in a job's log drains like one the collector saw), else the rule id."""
    xid = xid_in(evidence)
    return f"xid:{xid}" if xid is not None else (rule_id or "")


@dataclass(frozen=True)
class NodeEvent:
    """One infrastructure event that implicates ``node``."""

    cluster: str
    node: str
    ts: float
    source: str
    category: str
    code: str = ""
    gpu_index: int | None = None
    job_id: str | None = None
    run_id: str | None = None
    failure_id: int | None = None
    evidence: tuple[str, ...] = ()
    reporter: str | None = None
    id: int | None = None

    def row(self) -> dict[str, object]:
        return {"cluster": self.cluster, "node": self.node, "ts": self.ts, "source": self.source,
                "category": self.category, "code": self.code, "gpu_index": self.gpu_index,
                "job_id": self.job_id, "run_id": self.run_id, "failure_id": self.failure_id,
                "evidence": encode_evidence(self.evidence), "reporter": self.reporter or whoami()}

    def to_dict(self) -> dict[str, object]:
        return {**self.row(), "evidence": list(self.evidence), "id": self.id}


@dataclass(frozen=True)
class NodeAction:
    """A drain or a resume, and who made it."""

    cluster: str
    node: str
    ts: float
    action: str  # drain / resume
    reason: str
    by_user: str
    id: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "node": self.node, "ts": self.ts, "action": self.action,
                "reason": self.reason, "by_user": self.by_user}


@dataclass(frozen=True)
class NodeHistory:
    """Everything the ledger holds about one node, oldest first."""

    node: str
    events: tuple[NodeEvent, ...] = ()
    actions: tuple[NodeAction, ...] = ()


def whoami() -> str:
    """The Unix user of this process (from the kernel, not ``$USER``)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return getpass.getuser()


def insert_events(db: Db, events: Sequence[NodeEvent]) -> int:
    """Write ``events`` in an open plain-SQL transaction (duplicates of :data:`EVENT_KEY`
    skipped). Plain SQL: ``sacme diagnose`` records a culprit's event with its diagnosis."""
    return db.insert("node_events", [e.row() for e in events], ignore_conflicts_on=EVENT_KEY)


@store_door
def record_events(store: Store, events: Iterable[NodeEvent]) -> int:
    """Add events to the ledger; returns how many were sent."""
    wanted = list(events)
    if not wanted:
        return 0
    with store.writing() as db:
        return insert_events(db, wanted)


def _event(r: Mapping[Any, Any]) -> NodeEvent:
    return NodeEvent(cluster=r["cluster"], node=r["node"], ts=r["ts"], source=r["source"],
                     category=r["category"], code=r["code"] or "", gpu_index=r["gpu_index"],
                     job_id=r["job_id"], run_id=r["run_id"], failure_id=r["failure_id"],
                     evidence=decode_evidence(r["evidence"]), reporter=r["reporter"], id=r["id"])


def _action(r: Mapping[Any, Any]) -> NodeAction:
    return NodeAction(cluster=r["cluster"], node=r["node"], ts=r["ts"], action=r["action"],
                      reason=r["reason"] or "", by_user=r["by_user"], id=r["id"])


def _of_nodes(columns: Any, cluster: str | None, nodes: Iterable[str] | None) -> list[Any]:
    """The WHERE terms both ledger tables share: one cluster, some nodes."""
    conds: list[Any] = []
    if cluster is not None:
        conds.append(columns.cluster == cluster)
    if nodes is not None:
        conds.append(columns.node.in_(list(nodes)))
    return conds


@store_door
def list_events(store: Store, *, cluster: str | None = None, nodes: Iterable[str] | None = None,
                since: float | None = None) -> list[NodeEvent]:
    """Ledger events, oldest first, optionally of some nodes and since a time."""
    from sqlalchemy import and_, select

    from slurm_acme.store.schema.nodes import node_events

    e = node_events.c
    conds = _of_nodes(e, cluster, nodes)
    if since is not None:
        conds.append(e.ts >= since)
    query = select(node_events).where(and_(True, *conds)).order_by(e.ts, e.id)
    with store.engine.connect() as conn:
        return [_event(r) for r in conn.execute(query).mappings()]


@store_door
def list_actions(store: Store, *, cluster: str | None = None,
                 nodes: Iterable[str] | None = None) -> list[NodeAction]:
    """Drains and resumes, oldest first."""
    from sqlalchemy import and_, select

    from slurm_acme.store.schema.nodes import node_actions

    a = node_actions.c
    query = select(node_actions).where(and_(True, *_of_nodes(a, cluster, nodes))).order_by(a.ts, a.id)
    with store.engine.connect() as conn:
        return [_action(r) for r in conn.execute(query).mappings()]


@store_door
def record_action(store: Store, *, cluster: str, node: str, action: str, reason: str,
                  by_user: str | None = None, ts: float | None = None) -> NodeAction:
    """Record a drain or resume slurm-acme made (after Slurm accepted it)."""
    if action not in ("drain", "resume"):
        raise ValueError(f"unknown node action {action!r}")
    made = NodeAction(cluster=cluster, node=node, ts=time.time() if ts is None else ts,
                      action=action, reason=reason, by_user=by_user or whoami())
    with store.engine.begin() as conn:
        insert_action(conn, made)
    return made


@store_door
def histories(store: Store, *, cluster: str | None = None,
              nodes: Iterable[str] | None = None) -> dict[str, NodeHistory]:
    """Each node's events and actions (only nodes the ledger knows)."""
    wanted = list(nodes) if nodes is not None else None
    events = list_events(store, cluster=cluster, nodes=wanted)
    actions = list_actions(store, cluster=cluster, nodes=wanted)
    names = sorted({e.node for e in events} | {a.node for a in actions})
    return {n: NodeHistory(node=n, events=tuple(e for e in events if e.node == n),
                           actions=tuple(a for a in actions if a.node == n)) for n in names}


@dataclass(frozen=True)
class NodeLoss:
    """What failures on one node cost: events, distinct jobs hit, GPU time lost."""

    node: str
    events: int
    jobs_hit: int
    gpu_time_lost_s: float
    categories: tuple[str, ...]


@dataclass
class _Tally:
    events: int = 0
    jobs: set[str] = field(default_factory=set)
    failures: set[int] = field(default_factory=set)
    lost: float = 0.0
    categories: set[str] = field(default_factory=set)


@store_door
def node_losses(store: Store, *, cluster: str | None = None, since: float | None = None,
                until: float | None = None) -> list[NodeLoss]:
    """Per node: ledger events, jobs hit, and the GPU time of the failed attempts
    that named it (``gpus x time to failure`` of their diagnoses), worst first."""
    with store.engine.connect() as conn:
        return losses_on(conn, window_conds(cluster, since, until))


def window_conds(cluster: str | None, since: float | None, until: float | None) -> list[ColumnElement[bool]]:
    """Conditions on ``node_events`` for a cluster and a ``[since, until)`` window."""
    from slurm_acme.store.schema.nodes import node_events

    e = node_events.c
    conds: list[ColumnElement[bool]] = []
    if cluster is not None:
        conds.append(e.cluster == cluster)
    if since is not None:
        conds.append(e.ts >= since)
    if until is not None:
        conds.append(e.ts < until)
    return conds


def losses_on(conn: Connection, conds: Sequence[ColumnElement[bool]]) -> list[NodeLoss]:
    """:func:`node_losses` on an open connection, for the events ``conds`` select
    (the report adds its own, e.g. only the selected jobs)."""
    from sqlalchemy import and_, select

    from slurm_acme.store.schema.failures import failures
    from slurm_acme.store.schema.nodes import node_events

    e, f = node_events.c, failures.c
    query = (select(e.node, e.category, e.job_id, e.failure_id, f.gpus, f.time_to_failure_s)
             .select_from(node_events.outerjoin(failures, f.id == e.failure_id))
             .where(and_(True, *conds)))
    per: dict[str, _Tally] = {}
    for node, category, job_id, failure_id, gpus, ttf in conn.execute(query):
        tally = per.setdefault(node, _Tally())
        tally.events += 1
        tally.categories.add(category)
        if job_id:
            tally.jobs.add(job_id)
        if failure_id is not None and failure_id not in tally.failures:
            tally.failures.add(failure_id)
            tally.lost += float(gpus or 0) * float(ttf or 0.0)
    out = [NodeLoss(node=n, events=t.events, jobs_hit=len(t.jobs), gpu_time_lost_s=t.lost,
                    categories=tuple(sorted(t.categories))) for n, t in per.items()]
    return sorted(out, key=lambda x: (-x.gpu_time_lost_s, -x.events, x.node))


def count_events(store: Store) -> int:
    from sqlalchemy import func, select

    from slurm_acme.store.schema.nodes import node_events

    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(node_events)).scalar_one())


@contextmanager
def drain_lock(store: Store) -> Iterator[Connection]:
    """One drainer at a time across the cluster (every collector may see its GPU fail
    in the same second): the share cap is checked and acted on under this lock.
    Postgres: an advisory lock for the transaction; SQLite: ``BEGIN IMMEDIATE``."""
    if store.dialect == "sqlite":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.exec_driver_sql("COMMIT")
            except BaseException:
                conn.exec_driver_sql("ROLLBACK")
                raise
        return
    from sqlalchemy import text

    with store.engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(716372)"))
        yield conn


def insert_action(conn: Connection, action: NodeAction) -> None:
    """Record a drain or resume on an open transaction (the drain lock's)."""
    from slurm_acme.store.schema.nodes import node_actions

    conn.execute(node_actions.insert().values(**action.to_dict()))
