"""``seval status EVAL_ID``: each job's Slurm state, and for what failed, where to look.

States come from the queue for jobs still there and from accounting for those
that ended; an array's failed tasks are named with their Slurm log, and a
trial whose tool failed also names the tool's own log (the note its worker
step left in ``<run_dir>/failed/``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from slurm_acme.evaluate.submit import job_name, log_path


@dataclass(frozen=True)
class Failure:
    job: str  # job key, e.g. gpu-0
    job_id: str
    task: int | None
    state: str
    log: str  # the Slurm log
    tool_log: str = ""
    message: str = ""


@dataclass(frozen=True)
class EvalStatus:
    eval_id: str
    state: str
    jobs: dict[str, dict[str, str]]  # key -> {job_id, state}
    failures: tuple[Failure, ...]
    progress: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"eval_id": self.eval_id, "state": self.state, "jobs": self.jobs, "progress": self.progress,
                "failures": [f.__dict__ for f in self.failures]}


def _short(key: str) -> str:
    """``gpu-0`` -> ``gpu0``: the name part of the job's --job-name."""
    return key.replace("-", "")


def progress(run_dir: str) -> dict[str, int]:
    """Trials inferred and scored so far, from the files the jobs leave in the run dir."""
    from slurm_acme.evaluate.spec import read_spec

    root = Path(run_dir)
    try:
        trials = len(read_spec(root).trials)
    except (OSError, ValueError, KeyError):
        trials = 0
    return {"trials": trials, "inferred": len(list((root / "timing").glob("t*.json"))),
            "scored": len(list((root / "score").glob("t*.json"))),
            "failed": len(list((root / "failed").glob("t*.json")))}


def _notes(run_dir: str) -> dict[str, dict[str, Any]]:
    """job id (as the failing step saw SLURM_JOB_ID) -> the note it left."""
    out = {}
    for path in sorted(Path(run_dir, "failed").glob("*.json")):
        try:
            note = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        out[str(note.get("job_id") or path.stem)] = note
    return out


def eval_status(run, slurm) -> EvalStatus:  # type: ignore[no-untyped-def]
    """The run's jobs as Slurm sees them now (``run`` is the store's EvalRun)."""
    ids = dict(run.job_ids)
    queued: dict[str, str] = {}
    for job in slurm.squeue(ids.values()):
        queued.setdefault(job.array_job_id or job.job_id, job.state.value)
    since = datetime.fromtimestamp(run.created_ts, timezone.utc) - timedelta(minutes=1)
    ended = [j for j in slurm.sacct(since, job_ids=list(ids.values())) if j.state.is_terminal()] \
        if ids else []
    notes = _notes(run.run_dir)
    jobs: dict[str, dict[str, str]] = {}
    failures = []
    for key, jid in ids.items():
        mine = [j for j in ended if (j.array_job_id or j.job_id) == jid]
        bad = [j for j in mine if j.state.value != "COMPLETED"]
        state = queued.get(jid) or (bad[0].state.value if bad else "COMPLETED" if mine else "UNKNOWN")
        jobs[key] = {"job_id": jid, "state": state}
        name = job_name(run.eval_id, _short(key))
        for j in bad:
            note = notes.get(j.job_id, {})
            failures.append(Failure(key, jid, j.array_task_id, j.state.value,
                                    str(log_path(run.run_dir, name, jid, j.array_task_id)),
                                    str(note.get("tool_log", "")), str(note.get("message", ""))))
    return EvalStatus(run.eval_id, run.state, jobs, tuple(failures), progress(run.run_dir))
