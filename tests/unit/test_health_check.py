"""run_health_check's own decisions: input checks, backend choice, pre-check summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_acme.errors import InputError
from slurm_acme.health import Evidence, HealthReport, run_health_check
from slurm_acme.health.check import parse_precheck_output, resolve_backend, summarise_prechecks
from slurm_acme.health.precheck import BAD, OK, UNAVAILABLE, CheckOutcome, NodePrecheck


@pytest.mark.parametrize("kwargs, words", [
    ({"nodes": []}, "no nodes to check"),
    ({"backend": "mpi"}, "backend 'mpi' is not one of auto, nccl, gloo"),
    ({"timeout_s": 0}, "timeout must be > 0"),
    ({"min_busbw": -1.0}, "min busbw must be >= 0"),
    ({"gpus_per_node": -2}, "gpus per node must be >= 0"),
])
def test_bad_arguments_are_input_errors_before_anything_runs(kwargs: dict, words: str) -> None:
    nodes = kwargs.pop("nodes", ["node1", "node2"])
    with pytest.raises(InputError, match=words):
        run_health_check(nodes, **kwargs)


def test_auto_backend_is_nccl_only_where_the_driver_shows_gpus(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus"
    assert resolve_backend("auto", gpus) == "gloo"
    gpus.mkdir()
    assert resolve_backend("auto", gpus) == "gloo"
    (gpus / "0000:3b:00.0").mkdir()
    assert resolve_backend("auto", gpus) == "nccl"
    assert resolve_backend("gloo", gpus) == "gloo"


def node(name: str, **statuses: str) -> NodePrecheck:
    return NodePrecheck(name, tuple(CheckOutcome(k, v, f"{k} on {name}") for k, v in statuses.items()))


def test_an_unavailable_check_is_said_once_not_once_per_node() -> None:
    reports = [node("n1", nvml_memory=UNAVAILABLE, infiniband=OK),
               node("n2", nvml_memory=UNAVAILABLE, infiniband=BAD)]
    notes = summarise_prechecks(reports, ["n1", "n2", "n3"])
    assert notes == ["pre-check nvml_memory: not available (nvml_memory on n1)",
                     "pre-checks gave no answer from n3"]


def test_precheck_output_lines_are_read_and_noise_skipped() -> None:
    report = node("n1", xid=BAD)
    text = f"srun: warning\n{report.to_json()}\n{{not json\n"
    assert parse_precheck_output(text) == [report]


def test_report_json_carries_verdicts_and_evidence() -> None:
    report = HealthReport(("n2",), ("n1",), 2, 3,
                          (Evidence(("n1", "n2"), "allgather:pair", 1, False, "timeout"),),
                          notes=("pre-check xid: not available (x)",))
    doc = json.loads(report.to_json())
    assert doc["bad_nodes"] == ["n2"] and doc["rounds"] == 2
    assert doc["evidence"][0]["error"] == "timeout"
    assert not report.healthy
    assert report.evidence_for("n2") == report.evidence
