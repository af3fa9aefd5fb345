"""Slurm facade: the argv it builds and how it reads answers (runner faked)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_acme.slurm import JobNotFound, Slurm, SlurmError, SlurmUnavailable

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


class FakeRunner:
    """Records every call; answers from a queue of outputs or exceptions."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, argv, *, timeout, env=None, stdin=None):
        self.calls.append({"argv": list(argv), "timeout": timeout, "env": env, "stdin": stdin})
        answer = self.answers.pop(0) if self.answers else ""
        if isinstance(answer, Exception):
            raise answer
        return answer


def client(*answers):
    runner = FakeRunner(*answers)
    return Slurm(timeout=7, runner=runner), runner


HOSTILE = ["a b", "a'; echo x", 'a"=0"']


@pytest.mark.parametrize("name", HOSTILE)
def test_sbatch_passes_hostile_values_as_single_arguments(name):
    slurm, runner = client("42\n")
    assert slurm.sbatch(["-J", name, "--comment", f"acme:type={name}"], Path("/x/job.sh")) == "42"
    assert runner.calls[0]["argv"] == ["sbatch", "--parsable", "-J", name,
                                       "--comment", f"acme:type={name}", "/x/job.sh"]
    assert runner.calls[0]["timeout"] == 7


def test_sbatch_script_text_goes_to_stdin_and_cluster_suffix_is_dropped():
    slurm, runner = client("43;acme\n")
    assert slurm.sbatch(["-N2"], "#!/bin/sh\necho hi\n", env={"A": "1"}) == "43"
    call = runner.calls[0]
    assert call["argv"] == ["sbatch", "--parsable", "-N2"]
    assert call["stdin"].startswith("#!/bin/sh") and call["env"] == {"A": "1"}


@pytest.mark.parametrize("value", HOSTILE)
def test_update_job_keeps_each_pair_one_argument(value):
    slurm, runner = client("")
    slurm.update_job("7", Comment=value, ExcNodeList="node[1-2]")
    assert runner.calls[0]["argv"] == ["scontrol", "update", "JobId=7", f"Comment={value}",
                                       "ExcNodeList=node[1-2]"]


@pytest.mark.parametrize("key", ["a b", "X=1", "", "1x"])
def test_update_job_rejects_bad_field_names(key):
    slurm, runner = client()
    with pytest.raises(ValueError):
        slurm.update_job("7", **{key: "v"})
    assert runner.calls == []


def test_requeue_release_scancel_and_hostnames_argv():
    slurm, runner = client("", "", "", "", "node1\nnode2\n")
    slurm.requeue("5")
    slurm.requeue(5, hold=True)
    slurm.release("5")
    slurm.scancel(["5", 6], signal="USR1")
    assert slurm.show_hostnames("node[1-2]") == ["node1", "node2"]
    assert [c["argv"] for c in runner.calls] == [
        ["scontrol", "requeue", "5"], ["scontrol", "requeuehold", "5"], ["scontrol", "release", "5"],
        ["scancel", "--signal", "USR1", "5", "6"], ["scontrol", "show", "hostnames", "node[1-2]"]]


def test_empty_inputs_run_nothing():
    slurm, runner = client()
    slurm.scancel([])
    assert slurm.squeue(job_ids=[]) == [] and slurm.show_hostnames("") == []
    assert runner.calls == []


def test_sacct_2205_patches_exit_codes_with_a_second_listing():
    slurm, runner = client((FIXTURES / "22.05" / "sacct.json").read_text(),
                           (FIXTURES / "22.05" / "sacct_exitcodes.txt").read_text())
    start = datetime(2026, 11, 30, tzinfo=timezone.utc)
    jobs = slurm.sacct(start, job_ids=["1", "2"])
    first, second = (c["argv"] for c in runner.calls)
    assert first[:3] == ["sacct", "--json", "-X"] and "-a" in first and first[-2:] == ["-j", "1,2"]
    assert second[:7] == ["sacct", "-n", "-P", "-X", "-D", "-o", "JobIDRaw,ExitCode"]
    assert next(j for j in jobs if j.name == "failer").exit_code == 3


def test_sacct_2411_needs_one_call_its_json_exit_codes_are_right():
    slurm, runner = client((FIXTURES / "24.11" / "sacct_json_X_window.json").read_text())
    jobs = slurm.sacct(datetime(2026, 11, 30, tzinfo=timezone.utc), all_users=False)
    assert len(runner.calls) == 1 and "-a" not in runner.calls[0]["argv"]
    assert next(j for j in jobs if j.name == "fail3").exit_code == 3


def test_squeue_filters_client_side_too():
    slurm, runner = client((FIXTURES / "22.05" / "squeue.json").read_text())
    jobs = slurm.squeue(job_ids=["1"])
    assert runner.calls[0]["argv"] == ["squeue", "--json", "--jobs", "1"]
    assert [j.job_id for j in jobs] == ["1"]


def test_squeue_of_a_job_slurm_forgot_is_empty():
    slurm, _ = client(SlurmError(["squeue"], 1, "slurm_load_jobs error: Invalid job id specified"))
    assert slurm.squeue(job_ids=["99"]) == []


def test_show_job_unknown_raises_job_not_found():
    slurm, _ = client(SlurmError(["scontrol"], 1, "slurm_load_jobs error: Invalid job id specified"))
    with pytest.raises(JobNotFound, match="99"):
        slurm.show_job("99")


def test_show_job_parses_record():
    text = (FIXTURES / "22.05" / "scontrol_show_job.txt").read_text().splitlines()[0]
    slurm, runner = client(text)
    assert slurm.show_job("1").name == "pt 7b"
    assert runner.calls[0]["argv"] == ["scontrol", "show", "job", "-o", "1"]


def test_ping_up_and_down():
    slurm, _ = client("Slurmctld(primary) at vm is UP\n")
    slurm.ping()
    slurm, _ = client(SlurmError(["scontrol", "ping"], 1, "Slurmctld(primary) at vm is DOWN"))
    with pytest.raises(SlurmUnavailable, match="not answering"):
        slurm.ping()


def test_sinfo_nodes_uses_an_explicit_format():
    slurm, runner = client("node1|idle|gpu:8\nnode2|down*|gpu:8\n")
    nodes = slurm.sinfo_nodes()
    assert runner.calls[0]["argv"] == ["sinfo", "-N", "-h", "-o", "%N|%T|%G"]
    assert [(n.name, n.responding) for n in nodes] == [("node1", True), ("node2", False)]


def test_job_gpu_indices_expands_each_group_with_scontrol():
    detail = (FIXTURES / "22.05" / "scontrol_d_show_job.txt").read_text()
    slurm, runner = client(detail, "node1\nnode2\n")
    assert slurm.job_gpu_indices("17") == {"node1": [2, 3, 4], "node2": [2, 3, 4]}
    assert [c["argv"] for c in runner.calls] == [
        ["scontrol", "-d", "-o", "show", "job", "17"], ["scontrol", "show", "hostnames", "node[1-2]"]]


def test_show_nodes_and_config_argv():
    slurm, runner = client((FIXTURES / "22.05" / "scontrol_show_node.txt").read_text(),
                           (FIXTURES / "22.05" / "scontrol_show_config.txt").read_text())
    assert [n.port for n in slurm.show_nodes(["node1", "node2"])][:2] == [17901, 17902]
    assert slurm.show_config()["ClusterName"] == "acme"
    assert runner.calls[0]["argv"] == ["scontrol", "show", "node", "-o", "node1,node2"]
    assert runner.calls[1]["argv"] == ["scontrol", "show", "config"]
    assert slurm.show_nodes([]) == [] and len(runner.calls) == 2
