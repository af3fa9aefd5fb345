"""A job cancelled while pending, through ingest and the report, on the real cluster.

Slurm 24.11's sacct JSON gives such a job ``"start": 4294967294`` (NO_VAL).
Read as a time it was a start in 2106, a negative run time and negative GPU
hours in ``sacme report``. The job here waits for resources behind a one-GPU
blocker (as job 99 of the 24.11 captures did), is cancelled, and the report
over a store ingested from the cluster must show no negative or absurd figure.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_acme.slurm import JobState
from slurm_acme.store.schema.core import jobs

pytestmark = pytest.mark.integration


def numbers(doc: object, path: str = "") -> list[tuple[str, float]]:
    """Every number in a JSON document, with its path."""
    if isinstance(doc, dict):
        return [n for k, v in doc.items() for n in numbers(v, f"{path}.{k}")]
    if isinstance(doc, list):
        return [n for i, v in enumerate(doc) for n in numbers(v, f"{path}[{i}]")]
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        return [(path, float(doc))]
    return []


def wait_pending_for_resources(slurm, job_id: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        job = slurm.show_job(job_id)
        if job.state is JobState.PENDING and job.reason == "Resources":
            return
        assert time.monotonic() < deadline, f"job {job_id} is {job.state.value} ({job.reason})"
        time.sleep(0.5)


def test_report_over_a_job_cancelled_while_pending(slurm_cluster, slurm, wait_job, wait_accounted, sacme,
                                                   stored_jobs,
                                                   tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    since = math.floor(time.time()) - 1
    tag = uuid.uuid4().hex[:6]
    common = ["-D", str(tmp_path), "-o", str(tmp_path / "%j.out"), "-t", "5"]
    blocker = slurm.sbatch([*common, "-J", f"blocker-{tag}", "-N", "1", "-w", slurm_cluster.nodes[0],
                            "--gpus-per-node=1"], "#!/bin/sh\nsleep 300\n")
    every_gpu = ["-N", str(len(slurm_cluster.nodes)), f"--gpus-per-node={slurm_cluster.gpus_per_node}"]
    try:
        pending = slurm.sbatch([*common, "-J", f"pend-cancel-{tag}", *every_gpu,
                                "--comment", "cancelled while pending"], "#!/bin/sh\nsleep 1\n")
        wait_pending_for_resources(slurm, pending)
        slurm.scancel([pending])
    finally:
        slurm.scancel([blocker])
    for job_id in (pending, blocker):
        wait_job(slurm, job_id, timeout=120)
    [record] = [r for r in wait_accounted(slurm, [pending, blocker]) if r.job_id == pending]
    assert record.state is JobState.CANCELLED
    # In sacct's own words: 24.11 says "Start=None"; 22.05 says either that or gives it the
    # cancel time (Start=End), depending on timing (both seen in CI on the same test).
    never_started = record.start is None
    assert never_started if slurm_cluster.version >= (24, 11) else (never_started or record.start == record.end), \
        (record.start, record.end)

    db_url = f"sqlite:///{tmp_path / 'acme.db'}"
    sacme(slurm_cluster.env, db_url, "ingest", "--since", "1h")
    [row] = stored_jobs(db_url, jobs.c.job_id == pending)
    if never_started:
        assert row["start_ts"] is None and row["duration_s"] is None and row["queue_s"] is None
    else:
        assert row["duration_s"] == 0 and 0 <= row["queue_s"] <= time.time() - since
    assert not row["gpu_time_s"]
    assert row["gpus"] == len(slurm_cluster.nodes) * slurm_cluster.gpus_per_node

    since_iso = datetime.fromtimestamp(since, timezone.utc).isoformat()
    report = json.loads(sacme(slurm_cluster.env, db_url, "report", "--since", since_iso, "--format", "json"))
    window_s = time.time() - since + 60
    cluster_gpus = len(slurm_cluster.nodes) * slurm_cluster.gpus_per_node
    figures = numbers(report)
    assert [f for f in figures if f[1] < 0] == []
    assert report["overview"]["jobs"] >= 2
    assert 0 <= report["overview"]["gpu_hours"] <= cluster_gpus * window_s / 3600
    seconds = [(p, v) for p, v in figures if p.endswith("_s") and not p.endswith("le_s")]
    assert seconds and all(v <= window_s for _, v in seconds), seconds
