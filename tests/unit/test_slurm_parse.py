"""Parsers on verbatim 22.05 output, and on the two hand-written 23.11 records the real
captures lack (the real 24.11 captures are tested in test_slurm_parse_2411.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurm_acme.slurm import JobState, SlurmParseError, parse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
VERSIONS = ["22.05"]
HANDWRITTEN = "23.11-handwritten"


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


def test_sacct_2311_out_of_memory_kill_has_a_signal_and_no_return_code():
    [oom] = parse.parse_sacct_json(fixture(HANDWRITTEN, "sacct.json"))
    assert (oom.state, oom.exit_code, oom.signal) == (JobState.OUT_OF_MEMORY, 0, 9)
    assert oom.state.is_failed() and oom.state.is_terminal()


def test_squeue_2311_state_list_with_a_flag_reads_the_base_state():
    [job] = parse.parse_squeue_json(fixture(HANDWRITTEN, "squeue.json"))
    assert job.state is JobState.PENDING and job.restarts == 2
    assert job.end is None


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


@pytest.mark.parametrize("sentinel", [
    parse.NO_VAL, parse.INFINITE, parse.NO_VAL64, parse.INFINITE64,
    {"set": True, "infinite": False, "number": parse.NO_VAL},
])
def test_number_maps_32_and_64_bit_sentinels_to_none(sentinel):
    assert parse.number(sentinel) is None


def test_number_16_bit_sentinels_only_in_16_bit_fields():
    assert parse.number(parse.NO_VAL16, bits=16) is None
    assert parse.number(parse.INFINITE16, bits=16) is None
    assert parse.number(parse.NO_VAL16) == 65534  # a 32-bit field may hold it
    assert parse.number(parse.NO_VAL, bits=64) == parse.NO_VAL  # a 64-bit count may too
    assert parse.number(parse.NO_VAL64, bits=64) is None


@pytest.mark.parametrize(("count", "expected"), [
    (-2, None), (-1, None), (parse.NO_VAL64, None), ({"set": False, "number": 0}, None),
    (0, 0), (parse.NO_VAL, parse.NO_VAL), (256000, 256000),
])
def test_tres_amount_drops_negative_and_unset_counts(count, expected):
    assert parse.tres_amount(count) == expected


@pytest.mark.parametrize("value", [parse.NO_VAL, parse.INFINITE, 6091078544, -1, parse.NO_VAL64])
def test_timestamp_of_a_sentinel_or_a_time_derived_from_one_is_none(value):
    assert parse.timestamp(value) is None


def test_tres_string_is_sorted_like_sacct_and_skips_unset_counts():
    tres = [{"type": "cpu", "name": "", "count": 1}, {"type": "energy", "name": "", "count": -2},
            {"type": "gres", "name": "gpu", "count": 8}, {"type": "billing", "name": None, "count": 1}]
    assert parse.tres_string(tres) == "billing=1,cpu=1,gres/gpu=8"


@pytest.mark.parametrize(("text", "gpus"), [
    ("cpu=2,gres/gpu=16", 16), ("gres:gpu:8", 8), ("gres/gpu:3", 3), ("gres/gpu:a100=4", 4), ("gres:gpu:a100:2", 2),
    ("gres/gpu=4,gres/gpu:a100=4", 4), ("cpu=2,mem=1G", None), ("", None), ("gres/gpumem=8", None),
])
def test_gpus_in_tres_reads_every_text_form(text, gpus):
    assert parse.gpus_in_tres(text) == gpus


def test_config_keys_with_an_index_come_back_under_their_name():
    text = ("Prolog[0]               = /a/prolog\nProlog[1]               = /b/prolog\n"
            "SlurmctldHost[0]        = vm(127.0.0.1)\nJobContainerType        = (null)\n"
            "Slurmctld(primary) at vm is UP\n")
    config = parse.parse_scontrol_show_config(text)
    assert config == {"Prolog": "/a/prolog,/b/prolog", "SlurmctldHost": "vm(127.0.0.1)",
                      "JobContainerType": ""}


def test_scontrol_records_turn_null_into_empty_text():
    [job] = parse.parse_scontrol_show_job("JobId=5 JobName=x Comment=(null) NodeList=(null)")
    assert job.get("Comment") == "" and job.comment == "" and job.nodelist == ""


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
    assert config["Prolog"].endswith("/acme-prolog") and config["SlurmctldHost"] == "vm(127.0.0.1)"
    assert config["JobContainerType"] == "job_container/none"
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


def test_sdiag_gives_the_controllers_clock():
    # captured from the local cluster: "sdiag output at Tue Dec 01 13:02:13 2026 (1796130133)"
    assert parse.parse_sdiag_time(fixture("22.05", "sdiag.txt")) == 1796130133


def test_sdiag_without_its_header_is_a_parse_error():
    with pytest.raises(SlurmParseError, match="sdiag output at"):
        parse.parse_sdiag_time("Server thread count:  3\n")


def test_sacctmgr_node_events_keep_a_down_that_is_over():
    """`sacctmgr -n -P list event` from the 22.05 test cluster: nodes set DOWN by a test
    (back in service at once), not responding, and drained by the node ledger."""
    from datetime import datetime

    events = parse.parse_sacctmgr_events(fixture("22.05", "sacctmgr_list_event.txt"))
    assert len(events) == 14 and {e.node for e in events} == {"node2", "node3"}
    admin = [e for e in events if e.reason == "acme-test-node-down"]
    assert [e.start for e in admin][-1] == datetime(2026, 12, 1, 17, 16, 59).astimezone()
    assert all(e.down for e in admin)
    assert [e.state for e in events if e.down and e.reason == "Not responding"] == ["DOWN*"] * 3
    assert not any(e.down for e in events if e.state.startswith("DRAIN"))
    assert parse.parse_sacctmgr_events("|2026-12-01T00:00:00|UP|cluster-wide\n\n") == []
