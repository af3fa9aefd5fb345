"""Parsers on verbatim 22.05 output and on the 23.11 (v0.0.40) layout."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_acme.slurm import JobState, SlurmParseError, parse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
VERSIONS = ["22.05", "23.11"]


def fixture(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


def by_name(jobs, name):
    [job] = [j for j in jobs if j.name == name]
    return job


@pytest.fixture(params=VERSIONS)
def sacct_jobs(request):
    return parse.parse_sacct_json(fixture(request.param, "sacct.json"))


@pytest.fixture(params=VERSIONS)
def queue_jobs(request):
    return parse.parse_squeue_json(fixture(request.param, "squeue.json"))


def test_sacct_two_node_gpu_job(sacct_jobs):
    job = by_name(sacct_jobs, "pt 7b")
    assert (job.nodes, job.nodelist, job.gpus, job.cpus) == (2, "node[1-2]", 16, 2)
    assert job.state is JobState.COMPLETED
    assert job.comment == "acme:type=Debug"
    assert "gres/gpu=16" in job.alloc_tres
    assert job.cluster == "acme" and job.user == "root" and job.partition == "debug"


def test_sacct_times_are_aware_utc(sacct_jobs):
    job = by_name(sacct_jobs, "pt 7b")
    assert job.start.tzinfo is timezone.utc
    assert job.submit <= job.start <= job.end
    assert (job.end - job.start).total_seconds() == 3


def test_sacct_failed_job_state(sacct_jobs):
    job = by_name(sacct_jobs, "failer")
    assert job.state is JobState.FAILED and job.state.is_failed()
    assert job.gpus == 2


def test_sacct_array_tasks_keep_array_id_and_task(sacct_jobs):
    tasks = sorted((j for j in sacct_jobs if j.name == "arr"), key=lambda j: j.array_task_id)
    assert [t.array_task_id for t in tasks] == list(range(len(tasks)))
    assert len({t.job_id for t in tasks}) == len(tasks)
    assert all(t.display_id == f"{t.array_job_id}_{t.array_task_id}" for t in tasks)


def test_sacct_plain_job_is_not_an_array(sacct_jobs):
    job = by_name(sacct_jobs, "pt 7b")
    assert job.array_job_id is None and job.array_task_id is None and job.display_id == job.job_id


def test_sacct_requeued_job_folds_into_one_record_with_restarts(sacct_jobs):
    job = by_name(sacct_jobs, "requeued")
    assert job.restarts == 1
    assert job.state is JobState.COMPLETED
    assert job.comment == "acme:type=Pretrain"


def test_sacct_job_ids_are_text_and_unique(sacct_jobs):
    ids = [j.job_id for j in sacct_jobs]
    assert all(isinstance(i, str) and i.isdigit() for i in ids)
    assert len(ids) == len(set(ids))


def test_sacct_2311_signal_and_never_started_job():
    jobs = parse.parse_sacct_json(fixture("23.11", "sacct.json"))
    oom = by_name(jobs, "oom")
    assert (oom.state, oom.exit_code, oom.signal) == (JobState.OUT_OF_MEMORY, 0, 9)
    never = by_name(jobs, "never ran")
    assert never.start is None and never.nodelist == "" and never.nodes == 0
    assert never.gpus == 8  # requested, since nothing was allocated
    assert by_name(jobs, "failer").exit_code == 3


def test_sacct_2205_json_exit_codes_are_patched_from_the_plain_listing():
    codes = parse.parse_sacct_exit_codes(fixture("22.05", "sacct_exitcodes.txt"))
    failer = by_name(parse.parse_sacct_json(fixture("22.05", "sacct.json")), "failer")
    assert codes[failer.job_id] == (3, None)


def test_squeue_running_gpu_job(queue_jobs):
    job = by_name(queue_jobs, "pt 7b")
    assert job.state is JobState.RUNNING
    assert (job.nodes, job.nodelist, job.gpus) == (2, "node[1-2]", 16)
    assert job.comment == "acme:type=Debug"
    assert job.start.tzinfo is timezone.utc


def test_squeue_pending_job_has_requested_gpus(queue_jobs):
    job = by_name(queue_jobs, "waiting")
    assert job.state is JobState.PENDING
    assert job.reason == "Resources" and job.gpus == 32 and job.nodelist == ""


def test_squeue_failed_job_exit_code(queue_jobs):
    assert by_name(queue_jobs, "failer").exit_code == 3


def test_squeue_array_task(queue_jobs):
    tasks = [j for j in queue_jobs if j.name == "arr"]
    assert tasks and all(t.array_job_id and t.array_task_id is not None for t in tasks)


def test_scontrol_show_job_fields_with_spaces_in_values():
    jobs = parse.parse_scontrol_show_job(fixture("22.05", "scontrol_show_job.txt"))
    job = next(j for j in jobs if j.job_id == "1")
    assert job.name == "pt 7b"
    assert job.state is JobState.RUNNING
    assert job.nodelist == "node[1-2]" and job.excluded == ""
    assert job.get("TresPerNode") == "gres:gpu:8"
    assert job.restarts == 0 and job.comment == "acme:type=Debug"


def test_scontrol_show_job_exit_code_and_multiline_layout():
    text = fixture("22.05", "scontrol_show_job.txt")
    one_line = parse.parse_scontrol_show_job(text)
    multi_line = parse.parse_scontrol_show_job(text.replace(" ", "\n   ").replace("\nJobId", "\n\nJobId"))
    assert [j.job_id for j in one_line] == [j.job_id for j in multi_line]
    failer = next(j for j in one_line if j.name == "failer")
    assert failer.exit_code == 3 and failer.state is JobState.FAILED


def test_hostnames_and_sinfo():
    assert parse.parse_hostnames(fixture("22.05", "scontrol_show_hostnames.txt")) == [
        "node1", "node2", "node3", "gpu01", "gpu02"]
    nodes = parse.parse_sinfo_nodes(fixture("22.05", "sinfo_nodes.txt"))
    assert [n.name for n in nodes] == ["node1", "node2", "node3", "node4"]
    assert nodes[0].gres == "gpu:8" and nodes[0].responding


@pytest.mark.parametrize(("value", "expected"), [
    (5, 5), ({"set": True, "infinite": False, "number": 5}, 5),
    ({"set": False, "infinite": False, "number": 0}, None),
    ({"set": True, "infinite": True, "number": 0}, None), (None, None), (True, None), ("12", 12),
])
def test_number_normalises_plain_and_wrapped_numbers(value, expected):
    assert parse.number(value) == expected


@pytest.mark.parametrize(("value", "expected"), [
    (768, (3, None)), (9, (0, 9)), (0, (0, None)),
    ({"status": "SUCCESS", "return_code": 0}, (0, None)),
    ({"status": "SIGNALED", "return_code": None, "signal": {"signal_id": 15, "name": "Terminated"}}, (0, 15)),
    ({"status": ["ERROR"], "return_code": {"set": True, "number": 2},
      "signal": {"id": {"set": False, "number": 0}, "name": ""}}, (2, None)),
])
def test_exit_status_reads_every_layout(value, expected):
    assert parse.exit_status(value) == expected


def test_timestamp_zero_is_none_and_values_are_utc():
    assert parse.timestamp(0) is None
    assert parse.timestamp({"set": True, "number": 86400}) == datetime(1970, 1, 2, tzinfo=timezone.utc)


@pytest.mark.parametrize(("text", "job_id"), [("123\n", "123"), ("456;acme\n", "456")])
def test_sbatch_parsable(text, job_id):
    assert parse.parse_sbatch_parsable(text) == job_id


@pytest.mark.parametrize("bad", ["", "Submitted batch job 5", "{"])
def test_bad_output_raises_parse_error(bad):
    with pytest.raises(SlurmParseError):
        parse.parse_sbatch_parsable(bad)
    with pytest.raises(SlurmParseError):
        parse.parse_sacct_json(bad or "[]")


def test_scontrol_show_node_with_spaces_in_the_os_field():
    nodes = parse.parse_scontrol_show_node(fixture("22.05", "scontrol_show_node.txt"))
    assert [n.name for n in nodes] == ["node1", "node2", "node3", "node4"]
    node = nodes[0]
    assert (node.addr, node.hostname, node.port, node.gres) == ("127.0.0.1", "localhost", 17901, "gpu:8")
    assert node.get("OS").startswith("Linux ") and node.state == "MIXED"


def test_scontrol_show_config():
    config = parse.parse_scontrol_show_config(fixture("22.05", "scontrol_show_config.txt"))
    assert config["ClusterName"] == "acme"
    assert config["AccountingStoreFlags"] == "job_comment"
    assert config["TaskEpilog"] == "" and config["SuspendRate"] == "60 nodes/min"


def test_job_gpu_groups_from_detailed_show_job():
    groups = parse.parse_job_gpu_groups(fixture("22.05", "scontrol_d_show_job.txt"))
    assert groups == [("node[1-2]", [2, 3, 4])]


@pytest.mark.parametrize(("text", "expected"), [
    ("Nodes=a1 CPU_IDs=0-1 Mem=0 GRES=gpu:a100:2(IDX:0,3)", [("a1", [0, 3])]),
    ("Nodes=a[1-2] CPU_IDs=0 Mem=0 GRES=", [("a[1-2]", [])]),
    ("Nodes=a1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:5) Nodes=a2 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)",
     [("a1", [5]), ("a2", [0, 1])]),
])
def test_job_gpu_groups_variants(text, expected):
    assert parse.parse_job_gpu_groups(text) == expected
