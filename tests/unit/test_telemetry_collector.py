"""The collector's spool, attribution, summaries and flush, on SQLite and Postgres."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from slurm_acme.errors import StoreUnavailable
from slurm_acme.store import telemetry as tstore
from slurm_acme.telemetry.collector import Collector
from slurm_acme.telemetry.host import HostSampler
from slurm_acme.telemetry.records import Reading
from slurm_acme.telemetry.settings import CollectorSettings
from slurm_acme.telemetry.synthetic import SyntheticGpuSampler

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class PowerSampler:
    """A node sampler with a known power draw, so energies are checkable."""

    name = "ipmi"

    def __init__(self, watts: float | None = 500.0) -> None:
        self.watts = watts

    def probe(self):
        return None

    def sample(self, busy):
        return Reading(node={"node_power_w": self.watts})

    def close(self):
        return None


def settings(tmp_path: Path, url: str | None, node: str = "n1", **kw) -> CollectorSettings:
    return CollectorSettings.build("acme", node, url, spool_dir=tmp_path / "spool",
                                   interval_s=10.0, flush_interval_s=60.0, **kw)


def write_mark(s: CollectorSettings, job: str, kind: str, ts: float, gpus: str | None = "1,3",
               exit_code: str = "0:0") -> None:
    s.marks_dir.mkdir(parents=True, exist_ok=True)
    body = {"v": 1, "kind": kind, "job_id": job, "node": s.node, "ts": ts, "user": "alice",
            "gpus": gpus, "restart": 0}
    if kind == "end":
        body["exit_code"] = exit_code
    (s.marks_dir / f"{job}.0.{kind}").write_text(json.dumps(body))


def make_collector(s: CollectorSettings, clock: Clock, store=None, **kw) -> Collector:
    samplers = kw.pop("samplers", None) or [SyntheticGpuSampler(4, s.node), HostSampler(), PowerSampler()]
    c = Collector(s, samplers=samplers, clock=clock,
                  open_central=kw.pop("open_central", (lambda url: store)),
                  gpu_resolver=kw.pop("gpu_resolver", lambda job, node: None))
    c.start()
    return c


def run_job(c: Collector, clock: Clock, job: str, ticks: int, gpus: str | None = "1,3") -> None:
    write_mark(c.settings, job, "start", clock.now, gpus)
    c.process_marks()
    for _ in range(ticks):
        clock.now += 10
        c.tick(clock.now)
    clock.now += 5
    write_mark(c.settings, job, "end", clock.now)
    c.process_marks()


def test_gpu_samples_are_attributed_to_the_job_holding_the_gpu(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store)
    run_job(c, clock, "101", ticks=3)
    c.tick(clock.now + 10)  # after the end: nobody holds the GPUs
    c.flush()
    rows = tstore.job_rows(store, "acme", "101")
    assert {(r["gpu_index"], r["job_id"]) for r in rows["gpu_samples"]} == {(1, "101"), (3, "101")}
    assert len(rows["gpu_samples"]) == 6 and len(rows["node_samples"]) == 3
    counts = tstore.count_rows(store, "acme")
    assert counts["gpu_samples"] == 4 * 4 and counts["node_samples"] == 4


def test_job_summary_has_means_energy_coverage_and_flags(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store)
    run_job(c, clock, "7", ticks=4)
    c.flush()
    summary = tstore.job_summary(store, "acme", "7")
    assert summary["start_ts"] == T0 and summary["end_ts"] == T0 + 45
    assert summary["nodes"] == "n1" and summary["gpus"] == 2 and summary["exit_code"] == 0
    assert 80 <= summary["gpu_util_mean"] <= summary["gpu_util_max"] <= 100
    assert 0.45 <= summary["sm_active_mean"] <= 0.85
    assert summary["node_energy_j"] == pytest.approx(500.0 * 45)
    assert summary["gpu_energy_j"] > 2 * 280 * 45 * 0.99
    assert summary["coverage"] == pytest.approx(40 / 45)
    assert summary["n_gpu_samples"] == 8 and summary["n_node_samples"] == 4
    assert set(summary["flags"].split(",")) == {"synthetic"}


def test_short_job_is_flagged_too_short_and_low_coverage(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store)
    write_mark(c.settings, "8", "start", clock.now)
    write_mark(c.settings, "8", "end", clock.now + 3)
    c.process_marks()
    c.flush()
    flags = set(tstore.job_summary(store, "acme", "8")["flags"].split(","))
    assert {"too_short", "low_coverage", "no_gpu_samples"} <= flags


def test_sentinel_values_are_excluded_and_flag_the_summary(tmp_path, store):
    class SentinelPower:
        name = "nvml"

        def probe(self):
            return None

        def sample(self, busy):
            return Reading(gpus={1: {"power_w": None, "util_percent": 50.0, "source": "nvml",
                                     "flags": ["sentinel:power_w"]}})

        def close(self):
            return None

    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store,
                       samplers=[SentinelPower(), HostSampler()])
    run_job(c, clock, "9", ticks=3, gpus="1")
    c.flush()
    summary = tstore.job_summary(store, "acme", "9")
    assert "sentinel_values" in summary["flags"].split(",")
    assert summary["gpu_util_mean"] == 50.0 and summary["gpu_energy_j"] is None
    assert "no_node_power" in summary["flags"].split(",")


def test_store_down_keeps_everything_in_the_spool_and_flushes_later(tmp_path, store):
    clock = Clock()
    state = {"down": True}

    def opener(url):
        if state["down"]:
            raise StoreUnavailable("database is unreachable: connection refused")
        return store

    c = make_collector(settings(tmp_path, store.url), clock, open_central=opener)
    run_job(c, clock, "55", ticks=5)
    assert c.flush() is None
    assert tstore.count_rows(store)["node_samples"] == 0
    state["down"] = False
    result = c.flush()
    assert (result.node_rows, result.gpu_rows, result.job_rows) == (5, 20, 1)
    assert tstore.job_summary(store, "acme", "55")["n_node_samples"] == 5


def test_reflushing_a_batch_after_a_crash_duplicates_nothing(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store)
    run_job(c, clock, "60", ticks=3)
    c.flush()
    before = tstore.count_rows(store)
    with c.spool.engine.begin() as conn:  # the watermark update "never happened"
        from slurm_acme.store.rows import set_meta

        set_meta(conn, "telemetry.spool.flushed.gpu_samples", "0")
        set_meta(conn, "telemetry.spool.flushed.node_samples", "0")
    c.flush()
    assert tstore.count_rows(store) == before


def test_flush_sends_in_batches(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url, flush_batch=3), clock, store)
    for _ in range(4):
        clock.now += 10
        c.tick(clock.now)
    result = c.flush()
    assert (result.node_rows, result.gpu_rows) == (4, 16)
    assert tstore.count_rows(store)["gpu_samples"] == 16


def test_shares_of_two_nodes_combine_into_one_summary(tmp_path, store):
    clock = Clock()
    a = make_collector(settings(tmp_path, store.url, node="n1"), clock, store)
    b = make_collector(settings(tmp_path, store.url, node="n2"), clock, store)
    for c in (a, b):
        write_mark(c.settings, "70", "start", T0, "0,1,2,3")
        c.process_marks()
        c.flush()
    for _ in range(3):
        clock.now += 10
        a.tick(clock.now)
        b.tick(clock.now)
    clock.now += 5
    write_mark(a.settings, "70", "end", clock.now)
    a.process_marks()
    a.flush()
    assert "nodes_still_running" in tstore.job_summary(store, "acme", "70")["flags"]
    write_mark(b.settings, "70", "end", clock.now, exit_code="1:0")
    b.process_marks()
    b.flush()
    summary = tstore.job_summary(store, "acme", "70")
    assert summary["nodes"] == "n1,n2" and summary["gpus"] == 8 and summary["exit_code"] == 1
    assert summary["n_gpu_samples"] == 24 and summary["node_energy_j"] == pytest.approx(2 * 500 * 35)
    assert "nodes_still_running" not in summary["flags"]


def test_mark_time_defaults_to_the_file_mtime(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store)
    c.settings.marks_dir.mkdir(parents=True, exist_ok=True)
    mark = c.settings.marks_dir / "5.0.start"
    mark.write_text('{"v":1,"kind":"start","job_id":"5","node":"n1","user":"a","gpus":"0","restart":0}')
    os.utime(mark, (T0 - 30, T0 - 30))
    c.process_marks()
    assert tstore.open_jobs(c.spool, "acme", "n1")[0]["start_ts"] == T0 - 30


def test_requeued_run_end_is_applied_before_the_next_start(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store)
    write_mark(c.settings, "6", "start", T0)
    c.process_marks()
    (c.settings.marks_dir / "6.1.start").write_text(json.dumps(
        {"v": 1, "job_id": "6", "node": "n1", "ts": T0 + 20, "gpus": "0", "restart": 1}))
    write_mark(c.settings, "6", "end", T0 + 10)  # the first run's end, seen late
    c.process_marks()
    (job,) = tstore.open_jobs(c.spool, "acme", "n1")
    assert job["start_ts"] == T0 + 20 and job["end_ts"] is None


def test_mark_without_gpu_list_asks_the_resolver(tmp_path, store):
    clock = Clock()
    asked = []

    def resolver(job, node):
        asked.append((job, node))
        return (2,)

    c = make_collector(settings(tmp_path, store.url), clock, store, gpu_resolver=resolver)
    run_job(c, clock, "80", ticks=2, gpus=None)
    c.flush()
    assert asked == [("80", "n1")]
    assert {r["gpu_index"] for r in tstore.job_rows(store, "acme", "80")["gpu_samples"]} == {2}


def test_unresolvable_gpus_are_flagged(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store)
    run_job(c, clock, "81", ticks=2, gpus=None)
    c.flush()
    assert "gpus_unknown" in tstore.job_summary(store, "acme", "81")["flags"]


def test_bad_mark_is_set_aside_and_others_proceed(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store)
    c.settings.marks_dir.mkdir(parents=True, exist_ok=True)
    bad = c.settings.marks_dir / "99.0.start"
    bad.write_text("{not json")
    write_mark(c.settings, "98", "start", clock.now)
    assert c.process_marks() == 1
    assert bad.exists()  # maybe still being written: waited for
    os.utime(bad, (time.time() - 60, time.time() - 60))
    assert c.process_marks() == 0
    assert (c.settings.marks_dir / "bad" / "99.0.start").exists()
    assert [j["job_id"] for j in tstore.open_jobs(c.spool, "acme", "n1")] == ["98"]


def test_a_failing_sampler_is_flagged_and_the_tick_goes_on(tmp_path, store):
    class Broken:
        name = "dcgm"

        def probe(self):
            return None

        def sample(self, busy):
            raise RuntimeError("boom")

        def close(self):
            return None

    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store,
                       samplers=[Broken(), HostSampler()])
    c.tick(clock.now)
    c.flush()
    with store.engine.connect() as conn:
        from sqlalchemy import select

        from slurm_acme.store.schema.telemetry import node_samples

        row = conn.execute(select(node_samples)).one()
    assert row.flags == "dcgm_failed" and row.cpu_percent is not None


def test_flushed_spool_rows_are_pruned_after_the_keep_window(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store)
    run_job(c, clock, "90", ticks=2)
    c.flush()
    assert tstore.prune_flushed(c.spool, clock.now + 1) > 0
    assert tstore.count_rows(c.spool)["node_samples"] == 0
    assert tstore.count_rows(store)["node_samples"] == 2


def test_retention_prunes_raw_samples_but_keeps_summaries(tmp_path, store):
    clock = Clock()
    c = make_collector(settings(tmp_path, store.url), clock, store)
    run_job(c, clock, "91", ticks=2)
    c.flush()
    assert tstore.prune_samples(store, clock.now + 86400) == 2 + 8  # whole days before the cut
    counts = tstore.count_rows(store)
    assert counts["gpu_samples"] == 0 and counts["job_summaries"] == 1


def test_run_loop_survives_a_spool_error_and_flushes_on_stop(tmp_path, sqlite_url, monkeypatch):
    import threading

    from slurm_acme.store import open_store

    central = open_store(sqlite_url)
    s = CollectorSettings.build("acme", "n1", sqlite_url, spool_dir=tmp_path / "spool",
                                interval_s=0.2, flush_interval_s=3600)
    c = Collector(s, samplers=[HostSampler()], open_central=lambda url: central)
    c.start()
    real = tstore.insert_tick
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(tstore, "insert_tick", flaky)
    thread = threading.Thread(target=c.run)
    thread.start()
    deadline = time.monotonic() + 20
    while calls["n"] < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    c.stop()
    thread.join(timeout=30)
    assert not thread.is_alive() and calls["n"] >= 4
    assert tstore.count_rows(central)["node_samples"] == calls["n"] - 1  # flushed at stop
    central.dispose()


def test_a_failing_store_raises_the_projects_own_error_not_sqlalchemys(tmp_path):
    """The store door: a SQL failure reaches the collector as StoreError."""
    from sqlalchemy import text

    from slurm_acme.errors import StoreError
    from slurm_acme.store import open_store

    spool = open_store(f"sqlite:///{tmp_path / 'spool.db'}")
    with spool.engine.begin() as conn:
        conn.execute(text("DROP TABLE node_samples"))
    with pytest.raises(StoreError, match="insert_tick: no such table: node_samples"):
        tstore.insert_tick(spool, {"cluster": "acme", "node": "n1", "ts": T0}, [])
    spool.dispose()
