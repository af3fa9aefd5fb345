"""Samplers at their boundaries: a fake pynvml module, fake sensor executables."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from nvml_fake import FakeNvml, FakeNVMLError

from slurm_acme.telemetry.dcgm import DcgmSampler
from slurm_acme.telemetry.ipmi import IpmiSampler
from slurm_acme.telemetry.nvml import NvmlSampler
from slurm_acme.telemetry.synthetic import SyntheticGpuSampler

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "telemetry"


def test_nvml_samples_every_gpu_keyed_by_minor_number():
    nvml = FakeNvml()
    sampler = NvmlSampler(nvml)
    assert sampler.probe() is None
    reading = sampler.sample({})
    assert sorted(reading.gpus) == [2, 5]
    busy = reading.gpus[2]
    assert busy["gpu_uuid"] == "GPU-fake-0" and busy["util_percent"] == 97.0
    assert busy["power_w"] == 250.0 and busy["temp_c"] == 71.0 and busy["ecc_dbe"] == 2
    assert busy["mem_used_bytes"] == 40 * 2**30 and busy["source"] == "nvml"


def test_nvml_idle_gpu_is_sampled_too():
    sampler = NvmlSampler(FakeNvml(power_mw=(250_000, 61_000)))
    assert sampler.probe() is None
    idle = sampler.sample({}).gpus[5]
    assert idle["util_percent"] == 0.0 and idle["power_w"] == 61.0


def test_nvml_sentinel_power_is_dropped_and_flagged():
    sampler = NvmlSampler(FakeNvml())
    sampler.probe()
    gpu = sampler.sample({}).gpus[5]
    assert gpu["power_w"] is None and gpu["flags"] == ["sentinel:power_w"]


def test_nvml_unsupported_field_is_none_without_failing():
    sampler = NvmlSampler(FakeNvml())
    sampler.probe()
    assert sampler.sample({}).gpus[5]["ecc_dbe"] is None


def test_nvml_xid_events_land_on_their_gpu_once():
    nvml = FakeNvml()
    sampler = NvmlSampler(nvml)
    sampler.probe()
    nvml.pending_xids = [(1, 79)]
    first = sampler.sample({})
    assert first.gpus[5]["xid"] == 79 and first.gpus[2]["xid"] is None
    assert sampler.sample({}).gpus[5]["xid"] is None


def test_nvml_xid_of_a_gpu_without_readable_uuid_lands_on_that_gpu_alone():
    class NoUuid(FakeNvml):
        def nvmlDeviceGetUUID(self, h):
            raise FakeNVMLError("Not Supported")

    nvml = NoUuid()
    sampler = NvmlSampler(nvml)
    sampler.probe()
    nvml.pending_xids = [(0, 48)]
    reading = sampler.sample({})
    assert reading.gpus[2]["gpu_uuid"] is None and reading.gpus[2]["xid"] == 48
    assert reading.gpus[5]["xid"] is None


def test_nvml_without_event_support_still_samples():
    sampler = NvmlSampler(FakeNvml(events=False))
    assert sampler.probe() is None
    assert sampler.sample({}).gpus[2]["xid"] is None


def test_nvml_that_cannot_start_is_skipped_with_reason():
    nvml = FakeNvml()

    def broken():
        raise FakeNVMLError("Driver Not Loaded")

    nvml.nvmlInit = broken
    assert NvmlSampler(nvml).probe() == "NVML cannot start: Driver Not Loaded"


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def sensor_path(tmp_path, monkeypatch):
    """A PATH holding only fake sensor tools written by the test."""
    monkeypatch.setenv("PATH", str(tmp_path))
    return tmp_path


def test_ipmi_sampler_reads_recorded_output(sensor_path):
    _tool(sensor_path, "ipmitool", f"/bin/cat {FIXTURES / 'ipmitool_dcmi_power_reading.txt'}\n")
    sampler = IpmiSampler(timeout=5, device=os.devnull)
    assert sampler.probe() is None
    assert sampler.sample({}).node == {"node_power_w": 50.0}


def test_ipmi_sampler_falls_back_to_freeipmi(sensor_path):
    _tool(sensor_path, "ipmi-dcmi", f"/bin/cat {FIXTURES / 'ipmi_dcmi_system_power_statistics.txt'}\n")
    sampler = IpmiSampler(timeout=5, device=os.devnull)
    assert sampler.probe() is None and sampler.argv[1:] == ["--get-system-power-statistics"]
    assert sampler.sample({}).node == {"node_power_w": 164.0}


def test_hanging_sensor_is_killed_and_flagged(sensor_path):
    _tool(sensor_path, "ipmitool", "exec /bin/sleep 30\n")
    sampler = IpmiSampler(timeout=0.3, device=os.devnull)
    sampler.probe()
    reading = sampler.sample({})
    assert reading.node == {} and reading.flags == ["ipmi_timeout"]


def test_failing_sensor_is_flagged_with_exit_code(sensor_path):
    _tool(sensor_path, "dcgmi", "echo 'Error: unable to connect to host engine' >&2; exit 255\n")
    sampler = DcgmSampler(timeout=5)
    assert sampler.probe() is None
    assert sampler.sample({}).flags == ["dcgm_rc=255"]


def test_dcgm_sampler_reads_recorded_output(sensor_path):
    _tool(sensor_path, "dcgmi", f"/bin/cat {FIXTURES / 'dcgmi_dmon_profiling.txt'}\n")
    sampler = DcgmSampler(timeout=5)
    sampler.probe()
    assert sampler.sample({}).gpus[1]["sm_active"] == 0.777


def test_missing_tools_are_reported_once_by_probe(sensor_path):
    assert DcgmSampler(timeout=5).probe() == "dcgmi is not installed"
    assert IpmiSampler(timeout=5, device=os.devnull).probe() == "neither ipmitool nor ipmi-dcmi is installed"
    assert IpmiSampler(timeout=5, device=str(sensor_path / "ipmi0")).probe().startswith("no BMC device")


def test_synthetic_gpus_are_labelled_and_follow_attribution():
    sampler = SyntheticGpuSampler(4, "n1")
    reading = sampler.sample({1: "42"})
    assert all(g["source"] == "synthetic" and g["flags"] == ["synthetic"] for g in reading.gpus.values())
    assert reading.gpus[1]["util_percent"] >= 80 and reading.gpus[0]["util_percent"] == 0.0
    assert reading.gpus[0]["power_w"] > 0


def test_synthetic_sampler_is_off_by_default():
    from slurm_acme.config import AcmeConfig

    assert AcmeConfig().telemetry.synthetic_gpus == 0
