"""``sacme healthcheck``: targets, usage errors and exit codes, with the Slurm door faked."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

import slurm_acme.cli.healthcheck as cli
import slurm_acme.slurm as door
from slurm_acme.cli.main import run_cli, sacme
from slurm_acme.health import Evidence, HealthReport
from slurm_acme.slurm.client import Slurm

SHOW_JOB = ("JobId=41 JobName=train UserId=root(0) JobState={state} Reason=None "
            "NodeList={nodes} TresPerNode=gres:gpu:8\n")


def fake_door(monkeypatch: pytest.MonkeyPatch, state: str = "RUNNING",
              nodes: str = "node[1-4]") -> list[list[str]]:
    calls: list[list[str]] = []

    def runner(argv: Sequence[str], *, timeout: float, env=None, stdin=None) -> str:  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        if argv[:3] == ["scontrol", "show", "hostnames"]:
            return "\n".join(f"node{i}" for i in range(1, 5)) + "\n"
        if argv[:3] == ["scontrol", "show", "job"]:
            return SHOW_JOB.format(state=state, nodes=nodes)
        raise AssertionError(argv)

    monkeypatch.setattr(door, "default_client", lambda timeout=60.0: Slurm(runner=runner))
    return calls


def fake_check(monkeypatch: pytest.MonkeyPatch, bad: tuple[str, ...]) -> list[dict]:
    seen: list[dict] = []

    def run_health_check(nodes, **kwargs):  # type: ignore[no-untyped-def]
        seen.append({"nodes": list(nodes), **kwargs})
        good = tuple(n for n in nodes if n not in bad)
        evidence = tuple(Evidence((n,), "allgather:repair", 2, False, "timeout") for n in bad)
        return HealthReport(bad, good, 2 if bad else 1, 4 if bad else 2, evidence)

    monkeypatch.setattr(cli, "run_health_check", run_health_check)
    return seen


def test_nodes_and_job_together_is_a_usage_error(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    fake_door(monkeypatch)
    assert run_cli(sacme, "sacme", ["healthcheck", "--nodes", "node1", "--job", "4"]) == 2
    assert "give --nodes or --job, not both" in capsys.readouterr().err


def test_no_target_outside_a_job_is_a_usage_error(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    fake_door(monkeypatch)
    assert run_cli(sacme, "sacme", ["healthcheck"]) == 2
    assert "give --nodes LIST or --job JOBID" in capsys.readouterr().err


def test_a_pending_job_has_no_allocation_to_test(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    fake_door(monkeypatch, state="PENDING", nodes="(null)")
    assert run_cli(sacme, "sacme", ["healthcheck", "--job", "41"]) == 2
    assert "job 41 is PENDING, not running" in capsys.readouterr().err


def test_bad_fault_spec_is_a_usage_error_before_any_test(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    fake_door(monkeypatch)
    monkeypatch.setenv("ACME_HEALTH_FAULT", "node2:explode")
    assert run_cli(sacme, "sacme", ["healthcheck", "--nodes", "node[1-4]"]) == 2
    assert "ACME_HEALTH_FAULT: bad entry 'node2:explode'" in capsys.readouterr().err


def test_job_target_runs_inside_the_jobs_allocation(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    calls = fake_door(monkeypatch)
    seen = fake_check(monkeypatch, bad=())
    assert run_cli(sacme, "sacme", ["healthcheck", "--job", "41", "--timeout", "7",
                                    "--backend", "gloo", "--json"]) == 0
    assert seen[0]["nodes"] == ["node1", "node2", "node3", "node4"]
    assert (seen[0]["job_id"], seen[0]["timeout_s"], seen[0]["backend"]) == ("41", 7.0, "gloo")
    assert ["scontrol", "show", "hostnames", "node[1-4]"] in calls
    assert json.loads(capsys.readouterr().out)["bad_nodes"] == []


def test_bad_nodes_exit_1_with_the_report_on_stdout(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    fake_door(monkeypatch)
    fake_check(monkeypatch, bad=("node3",))
    assert run_cli(sacme, "sacme", ["healthcheck", "--nodes", "node[1-4]", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["bad_nodes"] == ["node3"]
    assert "sacme: error: 1 bad node(s): node3" in err


def test_table_names_the_bad_node_and_its_evidence(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    fake_door(monkeypatch)
    fake_check(monkeypatch, bad=("node2",))
    assert run_cli(sacme, "sacme", ["healthcheck", "--nodes", "node[1-4]"]) == 1
    out = capsys.readouterr().out
    assert "node2" in out and "BAD" in out and "timeout" in out
