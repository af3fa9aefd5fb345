"""Sensor parsers on recorded real outputs (tests/fixtures/telemetry/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_acme.slurm.parse import expand_hostlist, gpu_indices_on
from slurm_acme.telemetry import marks
from slurm_acme.telemetry.dcgm import parse_dmon
from slurm_acme.telemetry.infiniband import InfinibandSampler
from slurm_acme.telemetry.ipmi import parse_dcmi_power
from slurm_acme.telemetry.records import checked

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "telemetry"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_ipmitool_dcmi_power_reading_gives_instantaneous_watts():
    assert parse_dcmi_power(fixture("ipmitool_dcmi_power_reading.txt")) == (50.0, [])


def test_freeipmi_system_power_statistics_gives_current_watts():
    assert parse_dcmi_power(fixture("ipmi_dcmi_system_power_statistics.txt")) == (164.0, [])


def test_inactive_power_measurement_is_dropped_and_flagged():
    text = fixture("ipmi_dcmi_system_power_statistics.txt").replace(": Active", ": Not Available")
    assert parse_dcmi_power(text) == (None, ["ipmi_inactive"])


@pytest.mark.parametrize("text", ["", "Error: Unable to establish IPMI v2 / RMCP+ session\n",
                                  "Instantaneous power reading:   lots Watts\n"])
def test_garbage_ipmi_output_is_flagged(text):
    watts, flags = parse_dcmi_power(text)
    assert watts is None and flags == ["garbage:node_power_w"]


def test_sentinel_power_reading_is_dropped():
    watts, flags = parse_dcmi_power("Current Power : 65535 Watts\nPower Measurement : Active\n")
    assert watts is None and flags == ["sentinel:node_power_w"]


def test_dcgmi_dmon_all_na_gives_gpus_without_values():
    reading = parse_dmon(fixture("dcgmi_dmon_smact_na.txt"))
    assert sorted(reading.gpus) == list(range(8))
    assert all(g == {"sm_active": None} for g in reading.gpus.values())
    assert reading.flags == []


def test_dcgmi_dmon_profiling_keeps_latest_real_value_per_gpu():
    reading = parse_dmon(fixture("dcgmi_dmon_profiling.txt"))
    assert reading.gpus[0] == {"sm_active": None, "tensor_active": 0.178, "dram_active": None}
    assert reading.gpus[1] == {"sm_active": 0.777, "tensor_active": None, "dram_active": None}
    assert reading.gpus[7]["tensor_active"] is None


def test_dcgmi_error_output_is_flagged_as_garbage():
    text = "Error setting watches. Result: -33: This request is serviced by a module of DCGM\n"
    assert parse_dmon(text).flags == ["dcgm_garbage"]


def test_dcgmi_out_of_range_ratio_is_flagged():
    reading = parse_dmon("#Entity  SMACT\nID\nGPU 0    4294967295\nGPU 1    7.5\n")
    assert reading.gpus[0] == {"sm_active": None, "flags": ["sentinel:sm_active"]}
    assert reading.gpus[1] == {"sm_active": None, "flags": ["garbage:sm_active"]}


@pytest.mark.parametrize("raw,flag", [(4294967295, "sentinel:x"), ("N/A", "garbage:x"),
                                      (float("nan"), "garbage:x"), (-3, "negative:x")])
def test_checked_rejects_sentinels_and_garbage(raw, flag):
    flags: list[str] = []
    assert checked(raw, "x", flags) is None and flags == [flag]


def test_scontrol_per_node_gpu_indices_from_real_22_05_output():
    text = fixture("scontrol_d_o_show_job_22.05.txt")
    assert gpu_indices_on(text, "node1") == (0, 1, 2)
    assert gpu_indices_on(text, "node2") == (0, 1, 2)
    assert gpu_indices_on(text, "node3") is None


def test_scontrol_gpu_indices_with_type_and_ranges():
    text = "JobId=9 Nodes=gpu[07-08] CPU_IDs=0-3 Mem=0 GRES=gpu:a100:3(IDX:0,2-3) Foo=1"
    assert gpu_indices_on(text, "gpu08") == (0, 2, 3)


def test_hostlist_expansion_keeps_zero_padding():
    assert expand_hostlist("n[1-2,05],login") == ["n1", "n2", "n05", "login"]


def test_mark_with_gpu_indices_and_uuids():
    mark = marks.parse_mark('{"v":1,"job_id":"12","node":"n1","ts":5.5,"user":"a",'
                            '"gpus":"0,GPU-ab12,3","restart":1}', "start")
    assert (mark.job_id, mark.gpu_indices, mark.gpu_uuids, mark.restart) == ("12", (0, 3), ("GPU-ab12",), 1)


def test_mark_without_gpu_list_is_unknown_not_empty():
    assert marks.parse_mark('{"v":1,"job_id":"1","node":"n","ts":1,"gpus":null}', "start").gpu_indices is None
    assert marks.parse_mark('{"v":1,"job_id":"1","node":"n","ts":1,"gpus":""}', "start").gpu_indices == ()


@pytest.mark.parametrize("raw,code", [("0:0", 0), ("3:0", 3), ("0:9", 137), ("", None), ("x", None)])
def test_epilog_exit_code(raw, code):
    assert marks.exit_code_of(raw) == code


@pytest.mark.parametrize("text", ["", "{", '{"v":2,"job_id":"1"}', '{"v":1,"node":"n","ts":1}',
                                  '{"v":1,"job_id":"1","node":"n","ts":"soon"}'])
def test_bad_marks_are_rejected(text):
    with pytest.raises(marks.BadMark):
        marks.parse_mark(text, "start")


def _port(root: Path, hca: str, port: int, rx: int, tx: int) -> None:
    counters = root / hca / "ports" / str(port) / "counters"
    counters.mkdir(parents=True, exist_ok=True)
    (counters / "port_rcv_data").write_text(f"{rx}\n")
    (counters / "port_xmit_data").write_text(f"{tx}\n")


def test_infiniband_reports_bytes_since_last_tick_over_all_ports(tmp_path):
    _port(tmp_path, "mlx5_0", 1, 100, 10)
    _port(tmp_path, "mlx5_1", 1, 50, 5)
    sampler = InfinibandSampler(str(tmp_path))
    assert sampler.probe() is None
    _port(tmp_path, "mlx5_0", 1, 300, 20)
    assert sampler.sample({}).node == {"ib_rx_bytes": 800.0, "ib_tx_bytes": 40.0}
    _port(tmp_path, "mlx5_0", 1, 0, 0)
    reading = sampler.sample({})
    assert reading.node == {} and reading.flags == ["ib_counter_reset"]


def test_infiniband_without_hardware_says_why(tmp_path):
    assert "no InfiniBand" in InfinibandSampler(str(tmp_path)).probe()
