"""Queries for fault-tolerant runs: runs, their attempts, their failures and checkpoints.

A run keeps one identity (``run_id``) across every attempt and every Slurm
job id; the supervisor of each attempt writes here, ``sacme status`` reads.
What ``sacme status`` reads is plain SQL (:mod:`slurm_acme.store.dbapi`), so the
command starts without SQLAlchemy; the writers use SQLAlchemy Core.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from slurm_acme.store import failures as failure_store
from slurm_acme.store.engine import Store
from slurm_acme.store.rows import columns_of, newest_rows


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


def _record(cls: type, row: dict[str, Any]) -> Any:
    return cls(**{f.name: row[f.name] for f in fields(cls)})


_RUN_COLUMNS = columns_of(RunRow)
_ATTEMPT_COLUMNS = columns_of(AttemptRow)
_CHECKPOINT_COLUMNS = columns_of(CheckpointRow)


# ------------------------------------------------------------------ runs

def create_run(store: Store, *, run_id: str, name: str, cluster: str, user: str | None,
               spec: str, workdir: str | None, created_ts: float,
               job_id: str | None = None, state: str = "SUBMITTED") -> None:
    from sqlalchemy import insert

    from slurm_acme.store.schema.core import runs

    with store.engine.begin() as conn:
        conn.execute(insert(runs).values(
            run_id=run_id, name=name, cluster=cluster, user=user, spec=spec, workdir=workdir,
            created_ts=created_ts, state=state, last_job_id=job_id))


def delete_run(store: Store, run_id: str) -> None:
    """Undo :func:`create_run` when the submission it described failed."""
    from slurm_acme.store.schema.core import runs

    with store.engine.begin() as conn:
        conn.execute(runs.delete().where(runs.c.run_id == run_id))


def update_run(store: Store, run_id: str, **values: Any) -> None:
    from sqlalchemy import update

    from slurm_acme.store.schema.core import runs

    with store.engine.begin() as conn:
        conn.execute(update(runs).where(runs.c.run_id == run_id).values(**values))


def get_run(store: Store, run_id: str) -> RunRow | None:
    with store.reading() as db:
        row = db.first(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
    return _record(RunRow, row) if row else None


def find_run(store: Store, ref: str, user: str | None = None) -> RunRow | None:
    """A run by its id, by any Slurm job id it ran as, or by its name (newest; of
    ``user``'s runs only when given, so a name another user also chose is not theirs)."""
    run = get_run(store, ref)
    if run:
        return run
    with store.reading() as db:
        run_id = db.scalar("SELECT run_id FROM runs WHERE last_job_id = ?", (ref,))
        if run_id is None:
            run_id = db.scalar("SELECT run_id FROM attempts WHERE job_id = ? LIMIT 1", (ref,))
        if run_id is None:
            mine = ' AND "user" = ?' if user is not None else ""
            run_id = db.scalar(f"SELECT run_id FROM runs WHERE name = ?{mine} ORDER BY created_ts DESC LIMIT 1",
                               (ref, user) if user is not None else (ref,))
    return get_run(store, run_id) if run_id else None


def latest_runs(store: Store, limit: int = 20, user: str | None = None) -> list[RunRow]:
    """The newest runs, of ``user`` only when given."""
    with store.reading() as db:
        rows = newest_rows(db, "runs", _RUN_COLUMNS, limit=limit, user=user)
    return [_record(RunRow, r) for r in rows]


# -------------------------------------------------------------- attempts

def start_attempt(store: Store, *, run_id: str, attempt: int, job_id: str, nodelist: str,
                  start_ts: float, resumed_from_step: int | None = None,
                  resumed_from: str | None = None, skip_steps: str = "") -> None:
    """Record that attempt ``attempt`` began (idempotent: a re-run updates it)."""
    from slurm_acme.store.rows import upsert
    from slurm_acme.store.schema.core import attempts

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
    from sqlalchemy import update

    from slurm_acme.store.schema.core import attempts

    with store.engine.begin() as conn:
        conn.execute(update(attempts).where(
            (attempts.c.run_id == run_id) & (attempts.c.attempt == attempt)
            & (attempts.c.job_id == job_id)).values(**values))


def list_attempts(store: Store, run_id: str) -> list[AttemptRow]:
    with store.reading() as db:
        rows = db.rows(f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE run_id = ? ORDER BY start_ts, attempt",
                       (run_id,))
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
    from slurm_acme.store.rows import upsert
    from slurm_acme.store.schema.ckpt import checkpoints

    with store.engine.begin() as conn:
        upsert(conn, checkpoints, [{
            "run_id": run_id, "job_id": job_id, "step": step, "path": path, "bytes": size,
            "checksum": checksum, "healthy": healthy, "created_ts": created_ts,
        }], ["run_id", "step"])


def sync_checkpoints(store: Store, *, run_id: str, job_id: str | None,
                     present: list[tuple[int, str, float | None, str | None, float]]) -> None:
    """Make the run's checkpoint rows what is on disk: ``present`` is (step, path, bytes,
    checksum, created_ts) of each; rows of steps no longer there are removed."""
    from slurm_acme.store.rows import upsert
    from slurm_acme.store.schema.ckpt import checkpoints

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
    with store.reading() as db:
        rows = db.rows(f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? ORDER BY step", (run_id,))
    return [_record(CheckpointRow, {**r, "healthy": bool(r["healthy"])}) for r in rows]
