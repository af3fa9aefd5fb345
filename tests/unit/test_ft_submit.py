"""Submitting a plan: validated against the cluster first, nothing half-submitted."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from slurm_acme.errors import InputError
from slurm_acme.ft.plan import build_plan
from slurm_acme.ft.spec import parse_spec
from slurm_acme.ft.submitter import submit_plan
from slurm_acme.slurm import NodeInfo, SlurmError
from slurm_acme.store import runs as rs

SPEC = "name: t\nnodes: 2\ncommand: [python, x.py]\ncheckpoint: {dir: ckpt}\n"


@dataclass
class FakeSlurm:
    fail: bool = False
    submitted: list[tuple] = field(default_factory=list)

    def sinfo_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(f"node{i}", "idle") for i in range(1, 5)]

    def sbatch(self, options, script):  # type: ignore[no-untyped-def]
        if self.fail:
            raise SlurmError(["sbatch"], 1, "sbatch: error: Batch job submission failed: Invalid account")
        self.submitted.append((tuple(options), script))
        return "77"


def _plan(tmp_path, text=SPEC):  # type: ignore[no-untyped-def]
    return build_plan(parse_spec(text, "t.yaml"), spec_path="t.yaml", db_url="sqlite://",
                      run_id="r1", cwd=str(tmp_path))


def test_submit_records_run_with_job_id(store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    slurm = FakeSlurm()
    assert submit_plan(_plan(tmp_path), slurm=slurm, store=store, cluster="acme") == "77"  # type: ignore[arg-type]
    run = rs.get_run(store, "r1")
    assert (run.state, run.last_job_id, run.name) == ("PENDING", "77", "t")
    assert slurm.submitted[0][0] == _plan(tmp_path).sbatch_options


def test_failed_sbatch_leaves_no_run(store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SlurmError, match="Invalid account"):
        submit_plan(_plan(tmp_path), slurm=FakeSlurm(fail=True), store=store, cluster="acme")  # type: ignore[arg-type]
    assert rs.get_run(store, "r1") is None


def test_too_many_nodes_never_reaches_sbatch(store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    slurm = FakeSlurm()
    with pytest.raises(InputError, match="5 nodes requested"):
        submit_plan(_plan(tmp_path, SPEC.replace("nodes: 2", "nodes: 5")), slurm=slurm,  # type: ignore[arg-type]
                    store=store, cluster="acme")
    assert slurm.submitted == [] and rs.get_run(store, "r1") is None
