"""Hardware events the node collector sees (through the NVML fake), as ledger events."""

from __future__ import annotations

from pathlib import Path

from nvml_fake import FakeNvml

from slurm_acme.store import nodes as ledger
from slurm_acme.store import open_store
from slurm_acme.telemetry.collector import Collector
from slurm_acme.telemetry.hwevents import HardwareWatch, xid_category
from slurm_acme.telemetry.nvml import NvmlSampler
from slurm_acme.telemetry.records import Reading
from slurm_acme.telemetry.settings import CollectorSettings

T0 = 1_780_000_000.0


def watched(nvml: FakeNvml) -> tuple[NvmlSampler, HardwareWatch]:
    sampler = NvmlSampler(nvml)
    assert sampler.probe() is None
    return sampler, HardwareWatch("acme", "node3")


def codes(events: list[ledger.NodeEvent]) -> list[tuple[int | None, str]]:
    return [(e.gpu_index, e.code) for e in events]


def test_each_xid_is_one_event_with_its_gpu_job_and_category():
    nvml = FakeNvml()
    sampler, watch = watched(nvml)
    watch.events(sampler.sample({}), {}, T0)  # the first tick sets the baselines
    nvml.pending_xids = [(1, 13), (1, 79)]
    events = watch.events(sampler.sample({}), {5: "4242"}, T0 + 15)
    assert codes(events) == [(5, "xid:13"), (5, "xid:79")]
    assert [e.category for e in events] == ["XidError", "NodeFailure"]
    assert {e.job_id for e in events} == {"4242"} and events[1].source == "hardware"
    assert watch.events(sampler.sample({}), {}, T0 + 30) == []


def test_a_rising_double_bit_ecc_count_is_an_event_once():
    nvml = FakeNvml()
    sampler, watch = watched(nvml)
    assert codes(watch.events(sampler.sample({}), {}, T0)) == [(2, "ecc_dbe")]  # 2 already on the counter
    assert watch.events(sampler.sample({}), {}, T0 + 15) == []
    nvml.dbe[0] = 3
    assert codes(watch.events(sampler.sample({}), {}, T0 + 30)) == [(2, "ecc_dbe")]


def test_a_row_remap_failure_and_a_lost_gpu_are_events_once():
    nvml = FakeNvml()
    sampler, watch = watched(nvml)
    nvml.dbe[0] = 0
    watch.events(sampler.sample({}), {}, T0)
    nvml.remap_failure[1] = True
    nvml.lost.add(0)
    first = watch.events(sampler.sample({}), {}, T0 + 15)
    assert codes(first) == [(2, "gpu_lost"), (5, "row_remap_failure")]
    assert watch.events(sampler.sample({}), {}, T0 + 30) == []


def test_a_sticky_xid_gauge_is_one_event_per_new_value():
    watch = HardwareWatch("acme", "node3")
    tick = lambda xid: Reading(gpus={0: {"xid": xid, "gpu_uuid": "U"}})  # noqa: E731
    assert codes(watch.events(tick(48), {}, T0)) == [(0, "xid:48")]
    assert watch.events(tick(48), {}, T0 + 15) == []
    assert codes(watch.events(tick(79), {}, T0 + 30)) == [(0, "xid:79")]


def test_xid_categories_follow_the_rule_book():
    assert [xid_category(x) for x in (79, 48, 94, 74, 145, 13)] == [
        "NodeFailure", "ECCError", "ECCError", "NVLinkError", "NVLinkError", "XidError"]


def test_the_collector_spools_hardware_events_and_flushes_them_to_the_ledger(tmp_path: Path):
    central = open_store(f"sqlite:///{tmp_path / 'central.db'}")
    s = CollectorSettings.build("acme", "node3", "central", spool_dir=tmp_path / "spool", interval_s=10.0)
    nvml = FakeNvml()
    c = Collector(s, samplers=[NvmlSampler(nvml)], open_central=lambda url: central,
                  gpu_resolver=lambda job, node: None, clock=lambda: T0)
    c.start()
    try:
        c.tick(T0)
        nvml.pending_xids = [(0, 79)]
        c.tick(T0 + 10)
        assert c.flush_due and c.drain_due
        result = c.flush()
        assert result is not None and result.event_rows == 2
        assert c.flush().event_rows == 0  # sent once
        got = [(e.node, e.gpu_index, e.code) for e in ledger.list_events(central)]
        assert got == [("node3", 2, "ecc_dbe"), ("node3", 2, "xid:79")]
    finally:
        c.close()
