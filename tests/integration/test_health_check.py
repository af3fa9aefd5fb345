"""The health check on the real local Slurm: 4 nodes, gloo over loopback.

Each pair test is a real srun step of a real allocation running the real
worker; faults are injected through ``ACME_HEALTH_FAULT``, which srun carries
to the workers. Timeouts are short because the faults are deterministic; the
collective's clock only starts once torch is imported on every rank.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_acme.health import HealthReport, run_health_check
from slurm_acme.slurm import JobState

pytestmark = pytest.mark.integration

HOLD_SCRIPT = "#!/bin/sh\nsleep 600\n"


def _start(slurm, options: list[str], script: str, env=None) -> str:  # type: ignore[no-untyped-def]
    return slurm.sbatch(["-N", "4", "--ntasks-per-node=1", "-c", "1", "-t", "10", *options],
                        script, env=env)


def _wait_running(slurm, job_id: str, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while (job := slurm.show_job(job_id)).state is not JobState.RUNNING:
        if job.state.is_terminal() or time.monotonic() > deadline:
            pytest.fail(f"allocation {job_id} is {job.state.value} ({job.reason})")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def allocation(slurm_cluster) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A held 4-node allocation (a batch job that sleeps) the library call runs inside."""
    from slurm_acme.slurm import Slurm

    slurm = Slurm(timeout=60)
    job_id = _start(slurm, ["-J", "acme-health-test", "-o", "/dev/null"], HOLD_SCRIPT)
    try:
        _wait_running(slurm, job_id)
        yield job_id
    finally:
        slurm.scancel([job_id])


def check(slurm_cluster, job_id: str, monkeypatch, fault: str = "", **kwargs) -> HealthReport:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("ACME_HEALTH_FAULT", fault)
    return run_health_check(list(slurm_cluster.nodes), job_id=job_id, backend="gloo",
                            seed=11, **{"timeout_s": 20.0, **kwargs})


def failed_rounds(report: HealthReport, node: str) -> list[int]:
    return [e.round for e in report.evidence_for(node) if not e.passed]


def test_healthy_cluster_reports_no_bad_node(slurm_cluster, allocation, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    report = check(slurm_cluster, allocation, monkeypatch)
    assert report.bad_nodes == ()
    assert report.good_nodes == slurm_cluster.nodes
    assert (report.rounds, report.tests) == (1, 2)
    assert all(e.passed and e.busbw_gbps > 0 for e in report.evidence)
    assert "pre-check infiniband: not available (no InfiniBand devices)" in report.notes


def test_library_call_finds_a_raising_node_in_two_rounds(slurm_cluster, allocation,  # type: ignore[no-untyped-def]
                                                          monkeypatch) -> None:
    report = check(slurm_cluster, allocation, monkeypatch, fault="node3:raise")
    assert report.bad_nodes == ("node3",)
    assert report.rounds == 2 and report.tests == 4
    assert failed_rounds(report, "node3") == [1, 2]
    assert all("injected fault on node3" in e.error
               for e in report.evidence_for("node3") if not e.passed)
    partner = next(n for e in report.evidence if e.round == 1 and "node3" in e.nodes
                   for n in e.nodes if n != "node3")
    assert failed_rounds(report, partner) == [1]  # suspect in round 1, cleared in round 2


def test_a_hang_is_caught_by_the_timeout_and_a_slow_node_by_the_bandwidth_floor(  # type: ignore[no-untyped-def]
        slurm_cluster, allocation, monkeypatch) -> None:
    report = check(slurm_cluster, allocation, monkeypatch, fault="node2:hang,node1:slow:1",
                   timeout_s=8.0, min_busbw=0.005)
    assert report.bad_nodes == ("node1", "node2")
    assert report.rounds == 2
    round2 = {e.nodes[0]: e for e in report.evidence if e.round == 2}
    assert round2["node2"].error == "timeout"
    assert "below min 0.005" in round2["node1"].error
    assert all(not e.passed for e in report.evidence_for("node2"))


def test_sacme_healthcheck_inside_a_batch_job_finds_the_faulty_node(  # type: ignore[no-untyped-def]
        slurm_cluster, slurm, wait_job, tmp_path: Path) -> None:
    out, rc = tmp_path / "report.json", tmp_path / "rc"
    script = (
        "#!/bin/sh\n"
        f"{shlex.quote(sys.executable)} -m slurm_acme healthcheck --job \"$SLURM_JOB_ID\" "
        f"--backend gloo --timeout 20 --seed 5 --json > {shlex.quote(str(out))}\n"
        f"echo $? > {shlex.quote(str(rc))}\n"
    )
    job_id = _start(slurm, ["-J", "acme-health-cli", "-D", str(tmp_path),
                            "-o", str(tmp_path / "job.out")],
                    script, env={"ACME_HEALTH_FAULT": "node4:raise"})
    job = wait_job(slurm, job_id, timeout=300)
    assert job.state is JobState.COMPLETED, (tmp_path / "job.out").read_text()[-2000:]
    assert rc.read_text().strip() == "1", (tmp_path / "job.out").read_text()[-2000:]
    report = json.loads(out.read_text())
    assert report["bad_nodes"] == ["node4"]
    assert report["rounds"] == 2
    assert "1 bad node(s): node4" in (tmp_path / "job.out").read_text()
