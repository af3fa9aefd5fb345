"""Node pre-checks with their boundaries faked: an NVML module, a sysfs tree, log lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_acme.health.precheck import (
    BAD,
    OK,
    UNAVAILABLE,
    NodePrecheck,
    check_gpu_count,
    check_infiniband,
    check_nvml_memory,
    check_xid,
    run_node_prechecks,
    visible_gpus,
)


class FakeNVMLError(Exception):
    pass


class FakeNVML:
    """The slice of pynvml the pre-checks call; each GPU a dict of answers."""

    NVMLError = FakeNVMLError
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def __init__(self, *gpus: dict) -> None:
        self.gpus = gpus

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict:
        return self.gpus[index]

    def _answer(self, handle: dict, key: str):  # type: ignore[no-untyped-def]
        if key not in handle:
            raise FakeNVMLError("Not Supported")
        return handle[key]

    def nvmlDeviceGetTotalEccErrors(self, handle: dict, error_type: int, counter: int) -> int:
        assert (error_type, counter) == (1, 0)
        return self._answer(handle, "ecc")

    def nvmlDeviceGetRemappedRows(self, handle: dict) -> tuple[int, int, int, int]:
        return self._answer(handle, "remap")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: dict) -> int:
        return self._answer(handle, "retired_pending")


HEALTHY_A100 = {"ecc": 0, "remap": (0, 0, 0, 0)}


def test_healthy_gpus_pass_the_nvml_check() -> None:
    assert check_nvml_memory(FakeNVML(HEALTHY_A100, HEALTHY_A100)).status == OK


@pytest.mark.parametrize("gpu, words", [
    ({"ecc": 3, "remap": (0, 0, 0, 0)}, "3 uncorrectable ECC"),
    ({"ecc": 0, "remap": (2, 1, 1, 0)}, "row remapping pending"),
    ({"ecc": 0, "remap": (0, 0, 0, 1)}, "row remapping failed"),
    ({"ecc": 0, "retired_pending": 1}, "retired pages pending"),
])
def test_nvml_memory_faults_mark_the_node_bad(gpu: dict, words: str) -> None:
    outcome = check_nvml_memory(FakeNVML(HEALTHY_A100, gpu))
    assert outcome.status == BAD
    assert f"GPU 1: {words}" in outcome.detail


def test_gpu_without_ecc_support_is_not_available_not_bad() -> None:
    assert check_nvml_memory(FakeNVML({})).status == UNAVAILABLE


def test_no_nvml_is_not_available() -> None:
    outcome = check_nvml_memory(None, "NVML Shared Library Not Found")
    assert (outcome.status, outcome.detail) == (UNAVAILABLE, "NVML Shared Library Not Found")


def test_fewer_visible_gpus_than_allocated_is_bad() -> None:
    assert check_gpu_count(visible=7, allocated=8).status == BAD
    assert check_gpu_count(visible=8, allocated=8).status == OK
    assert check_gpu_count(visible=None, allocated=8).status == UNAVAILABLE
    assert check_gpu_count(visible=8, allocated=None).status == UNAVAILABLE


def test_visible_gpus_honours_cuda_visible_devices() -> None:
    nvml = FakeNVML(*[HEALTHY_A100] * 8)
    assert visible_gpus(nvml, {}) == 8
    assert visible_gpus(nvml, {"CUDA_VISIBLE_DEVICES": "0,1"}) == 2
    assert visible_gpus(None, {}) is None


def test_critical_xid_in_kernel_log_is_bad() -> None:
    log = ["[ 12.3] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n",
           "[ 99.1] NVRM: Xid (PCI:0000:86:00): 79, pid=123, GPU has fallen off the bus.\n"]
    outcome = check_xid(log)
    assert outcome.status == BAD
    assert outcome.detail == "Xid 79 on PCI:0000:86:00"


def test_application_xid_alone_is_ok() -> None:
    assert check_xid(["NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"]).status == OK
    assert check_xid(None).status == UNAVAILABLE


def ib_port(root: Path, dev: str, port: int, state: str, phys: str, downed: int) -> None:
    folder = root / "class" / "infiniband" / dev / "ports" / str(port)
    (folder / "counters").mkdir(parents=True)
    (folder / "state").write_text(f"{state}\n")
    (folder / "phys_state").write_text(f"{phys}\n")
    (folder / "counters" / "link_downed").write_text(f"{downed}\n")


def test_active_ib_ports_pass(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", 0)
    ib_port(tmp_path, "mlx5_1", 1, "4: ACTIVE", "5: LinkUp", 0)
    assert check_infiniband(tmp_path).status == OK


def test_down_ib_port_is_bad(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", 0)
    ib_port(tmp_path, "mlx5_1", 1, "1: DOWN", "2: Polling", 0)
    outcome = check_infiniband(tmp_path)
    assert (outcome.status, outcome.detail) == (BAD, "mlx5_1/1 state DOWN")


def test_link_downed_counter_is_bad(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", 3)
    assert check_infiniband(tmp_path).detail == "mlx5_0/1 link_downed=3"
    assert check_infiniband(tmp_path, max_link_downed=5).status == OK


def test_disabled_ib_port_is_ignored(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "5: LinkUp", 0)
    ib_port(tmp_path, "mlx5_0", 2, "1: DOWN", "3: Disabled", 0)
    assert check_infiniband(tmp_path).status == OK


def test_no_ib_is_not_available(tmp_path: Path) -> None:
    assert check_infiniband(tmp_path).status == UNAVAILABLE


def test_node_report_round_trips_through_json(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0", 1, "1: DOWN", "2: Polling", 0)
    report = run_node_prechecks(node="node7", nvml=FakeNVML(HEALTHY_A100), nvml_why_not="",
                                kernel_log=[], sysfs=tmp_path, expect_gpus=None,
                                environ={"SLURM_GPUS_ON_NODE": "2"})
    again = NodePrecheck.from_json(report.to_json())
    assert again == report
    assert [c.name for c in again.bad] == ["gpu_count", "infiniband"]  # 1 visible of 2
