"""Parsers on real Slurm 24.11.5 output (tests/fixtures/slurm/24.11, README there).

The truth is Slurm's own words: ``sacct -P`` of the same jobs in
``sacct_P_truth.txt`` (host timezone UTC), and scontrol's view of the same
moments. Each sacct JSON capture must agree with it field by field.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from slurm_acme.slurm import JobState, parse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm" / "24.11"
SACCT_CAPTURES = ["sacct_json_X_window.json", "sacct_json_X_D_window.json",
                  "sacct_json_with_steps.json", "sacct_json_X_jobs.json",
                  "sacct_json_X_window_pending_cancelled.json"]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def sacct_time(text: str) -> datetime | None:
    return None if text in ("None", "Unknown") else datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def truth() -> dict[str, dict[str, str]]:
    """sacct's own -P listing by raw job id; a requeued job's later row wins (Restarts=1)."""
    lines = fixture("sacct_P_truth.txt").splitlines()
    header = lines[0].split("|")
    rows: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split("|"), strict=True))
        rows[row["JobIDRaw"]] = row
    return rows


TRUTH = truth()


@pytest.mark.parametrize("capture", SACCT_CAPTURES)
def test_every_sacct_json_capture_agrees_with_sacct_listing(capture):
    jobs = {j.job_id: j for j in parse.parse_sacct_json(fixture(capture))}
    compared = 0
    for raw_id, row in TRUTH.items():
        job = jobs.get(raw_id)
        if job is None:
            continue
        compared += 1
        code, _, sig = row["ExitCode"].partition(":")
        assert job.display_id == row["JobID"] and job.name == row["JobName"]
        assert job.state is JobState.parse(row["State"]), raw_id
        assert (job.exit_code, job.signal or 0) == (int(code), int(sig)), raw_id
        assert (job.nodes, job.nodelist) == (int(row["NNodes"]), row["NodeList"]), raw_id
        assert job.alloc_tres == row["AllocTRES"], raw_id
        assert job.gpus == (parse.gpus_in_tres(row["AllocTRES"]) or 0), raw_id
        assert job.restarts == int(row["Restarts"]), raw_id
        assert (job.submit, job.eligible, job.start, job.end) == tuple(
            sacct_time(row[k]) for k in ("Submit", "Eligible", "Start", "End")), raw_id
        assert job.comment == row["Comment"], raw_id
    assert compared >= 13


def test_job_cancelled_while_pending_never_started():
    """Finding 1: ``"start": 4294967294`` (NO_VAL) is no start (sacct: Start=None)."""
    jobs = parse.parse_sacct_json(fixture("sacct_json_X_window_pending_cancelled.json"))
    [job] = [j for j in jobs if j.job_id == "99"]
    assert job.state is JobState.CANCELLED and job.start is None
    assert job.submit == job.eligible == datetime(2026, 12, 1, 8, 7, 24, tzinfo=timezone.utc)
    assert job.end == datetime(2026, 12, 1, 8, 7, 27, tzinfo=timezone.utc)
    assert (job.nodes, job.nodelist, job.alloc_tres) == (0, "", "")
    assert job.gpus == 32 and job.comment == "cancelled while pending"


def test_held_job_cancelled_before_it_was_eligible():
    [job] = [j for j in parse.parse_sacct_json(fixture("sacct_json_X_jobs.json")) if j.job_id == "13"]
    assert job.state is JobState.CANCELLED
    assert job.start is None and job.eligible is None and job.submit is not None


def test_no_capture_yields_a_time_outside_the_capture_day():
    day = datetime(2026, 12, 1, tzinfo=timezone.utc)
    for capture in SACCT_CAPTURES:
        for job in parse.parse_sacct_json(fixture(capture)):
            for moment in (job.submit, job.eligible, job.start, job.end):
                assert moment is None or day <= moment < day + timedelta(days=1), (capture, job)
            assert "-" not in job.alloc_tres and "energy" not in job.alloc_tres


def test_energy_minus_two_is_not_a_tres_count():
    """Finding 4: ``{"type": "energy", "count": -2}`` is left out, as sacct's AllocTRES does."""
    [job] = [j for j in parse.parse_sacct_json(fixture("sacct_json_X_window.json")) if j.job_id == "1"]
    assert job.alloc_tres == "billing=1,cpu=1,node=1"


def test_show_config_indexed_keys_and_null_container():
    """Findings 2 and 3: ``Prolog[0]``, ``Epilog[0]``, ``SlurmctldHost[0]``; ``(null)`` is ''."""
    config = parse.parse_scontrol_show_config(fixture("scontrol_show_config.txt"))
    assert config["Prolog"] == "/opt/slurm-acme/prolog/acme-prolog"
    assert config["Epilog"] == "/opt/slurm-acme/epilog/acme-epilog"
    assert config["SlurmctldHost"] == "vm(127.0.0.1)"
    assert config["JobContainerType"] == ""
    assert config["ClusterName"] == "acme" and config["PrologFlags"] == "Alloc"
    assert not any("[" in key or value == "(null)" for key, value in config.items())


def queue(name: str) -> dict[str, object]:
    return {j.job_id: j for j in parse.parse_squeue_json(fixture(name))}


def test_squeue_end_of_pending_and_unlimited_jobs_is_unknown():
    """Finding 5: a pending job's ``end_time`` 6091078544 and start+365 days of an
    unlimited running job are no ends (scontrol: ``EndTime=Unknown``)."""
    jobs = queue("squeue_pending_running.json")
    assert jobs["5"].state is JobState.PENDING and jobs["5"].end is None and jobs["5"].restarts == 1
    assert jobs["13"].end is None and jobs["13"].start is None
    assert jobs["12"].state is JobState.RUNNING and jobs["12"].end is None
    limited = jobs["4"]  # -t 1
    assert limited.end - limited.start == timedelta(minutes=1)
    yearly = jobs["3"]  # TimeLimit=365-00:00:00 in scontrol: that end is real
    assert yearly.end == datetime(2027, 12, 1, 7, 46, 17, tzinfo=timezone.utc)


def test_squeue_running_and_pending_records():
    jobs = queue("squeue_pending_running.json")
    big = jobs["12"]
    assert (big.nodes, big.nodelist, big.gpus, big.comment) == (4, "node[1-4]", 32, "waiting job")
    assert jobs["13"].reason == "JobHeldUser" and jobs["14"].gpus == 32
    assert jobs["5"].reason == "BeginTime"


def test_squeue_array_tasks():
    jobs = queue("squeue_array_running.json")
    tasks = {j.array_task_id: j for j in jobs.values()}
    assert {j.array_job_id for j in jobs.values()} == {"22"}
    assert [tasks[i].state for i in (0, 1, 2)] == [JobState.RUNNING, JobState.RUNNING, JobState.PENDING]
    assert tasks[2].reason == "JobArrayTaskLimit" and tasks[2].end is None
    assert all(t.gpus == 2 for t in tasks.values())


def test_plain_job_is_no_array_task():
    for job in queue("squeue_pending_running2.json").values():
        assert job.array_job_id is None and job.array_task_id is None


@pytest.mark.parametrize("name", ["scontrol_show_job_all.txt", "scontrol_show_job_all_oneline.txt"])
def test_scontrol_show_job_both_layouts(name):
    jobs = {j.job_id: j for j in parse.parse_scontrol_show_job(fixture(name))}
    assert jobs["2"].state is JobState.FAILED and jobs["2"].exit_code == 3
    assert jobs["1"].comment == "acme run=42 note" and jobs["1"].name == "ok-comment"
    assert jobs["13"].nodelist == "" and jobs["13"].state is JobState.PENDING
    assert parse.gpus_in_tres(jobs["12"].get("TresPerNode")) == 8


def test_scontrol_requeued_job_counts_its_restart():
    [job] = parse.parse_scontrol_show_job(fixture("scontrol_show_job_requeued_running.txt"))
    assert job.job_id == "5" and job.restarts == 1


def test_scontrol_array_records():
    jobs = parse.parse_scontrol_show_job(fixture("scontrol_show_job_array_running_oneline.txt"))
    assert sorted(j.get("ArrayTaskId") for j in jobs) == ["0", "1", "2"]


def test_gpu_indices_of_a_running_multinode_job():
    for name in ("scontrol_d_o_show_job_multinode_running.txt", "scontrol_d_show_job_multinode_running.txt"):
        text = fixture(name)
        assert parse.parse_job_gpu_groups(text) == [("node[1-2]", [0, 1, 2])]
        assert parse.gpu_indices_on(text, "node2") == (0, 1, 2)
        assert parse.gpu_indices_on(text, "node3") is None


def test_gpu_groups_of_a_finished_job_are_empty():
    groups = parse.parse_job_gpu_groups(fixture("scontrol_d_o_show_job_multinode.txt"))
    assert groups == [("node1", []), ("node2", [])]


@pytest.mark.parametrize("name", ["scontrol_show_node.txt", "scontrol_show_node_oneline.txt"])
def test_scontrol_show_node(name):
    nodes = parse.parse_scontrol_show_node(fixture(name))
    assert [n.name for n in nodes] == ["node1", "node2", "node3", "node4"]
    assert parse.node_addresses(nodes) == {f"node{i}": "127.0.0.1" for i in range(1, 5)}
    assert all(n.gres == "gpu:8" and n.port == 19100 + i for i, n in enumerate(nodes, start=1))


def test_node_back_after_node_fail():
    [node] = parse.parse_scontrol_show_node(fixture("scontrol_show_node_after_nodefail.txt"))
    assert node.name == "node4" and "DOWN" not in node.state


def test_sinfo_hostnames_sbatch_and_exit_codes():
    assert [(n.name, n.state, n.gres) for n in parse.parse_sinfo_nodes(fixture("sinfo_N_h_o_NTG.txt"))] == [
        (f"node{i}", "mixed", "gpu:8") for i in range(1, 5)]
    assert parse.parse_hostnames(fixture("scontrol_show_hostnames.txt")) == [f"node{i}" for i in range(1, 5)]
    assert parse.parse_sbatch_parsable(fixture("sbatch_parsable.txt")) == "1"
    codes = parse.parse_sacct_exit_codes(fixture("sacct_P_exitcodes.txt"))
    assert codes["2"] == (3, None) and codes["8"] == (0, 9)
