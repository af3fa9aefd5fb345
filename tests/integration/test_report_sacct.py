"""Jobs that really ran on the local Slurm cluster, ingested from sacct, in the report.

A GPU Eval job that completes and a CPU Debug job that fails are submitted,
``sacme ingest`` copies accounting into a fresh store, and ``sacme report
--since`` must count them (and anyone else's jobs submitted meanwhile on the
shared cluster) exactly as the ingested rows say.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_acme.store.schema.core import jobs

pytestmark = pytest.mark.integration


def test_report_counts_ingested_sacct_jobs(slurm_cluster, slurm, wait_job, wait_accounted, sacme,
                                           stored_jobs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    since = math.floor(time.time()) - 1
    tag = uuid.uuid4().hex[:6]
    common = ["-N", "1", "-D", str(tmp_path), "-o", str(tmp_path / "%j.out"), "-t", "5"]
    gpu_job = slurm.sbatch([*common, "--gpus-per-node=2", "-J", f"eval-{tag}", "--comment", "acme:type=Eval"],
                           "#!/bin/sh\nsleep 1\n")
    cpu_job = slurm.sbatch([*common, "-J", f"debug-{tag}", "--comment", "acme:type=Debug"],
                           "#!/bin/sh\nexit 3\n")
    for job_id in (gpu_job, cpu_job):
        wait_job(slurm, job_id, timeout=300)
    wait_accounted(slurm, [gpu_job, cpu_job])

    db_url = f"sqlite:///{tmp_path / 'acme.db'}"
    sacme(slurm_cluster.env, db_url, "ingest", "--since", "1h")
    since_iso = datetime.fromtimestamp(since, timezone.utc).isoformat()
    report = json.loads(sacme(slurm_cluster.env, db_url, "report", "--since", since_iso, "--format", "json"))

    rows = stored_jobs(db_url, jobs.c.submit_ts >= since)
    mine = {r["job_id"]: r for r in rows}
    assert mine[gpu_job]["gpus"] == 2 and mine[gpu_job]["state"] == "COMPLETED"
    assert mine[cpu_job]["gpus"] == 0 and mine[cpu_job]["state"] == "FAILED"

    gpu = [r for r in rows if r["gpus"] > 0]
    o = report["overview"]
    assert (o["jobs"], o["gpu_jobs"], o["cpu_jobs"]) == (len(rows), len(gpu), len(rows) - len(gpu))
    assert report["workload"]["Eval"]["gpu_jobs"] == sum(r["workload_type"] == "Eval" for r in gpu) >= 1
    assert report["states"]["by_count"]["completed"] == pytest.approx(
        sum(r["state"] == "COMPLETED" for r in gpu) / len(gpu))
    assert report["durations"]["overall"]["run_time"]["n"] == sum(r["duration_s"] is not None for r in gpu)
