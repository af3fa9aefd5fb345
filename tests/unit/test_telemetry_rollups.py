"""Hourly rollups: built as samples are flushed, exact sums, histograms within
one bin, idempotent re-sends, reports that read only rollups (the same with or
without raw samples) and the site beside Acme. SQLite and Postgres."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from test_telemetry_collector import Clock, PowerSampler, make_collector, settings

from slurm_acme.report.compute import build_report
from slurm_acme.report.period import Period
from slurm_acme.report.render_text import render_text
from slurm_acme.store import open_store
from slurm_acme.store import telemetry as tstore
from slurm_acme.store.report import JobFilter
from slurm_acme.store.rollup_rows import rebuild_from_samples
from slurm_acme.store.rollups import METRICS, SERVER_METRICS, Hist, decode, encode
from slurm_acme.store.schema.telemetry import cluster_hourly, gpu_hourly, node_hourly
from slurm_acme.telemetry.host import HostSampler
from slurm_acme.telemetry.synthetic import SyntheticGpuSampler

ALL_TIME = Period(None, None, "all time")


def nearest(values, p):
    ordered = sorted(values)
    return ordered[math.ceil(p * len(ordered) / 100) - 1]


@pytest.mark.parametrize("metric", ["util", "power", "temp", "node_power"])
def test_histogram_quantiles_are_within_one_bin_below_nearest_rank(metric):
    rng = random.Random(metric)
    spec = METRICS[metric]
    top = spec.bins * spec.width
    values = np.array([rng.uniform(0, top * 0.9) for _ in range(5000)] + [0.0] * 300)
    hist = Hist(spec)
    hist.add(values)
    again = Hist(spec, counts=decode(encode(hist.counts), spec.bins))  # the blob round-trips
    assert (again.counts == hist.counts).all() and hist.n == values.size
    from slurm_acme.store.rollups import Distribution

    dist = Distribution(spec, hist.n, hist.total, hist.counts)
    for p in (1, 10, 50, 90, 99):
        exact = nearest(values.tolist(), p)
        q = dist.quantile(p)
        assert q <= exact < q + spec.width, (p, q, exact)
    assert dist.mean == pytest.approx(values.mean())
    assert dist.share_zero() == pytest.approx(np.mean(values < spec.width))


def rollup_rows(store):
    out = {}
    with store.engine.connect() as conn:
        for table in (gpu_hourly, node_hourly, cluster_hourly):
            rows = [dict(r._mapping) for r in conn.execute(table.select())]
            for r in rows:
                r.pop("synced", None)
            key = [c.name for c in table.primary_key.columns]
            out[table.name] = {tuple(r[k] for k in key): r for r in rows}
    return out


def assert_same_rollups(a, b):
    for table in a:
        assert set(a[table]) == set(b[table]), table
        for key, row in a[table].items():
            other = b[table][key]
            for col, value in row.items():
                if isinstance(value, float):
                    assert other[col] == pytest.approx(value, rel=1e-9, abs=1e-6), (table, key, col)
                elif col.endswith("hist") or col == "hist":
                    specs = {**METRICS, **{m.name: m for m in SERVER_METRICS}}
                    bins = specs[key[2] if table == "cluster_hourly" else col[:-5]].bins
                    assert (decode(value, bins) == decode(other[col], bins)).all(), (table, key, col)
                else:
                    assert other[col] == value, (table, key, col)


def run_two_jobs_across_an_hour(tmp_path, store):
    """Two nodes, two jobs, ticks every 10 s from 20 min before an hour boundary
    to 20 min after it (so both hours hold partial data from several flushes)."""
    clock = Clock()
    clock.now = 1_700_002_800.0 - 1200  # 20 min before an hour
    collectors = [make_collector(settings(tmp_path, store.url, node=n), clock, store,
                                 samplers=[SyntheticGpuSampler(4, n), HostSampler(), PowerSampler()])
                  for n in ("n1", "n2")]
    from test_telemetry_collector import write_mark

    for i, c in enumerate(collectors):
        write_mark(c.settings, f"{i + 1}", "start", clock.now, "0,1")
        c.process_marks()
    for tick in range(240):
        clock.now += 10
        for c in collectors:
            c.tick(clock.now)
            if tick % 37 == 0:
                c.flush()
    for i, c in enumerate(collectors):
        write_mark(c.settings, f"{i + 1}", "end", clock.now)
        c.process_marks()
        c.flush()
    return collectors


def test_flushed_rollups_equal_a_rebuild_from_the_raw_samples(tmp_path, store):
    collectors = run_two_jobs_across_an_hour(tmp_path, store)
    flushed = rollup_rows(store)
    assert len(flushed["node_hourly"]) == 4  # 2 nodes x 2 hours
    assert {k[4] for k in flushed["gpu_hourly"]} == {"", "1", "2"}  # idle GPUs and each job
    with store.engine.begin() as conn:
        for table in (gpu_hourly, node_hourly, cluster_hourly):
            conn.execute(table.delete())
    rebuild_from_samples(store)
    assert_same_rollups(flushed, rollup_rows(store))
    counts = tstore.count_rows(store)
    gpu_samples = sum(r["samples"] for k, r in flushed["cluster_hourly"].items() if k[2] == "util")
    assert gpu_samples == counts["gpu_samples"] == 2 * 4 * 240
    for c in collectors:
        c.close()


def test_resending_rollups_changes_nothing(tmp_path, store):
    collectors = run_two_jobs_across_an_hour(tmp_path, store)
    before = rollup_rows(store)
    for c in collectors:  # a backfill over spools that were already flushed, twice
        for _ in range(2):
            tstore.copy_all(c.spool, store, batch=1000, min_coverage=0.8)
    assert_same_rollups(before, rollup_rows(store))
    for c in collectors:
        c.close()


def test_report_is_the_same_with_or_without_raw_samples(tmp_path, store):
    collectors = run_two_jobs_across_an_hour(tmp_path, store)
    flt = JobFilter(cluster="acme")
    before = build_report(store, flt, ALL_TIME, tdp_watts=400.0, compare=False).to_json()
    assert before["utilisation"]["gpu_samples"] == 1920.0
    assert tstore.prune_samples(store, 4e9) > 0
    assert tstore.count_rows(store)["gpu_samples"] == 0
    after = build_report(store, flt, ALL_TIME, tdp_watts=400.0, compare=False).to_json()
    assert after["utilisation"] == before["utilisation"] and after["power"] == before["power"]
    # busy synthetic GPUs draw 280-400 W, idle ones 60-75 W: medians within a 5 W bin
    assert 55 <= before["power"]["idle_gpu_power_median_w"] <= 75
    # PowerSampler: 500 W servers; 4 synthetic GPUs (2 busy at 280-400 W, 2 idle at 60-75 W)
    assert 0.9 < before["power"]["gpu_share_of_server_power"] < 1.9
    assert before["utilisation"]["zero_util_share"] == pytest.approx(0.5)
    for c in collectors:
        c.close()


def test_report_shows_the_site_beside_acme(tmp_path, sqlite_url):
    store = open_store(sqlite_url)
    collectors = run_two_jobs_across_an_hour(tmp_path, store)
    result = build_report(store, JobFilter(), ALL_TIME, tdp_watts=400.0, compare=False)
    beside = result.utilisation["beside_acme"]
    medians = {m["key"]: m for m in beside["medians"]}
    assert medians["gpu_util_median"]["acme"]["Seren"] == 99.0  # AcmeTrace Seren's median GPU util
    assert medians["gpu_util_median"]["site"] is not None
    shares = {s["key"]: s for s in beside["shares"]}
    assert set(shares) == {"gpus_idle_share", "sm_active_below_50_share", "gpu_memory_ge_75_share",
                           "power_above_tdp_share"}
    assert shares["gpus_idle_share"]["site"] == pytest.approx(0.5)
    assert all(0 <= v <= 1 for s in shares.values() for v in s["acme"].values() if v is not None)
    cdfs = {c["key"]: [curve["source"] for curve in c["curves"]] for c in beside["cdfs"]}
    assert cdfs["gpu_util"] == ["site", "Seren", "Kalos", "Philly"]
    assert "CC BY 4.0" in beside["credit"]
    json.dumps(result.to_json())  # JSON-ready
    text = render_text(result)
    assert "beside Acme" in text and "Seren" in text and "GPU memory used >= 75 %" in text
    from slurm_acme.report.plots import figures

    pngs = figures(result)
    assert pngs["utilisation_cdfs"].startswith(b"\x89PNG")
    for c in collectors:
        c.close()
    store.dispose()
