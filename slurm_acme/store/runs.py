"""Queries for fault-tolerant runs: runs, their attempts, their failures and checkpoints.

A run keeps one identity (``run_id``) across every attempt and every Slurm
job id; the supervisor of each attempt writes here, ``sacme status`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import insert, select, update

from slurm_acme.store import failures as failure_store
from slurm_acme.store.engine import Store
from slurm_acme.store.rows import newest_rows, upsert
from slurm_acme.store.schema.ckpt import checkpoints
from slurm_acme.store.schema.core import attempts, runs


@dataclass(frozen=True)
class RunRow:
    run_id: str
    name: str
    cluster: str
    user: str | None
    spec: str
    workdir: str | None
    created_ts: float
    state: str
    last_job_id: str | None
    reason: str | None


@dataclass(frozen=True)
class AttemptRow:
    run_id: str
    attempt: int
    job_id: str
    nodelist: str | None
    start_ts: float
    end_ts: float | None
    outcome: str | None
    exit_code: int | None
    resumed_from_step: int | None
    resumed_from: str | None
    excluded_nodes: str | None
    skip_steps: str | None
    last_step: int | None
    time_lost_s: float | None
    failure_id: int | None
    detail: str | None

    @property
    def excluded(self) -> list[str]:
        return json.loads(self.excluded_nodes) if self.excluded_nodes else []

    @property
    def details(self) -> dict[str, Any]:
        return json.loads(self.detail) if self.detail else {}


@dataclass(frozen=True)
class CheckpointRow:
    step: int
    path: str
    bytes: float | None
    checksum: str | None
    healthy: bool
    created_ts: float
    job_id: str | None


def _record(cls: type, row: Any) -> Any:
    mapping = row._mapping
    return cls(**{f.name: mapping[f.name] for f in fields(cls)})


# ------------------------------------------------------------------ runs

def create_run(store: Store, *, run_id: str, name: str, cluster: str, user: str | None,
               spec: str, workdir: str | None, created_ts: float,
               job_id: str | None = None, state: str = "SUBMITTED") -> None:
    with store.engine.begin() as conn:
        conn.execute(insert(runs).values(
            run_id=run_id, name=name, cluster=cluster, user=user, spec=spec, workdir=workdir,
            created_ts=created_ts, state=state, last_job_id=job_id))


def delete_run(store: Store, run_id: str) -> None:
    """Undo :func:`create_run` when the submission it described failed."""
    with store.engine.begin() as conn:
        conn.execute(runs.delete().where(runs.c.run_id == run_id))


def update_run(store: Store, run_id: str, **values: Any) -> None:
    with store.engine.begin() as conn:
        conn.execute(update(runs).where(runs.c.run_id == run_id).values(**values))


def get_run(store: Store, run_id: str) -> RunRow | None:
    with store.engine.connect() as conn:
        row = conn.execute(select(runs).where(runs.c.run_id == run_id)).first()
    return _record(RunRow, row) if row else None


def find_run(store: Store, ref: str, user: str | None = None) -> RunRow | None:
    """A run by its id, by any Slurm job id it ran as, or by its name (newest; of
    ``user``'s runs only when given, so a name another user also chose is not theirs)."""
    run = get_run(store, ref)
    if run:
        return run
    with store.engine.connect() as conn:
        run_id = conn.execute(select(runs.c.run_id).where(runs.c.last_job_id == ref)).scalar()
        if run_id is None:
            run_id = conn.execute(select(attempts.c.run_id).where(attempts.c.job_id == ref)
                                  .limit(1)).scalar()
        if run_id is None:
            by_name = select(runs.c.run_id).where(runs.c.name == ref)
            if user is not None:
                by_name = by_name.where(runs.c.user == user)
            run_id = conn.execute(by_name.order_by(runs.c.created_ts.desc()).limit(1)).scalar()
    return get_run(store, run_id) if run_id else None


def latest_runs(store: Store, limit: int = 20, user: str | None = None) -> list[RunRow]:
    """The newest runs, of ``user`` only when given."""
    with store.engine.connect() as conn:
        rows = newest_rows(conn, runs, limit=limit, user=user)
    return [_record(RunRow, r) for r in rows]


# -------------------------------------------------------------- attempts

def start_attempt(store: Store, *, run_id: str, attempt: int, job_id: str, nodelist: str,
                  start_ts: float, resumed_from_step: int | None = None,
                  resumed_from: str | None = None, skip_steps: str = "") -> None:
    """Record that attempt ``attempt`` began (idempotent: a re-run updates it)."""
    with store.engine.begin() as conn:
        upsert(conn, attempts, [{
            "run_id": run_id, "attempt": attempt, "job_id": job_id, "nodelist": nodelist,
            "start_ts": start_ts, "resumed_from_step": resumed_from_step,
            "resumed_from": resumed_from, "skip_steps": skip_steps,
        }], ["run_id", "attempt", "job_id"])


def end_attempt(store: Store, *, run_id: str, attempt: int, job_id: str, end_ts: float,
                outcome: str, exit_code: int | None = None, excluded: list[str] | None = None,
                last_step: int | None = None, time_lost_s: float | None = None,
                failure_id: int | None = None, detail: dict[str, Any] | None = None) -> None:
    """Record how an attempt ended and what the supervisor decided."""
    values: dict[str, Any] = {"end_ts": end_ts, "outcome": outcome, "exit_code": exit_code,
                              "last_step": last_step, "time_lost_s": time_lost_s,
                              "failure_id": failure_id}
    if excluded is not None:
        values["excluded_nodes"] = json.dumps(sorted(set(excluded)))
    if detail is not None:
        values["detail"] = json.dumps(detail, sort_keys=True)
    with store.engine.begin() as conn:
        conn.execute(update(attempts).where(
            (attempts.c.run_id == run_id) & (attempts.c.attempt == attempt)
            & (attempts.c.job_id == job_id)).values(**values))


def list_attempts(store: Store, run_id: str) -> list[AttemptRow]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(attempts).where(attempts.c.run_id == run_id)
                            .order_by(attempts.c.start_ts, attempts.c.attempt)).all()
    return [_record(AttemptRow, r) for r in rows]


# -------------------------------------------------------------- failures
# One record and one writer for the ``failures`` table live in
# :mod:`slurm_acme.store.failures`; a run's attempts point at its rows.

def record_failure(store: Store, *, cluster: str, job_id: str, run_id: str, attempt: int,
                   ts: float, category: str, origin: str, action: str | None,
                   node: str | None, rule_id: str | None, confidence: float | None,
                   evidence: Sequence[str] | str | None, source: str | None, gpus: int | None,
                   time_to_failure_s: float | None, log_path: str | None) -> int:
    """The supervisor's keyword form of :func:`slurm_acme.store.failures.record_failure`."""
    diagnosis = {"category": category, "origin": origin, "action": action, "node": node,
                 "rule_id": rule_id, "confidence": confidence, "evidence": evidence,
                 "source": source}
    return failure_store.record_failure(
        store, diagnosis, cluster=cluster, job_id=job_id, run_id=run_id, attempt=attempt,
        ts=ts, gpus=gpus, time_to_failure_s=time_to_failure_s, log_path=log_path)


get_failures = failure_store.get_failures
set_failure_recovery = failure_store.set_failure_recovery


# ----------------------------------------------------------- checkpoints

def record_checkpoint(store: Store, *, run_id: str, job_id: str | None, step: int, path: str,
                      size: float | None, checksum: str | None, healthy: bool,
                      created_ts: float) -> None:
    with store.engine.begin() as conn:
        upsert(conn, checkpoints, [{
            "run_id": run_id, "job_id": job_id, "step": step, "path": path, "bytes": size,
            "checksum": checksum, "healthy": healthy, "created_ts": created_ts,
        }], ["run_id", "step"])


def sync_checkpoints(store: Store, *, run_id: str, job_id: str | None,
                     present: list[tuple[int, str, float | None, str | None, float]]) -> None:
    """Make the run's checkpoint rows what is on disk: ``present`` is (step, path, bytes,
    checksum, created_ts) of each; rows of steps no longer there are removed."""
    steps = [step for step, *_ in present]
    with store.engine.begin() as conn:
        conn.execute(checkpoints.delete().where(
            (checkpoints.c.run_id == run_id) & checkpoints.c.step.not_in(steps)))
        if present:
            upsert(conn, checkpoints, [{
                "run_id": run_id, "job_id": job_id, "step": step, "path": path, "bytes": size,
                "checksum": checksum, "healthy": True, "created_ts": created_ts,
            } for step, path, size, checksum, created_ts in present], ["run_id", "step"])


def list_checkpoints(store: Store, run_id: str) -> list[CheckpointRow]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(checkpoints).where(checkpoints.c.run_id == run_id)
                            .order_by(checkpoints.c.step)).all()
    return [_record(CheckpointRow, r) for r in rows]
