"""A 2-node, 8-GPU-per-node job through slurm_acme.slurm, then into the store via `sacme ingest`."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import select

from slurm_acme.slurm import JobState
from slurm_acme.store import open_store
from slurm_acme.store.schema.core import jobs

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def finished_gpu_job(slurm_cluster, wait_job, wait_accounted, tmp_path_factory):  # type: ignore[no-untyped-def]
    from slurm_acme.slurm import Slurm

    slurm = Slurm(timeout=60)
    name = f"ingest probe {uuid.uuid4().hex[:6]}"
    workdir = tmp_path_factory.mktemp("job")
    job_id = slurm.sbatch(
        ["-N", "2", "--gpus-per-node=8", "-J", name, "--comment", "acme:type=Debug",
         "-D", str(workdir), "-o", str(workdir / "out.txt")],
        "#!/bin/sh\nsrun -l hostname\n")
    job = wait_job(slurm, job_id)
    wait_accounted(slurm, [job_id])
    return job_id, name, job


def _all_rows(db_url: str) -> dict[tuple[str, str], dict]:
    store = open_store(db_url)
    try:
        with store.engine.connect() as conn:
            return {(r["cluster"], r["job_id"]): dict(r) for r in conn.execute(select(jobs)).mappings()}
    finally:
        store.dispose()


def test_job_runs_on_two_nodes(finished_gpu_job, slurm):  # type: ignore[no-untyped-def]
    _, _, job = finished_gpu_job
    assert job.state is JobState.COMPLETED, job.fields
    hosts = slurm.show_hostnames(job.nodelist)
    assert len(hosts) == 2 and all(h.startswith("node") for h in hosts)


def test_ingest_finds_job_with_16_gpus_and_no_duplicates(finished_gpu_job, slurm_cluster, sacme,
                                                         stored_jobs, tmp_path):  # type: ignore[no-untyped-def]
    job_id, name, job = finished_gpu_job
    db_url = f"sqlite:///{tmp_path / 'acme.db'}"
    first = json.loads(sacme(slurm_cluster.env, db_url, "ingest", "--since", "1h", "--json"))
    assert first["inserted"] >= 1
    before = _all_rows(db_url)
    # Re-ingesting the same window (and the default incremental one) changes
    # none of the rows already there; jobs of other tests that ended in
    # between may be added, nothing else.
    sacme(slurm_cluster.env, db_url, "ingest", "--since", "1h", "--json")
    sacme(slurm_cluster.env, db_url, "ingest", "--json")
    after = _all_rows(db_url)
    assert {k: after[k] for k in before} == before

    rows = stored_jobs(db_url, jobs.c.job_id == job_id)
    assert len(rows) == 1
    row = rows[0]
    assert row["name"] == name
    assert (row["nodes"], row["gpus"], row["nodelist"]) == (2, 16, job.nodelist)
    assert row["state"] == "COMPLETED" and row["exit_code"] == 0
    assert row["workload_type"] == "Debug"
    assert row["gpu_time_s"] == pytest.approx(row["duration_s"] * 16)


def test_sacct_reports_alloc_tres_gres_gpu_16(finished_gpu_job, slurm):  # type: ignore[no-untyped-def]
    from datetime import datetime, timedelta, timezone

    job_id, _, _ = finished_gpu_job
    [record] = slurm.sacct(datetime.now(timezone.utc) - timedelta(hours=1), job_ids=[job_id])
    assert "gres/gpu=16" in record.alloc_tres and record.gpus == 16
