"""Queries of the evaluation domain: runs, trials, results and runtime priors."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sqlalchemy import select

from slurm_acme.store.dbapi import quoted
from slurm_acme.store.engine import Store
from slurm_acme.store.rows import newest_rows, upsert
from slurm_acme.store.schema.evaluate import eval_priors, eval_results, eval_runs, eval_trials


@dataclass(frozen=True)
class EvalRun:
    eval_id: str
    checkpoint: str
    model_size_b: float
    created_ts: float
    state: str
    job_ids: dict[str, str]
    run_dir: str
    mode: str
    finished_ts: float | None
    #: Who submitted it (None in stores older than schema 2).
    user: str | None = None


@dataclass(frozen=True)
class PriorRow:
    """A stored runtime prior (what ``evaluate.priors`` computes; the store only keeps it)."""

    gpu_s: float
    cpu_s: float
    samples: int


@dataclass(frozen=True)
class EvalResult:
    dataset: str
    metric: str
    score: float
    examples: int
    gpu_s: float
    cpu_s: float


def create_run(store: Store, *, eval_id: str, checkpoint: str, model_size_b: float, cluster: str,
               plan: Mapping[str, Any], job_ids: Mapping[str, str], run_dir: str, mode: str,
               state: str = "SUBMITTED", user: str | None = None) -> None:
    with store.engine.begin() as conn:
        conn.execute(eval_runs.insert().values(
            eval_id=eval_id, checkpoint=checkpoint, model_size_b=model_size_b, cluster=cluster, user=user,
            created_ts=time.time(), state=state, plan=json.dumps(plan), job_ids=json.dumps(dict(job_ids)),
            run_dir=run_dir, mode=mode))


def set_run_state(store: Store, eval_id: str, state: str, *, finished: bool = False) -> None:
    values: dict[str, Any] = {"state": state}
    if finished:
        values["finished_ts"] = time.time()
    with store.engine.begin() as conn:
        conn.execute(eval_runs.update().where(eval_runs.c.eval_id == eval_id).values(**values))


#: The ``eval_runs`` columns an :class:`EvalRun` is made of.
_RUN_COLUMNS = ("eval_id", "checkpoint", "model_size_b", "created_ts", "state", "job_ids", "run_dir", "mode",
                "finished_ts", "user")


def _run(row: Any) -> EvalRun:
    return EvalRun(row.eval_id, row.checkpoint, row.model_size_b or 0.0, row.created_ts, row.state,
                   json.loads(row.job_ids or "{}"), row.run_dir or "", row.mode or "", row.finished_ts,
                   row.user)


def get_run(store: Store, eval_id: str) -> EvalRun | None:
    with store.engine.connect() as conn:
        row = conn.execute(select(eval_runs).where(eval_runs.c.eval_id == eval_id)).first()
    return _run(row) if row else None


def list_runs(store: Store, limit: int = 20, user: str | None = None) -> list[EvalRun]:
    """The newest evaluations, of ``user`` only when given."""
    with store.reading() as db:
        rows = newest_rows(db, "eval_runs", quoted(_RUN_COLUMNS), limit=limit, user=user)
    return [_run(SimpleNamespace(**r)) for r in rows]


def latest_run_for(store: Store, checkpoint: str, user: str | None = None) -> EvalRun | None:
    """The newest run of a checkpoint that has results (else the newest at all); of
    ``user``'s runs only when given."""
    query = select(eval_runs).where(eval_runs.c.checkpoint == checkpoint)
    if user is not None:
        query = query.where(eval_runs.c.user == user)
    with store.engine.connect() as conn:
        rows = conn.execute(query.order_by(eval_runs.c.created_ts.desc())).all()
        for row in rows:
            if conn.execute(select(eval_results.c.id).where(eval_results.c.eval_id == row.eval_id)).first():
                return _run(row)
    return _run(rows[0]) if rows else None


def record_trials(store: Store, eval_id: str, trials: Sequence[Mapping[str, Any]]) -> None:
    rows = [{"eval_id": eval_id, **t} for t in trials]
    with store.engine.begin() as conn:
        upsert(conn, eval_trials, rows, ["eval_id", "trial"])


def record_results(store: Store, eval_id: str, results: Sequence[EvalResult]) -> None:
    rows = [{"eval_id": eval_id, "dataset": r.dataset, "metric": r.metric, "score": r.score,
             "examples": r.examples, "gpu_s": r.gpu_s, "cpu_s": r.cpu_s} for r in results]
    with store.engine.begin() as conn:
        upsert(conn, eval_results, rows, ["eval_id", "dataset"])


def results(store: Store, eval_id: str) -> list[EvalResult]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(eval_results).where(eval_results.c.eval_id == eval_id)
                            .order_by(eval_results.c.dataset)).all()
    return [EvalResult(r.dataset, r.metric or "", r.score or 0.0, r.examples or 0, r.gpu_s or 0.0,
                       r.cpu_s or 0.0) for r in rows]


def trials(store: Store, eval_id: str) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(eval_trials).where(eval_trials.c.eval_id == eval_id)
                            .order_by(eval_trials.c.trial)).all()
    return [dict(r._mapping) for r in rows]


def load_priors(store: Store, bucket: float) -> dict[str, PriorRow]:
    """Stored priors of one model-size bucket, by dataset."""
    with store.engine.connect() as conn:
        rows = conn.execute(select(eval_priors).where(eval_priors.c.model_size_b == bucket)).all()
    return {r.dataset: PriorRow(r.gpu_s, r.cpu_s, r.samples) for r in rows}


def fold_priors(store: Store, bucket: float, datasets: Sequence[str],
                fold: Callable[[Mapping[str, PriorRow]], Mapping[str, Any]]) -> dict[str, PriorRow]:
    """Read the datasets' stored priors, replace them by ``fold(old)``, in one transaction.

    ``fold`` is the caller's computation (the EWMA lives in ``evaluate.priors``); its
    values carry ``gpu_s``, ``cpu_s`` and ``samples``.
    """
    with store.engine.begin() as conn:
        old = {r.dataset: PriorRow(r.gpu_s, r.cpu_s, r.samples) for r in conn.execute(
            select(eval_priors).where(eval_priors.c.model_size_b == bucket,
                                      eval_priors.c.dataset.in_(list(datasets)))).all()}
        new = {n: PriorRow(p.gpu_s, p.cpu_s, p.samples) for n, p in fold(old).items()}
        if new:
            upsert(conn, eval_priors, [{"dataset": n, "model_size_b": bucket, "gpu_s": p.gpu_s, "cpu_s": p.cpu_s,
                                        "samples": p.samples, "updated_ts": time.time()} for n, p in new.items()],
                   ["dataset", "model_size_b"])
    return new
