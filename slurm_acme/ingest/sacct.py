"""``sacme ingest``: finished jobs from Slurm accounting into the ``jobs`` table.

Incremental: a watermark (the time of the last successful ingest) is kept in
the store's key/value table, and the next ingest asks sacct for every job
active since ``watermark - OVERLAP``, so jobs whose accounting record lands
late are not missed. Idempotent: rows are upserted on (cluster, job_id), so
the overlap and any re-run only refresh rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from slurm_acme.ingest.workload import NameRule, classify
from slurm_acme.slurm import SacctJob, Slurm
from slurm_acme.store import Store
from slurm_acme.store.jobs import read_fact, write_job_rows
from slurm_acme.store.report import refresh_job_rollups

#: Re-read this much before the watermark: slurmdbd can record a job's end late.
OVERLAP = timedelta(minutes=15)
#: How far back the very first ingest looks when no --since is given.
FIRST_LOOKBACK = timedelta(days=30)
#: sacct is asked one window at a time, so a month of a busy site is not one answer.
WINDOW = timedelta(days=7)


def watermark_key(cluster: str) -> str:
    return f"ingest.sacct.watermark.{cluster}"


@dataclass(frozen=True)
class IngestResult:
    cluster: str
    since: datetime
    until: datetime
    seen: int
    finished: int
    inserted: int
    updated: int

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["since"] = self.since.isoformat()
        data["until"] = self.until.isoformat()
        return data


def ingest_sacct(store: Store, slurm: Slurm, *, cluster: str, rules: Sequence[NameRule],
                 since: datetime | None = None, now: datetime | None = None,
                 progress: Callable[[str], None] | None = None) -> IngestResult:
    """Pull finished jobs from sacct into the store; returns what was done.

    ``cluster`` names the watermark and is the fallback cluster of a row
    whose accounting record carries none.
    """
    say = progress or _quiet
    until = now or datetime.now(timezone.utc)
    start = since or _resume_point(store, cluster, until)
    found = _fetch(slurm, start, until, say)
    rows = [job_row(j, cluster, rules) for j in found.values() if j.state.is_terminal()]
    say(f"writing {len(rows)} finished jobs")
    inserted = write_job_rows(store, rows, facts={watermark_key(cluster): until.isoformat()})
    refresh_job_rollups(store, rows)  # sacme report's monthly rollups of the months these jobs fall in
    return IngestResult(cluster=cluster, since=start, until=until, seen=len(found),
                        finished=len(rows), inserted=inserted, updated=len(rows) - inserted)


def _quiet(_: str) -> None:
    return None


def _fetch(slurm: Slurm, start: datetime, until: datetime,
           say: Callable[[str], None]) -> dict[tuple[str, str], SacctJob]:
    """sacct one ``WINDOW`` at a time (bounded answers, visible progress).

    A job active in several windows comes back from each; the last answer wins.
    """
    found: dict[tuple[str, str], SacctJob] = {}
    windows = max(1, math.ceil((until - start) / WINDOW))
    for i in range(windows):
        lo = start + i * WINDOW
        say(f"sacct window {i + 1}/{windows} from {lo.isoformat(timespec='seconds')}")
        for job in slurm.sacct(lo, end=min(lo + WINDOW, until)):
            found[(job.cluster, job.display_id)] = job
    return found


def _resume_point(store: Store, cluster: str, until: datetime) -> datetime:
    mark = read_fact(store, watermark_key(cluster))
    if mark is None:
        return until - FIRST_LOOKBACK
    return datetime.fromisoformat(mark) - OVERLAP


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment else None


def job_row(job: SacctJob, cluster: str, rules: Sequence[NameRule]) -> dict[str, Any]:
    """The ``jobs`` row of one accounting record (array tasks keep their ``A_T`` id)."""
    duration = (job.end - job.start).total_seconds() if job.start and job.end else None
    queued = (job.start - job.submit).total_seconds() if job.start and job.submit else None
    return {
        "cluster": job.cluster or cluster,
        "job_id": job.display_id,
        "user": job.user,
        "name": job.name,
        "account": job.account,
        "partition": job.partition,
        "workload_type": classify(job.comment, job.name, rules),
        "nodes": job.nodes,
        "gpus": job.gpus,
        "cpus": job.cpus,
        "submit_ts": _epoch(job.submit),
        "start_ts": _epoch(job.start),
        "end_ts": _epoch(job.end),
        "duration_s": duration,
        "queue_s": queued,
        "gpu_time_s": duration * job.gpus if duration is not None else None,
        "state": job.state.value,
        "exit_code": job.exit_code,
        "restarts": job.restarts,
        "nodelist": job.nodelist,
        "comment": job.comment,
        "source": "sacct",
    }
