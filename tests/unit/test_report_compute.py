"""Every number of every report section, against an independent computation.

The store side aggregates in SQL (SQLite and Postgres via the ``store``
fixture); this file recomputes the same figures from the generated rows in
plain Python. Quantiles on both sides are nearest rank: the ``p``-th
percentile of ``n`` sorted values is the ``ceil(p * n / 100)``-th.
"""

from __future__ import annotations

import csv
import math
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import slurm_acme
from slurm_acme.report.compute import build_report
from slurm_acme.report.model import SECTIONS
from slurm_acme.report.period import Period, month_period
from slurm_acme.report.synthetic import synthetic_jobs
from slurm_acme.store.partitions import ensure_days
from slurm_acme.store.report import JobFilter
from slurm_acme.store.rollup_rows import rebuild_from_samples
from slurm_acme.store.rows import upsert
from slurm_acme.store.schema.core import jobs as jobs_table
from slurm_acme.store.schema.failures import failures as failures_table
from slurm_acme.store.schema.telemetry import gpu_samples, node_samples

TYPES = ["Eval", "Pretrain", "SFT", "MLLM", "Debug", "Other"]
PCTS = (10, 25, 50, 75, 90, 99)
JULY = month_period("2023-07")
TDP = 400.0


# -- the independent computation ------------------------------------------------

def nearest(values: list[float], p: int) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return float(ordered[math.ceil(p * len(ordered) / 100) - 1])


def share(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def outcome(state: str) -> str:
    if state == "COMPLETED":
        return "completed"
    if state.startswith("CANCELLED"):
        return "cancelled"
    if state in {"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}:
        return "failed"
    return "other"


def gtime(job: dict[str, Any]) -> float:
    if job["gpu_time_s"] is not None:
        return job["gpu_time_s"]
    return job["duration_s"] * job["gpus"] if job["duration_s"] is not None else 0.0


def expected_overview(sel: list[dict], flt: JobFilter, period: Period) -> dict:
    gpu = [j for j in sel if j["gpus"] > 0]
    runs = [j["duration_s"] for j in gpu if j["duration_s"] is not None]
    queues = [j["queue_s"] for j in gpu if j["queue_s"] is not None]
    return {
        "period": {"label": period.label, "since": period.since_ts, "until": period.until_ts},
        "cluster": flt.cluster, "user": flt.user, "type": flt.workload_type,
        "empty": not sel,
        "jobs": float(len(sel)),
        "cpu_jobs": float(len(sel) - len(gpu)),
        "gpu_jobs": float(len(gpu)),
        "gpu_hours": sum(gtime(j) for j in gpu) / 3600,
        "gpu_run_time_median_s": nearest(runs, 50),
        "gpu_run_time_mean_s": share(sum(runs), len(runs)),
        "gpu_run_time_max_s": max(runs) if runs else None,
        "gpu_queue_median_s": nearest(queues, 50),
        "gpu_queue_mean_s": share(sum(queues), len(queues)),
        "gpu_num_mean": share(sum(j["gpus"] for j in gpu), len(gpu)),
        "gpu_num_median": nearest([j["gpus"] for j in gpu], 50),
        "gpu_num_max": float(max(j["gpus"] for j in gpu)) if gpu else None,
    }


def expected_workload(sel: list[dict]) -> dict:
    gpu = [j for j in sel if j["gpus"] > 0]
    total_time = sum(gtime(j) for j in gpu)
    out = {}
    for t in TYPES:
        mine = [j for j in gpu if j["workload_type"] == t]
        out[t] = {
            "gpu_jobs": float(len(mine)),
            "gpu_job_share": share(len(mine), len(gpu)),
            "gpu_time_share": share(sum(gtime(j) for j in mine), total_time),
            "gpu_demand": {f"p{p}": nearest([j["gpus"] for j in mine], p) for p in (25, 50, 75)},
        }
    return out


def _duration_block(values: list[float], ks: range) -> dict:
    return {
        "n": float(len(values)),
        **{f"p{p}": nearest(values, p) for p in PCTS},
        "cdf": [{"le_s": float(2**k), "share": share(sum(v <= 2**k for v in values), len(values))}
                for k in ks],
    }


def expected_durations(sel: list[dict]) -> dict:
    gpu = [j for j in sel if j["gpus"] > 0]
    out = {}
    for name in ["overall", *TYPES]:
        mine = gpu if name == "overall" else [j for j in gpu if j["workload_type"] == name]
        out[name] = {
            "run_time": _duration_block([j["duration_s"] for j in mine if j["duration_s"] is not None], range(22)),
            "queue": _duration_block([j["queue_s"] for j in mine if j["queue_s"] is not None], range(16)),
        }
    return out


def expected_scale(sel: list[dict]) -> dict:
    gpu = [j for j in sel if j["gpus"] > 0]
    total = sum(gtime(j) for j in gpu)
    return {
        "gpu_time_cdf": [{"gpus": float(2**k), "share": share(sum(gtime(j) for j in gpu if j["gpus"] <= 2**k), total)}
                         for k in range(14)],
        "share_gpu_time_ge_256": share(sum(gtime(j) for j in gpu if j["gpus"] >= 256), total),
    }


def expected_states(sel: list[dict]) -> dict:
    gpu = [j for j in sel if j["gpus"] > 0]
    total = sum(gtime(j) for j in gpu)
    names = ("completed", "cancelled", "failed", "other")
    return {
        "gpu_jobs": float(len(gpu)),
        "gpu_time_s": total,
        "by_count": {n: share(sum(outcome(j["state"]) == n for j in gpu), len(gpu)) for n in names},
        "by_gpu_time": {n: share(sum(gtime(j) for j in gpu if outcome(j["state"]) == n), total) for n in names},
    }


def in_scope(row: dict, flt: JobFilter, keys: set | None, ts_key: str = "ts") -> bool:
    if flt.cluster is not None and row["cluster"] != flt.cluster:
        return False
    if flt.since_ts is not None and row[ts_key] < flt.since_ts:
        return False
    if flt.until_ts is not None and row[ts_key] >= flt.until_ts:
        return False
    return keys is None or (row["cluster"], row["job_id"]) in keys


def in_bin(value: float | None, width: float) -> float | None:
    """The lower edge of the rollup histogram bin holding ``value``."""
    return None if value is None else float(math.floor(value / width) * width)


def expected_telemetry(gs: list[dict], ns: list[dict], flt: JobFilter, keys: set | None) -> tuple:
    """Utilisation and power as the hourly rollups define them: medians are the
    lower edge of the histogram bin (1 %, 5 W) holding the exact nearest-rank
    value, shares at bin edges exact."""
    g = [s for s in gs if in_scope(s, flt, keys)]
    n = [s for s in ns if in_scope(s, flt, None)] if keys is None else []
    if not g and not n:
        return None, None
    util = [s["util_percent"] for s in g if s["util_percent"] is not None]
    fb = [s for s in g if s["mem_used_bytes"] is not None and (s["mem_total_bytes"] or 0) > 0]
    power = [s["power_w"] for s in g if s["power_w"] is not None]
    sm = [s["sm_active"] * 100.0 for s in g if s["sm_active"] is not None]
    cpu = [s["cpu_percent"] for s in n if s["cpu_percent"] is not None]
    mem = [s["mem_percent"] for s in n if s["mem_percent"] is not None]
    idle = [s["power_w"] for s in g if s["util_percent"] == 0 and s["power_w"] is not None]
    pct_bound, w_bound = "less than one 1 % bin", "less than one 5 W bin"
    utilisation = {
        "gpu_samples": float(len(g)),
        "node_samples": float(len(n)),
        "zero_util_share": share(sum(u < 1 for u in util), len(util)),
        "util_median": in_bin(nearest(util, 50), 1),
        "sm_active_median_pct": in_bin(nearest(sm, 50), 1),
        "fb_ge_75_share": share(sum(100.0 * s["mem_used_bytes"] / s["mem_total_bytes"] >= 75 for s in fb), len(fb)),
        "cpu_median": in_bin(nearest(cpu, 50), 1) if keys is None else None,
        "mem_median": in_bin(nearest(mem, 50), 1) if keys is None else None,
        "quantile_bounds": {k: pct_bound for k, v in (("util", util), ("sm", sm), ("cpu", cpu), ("mem", mem)) if v},
    }
    gpu_share = None
    if keys is None:  # per node-hour with both: mean total GPU draw over mean server draw, summed
        hour = lambda s: (s["cluster"], s["node"], math.floor(s["ts"] / 3600))  # noqa: E731
        per_hour_gpu: dict[tuple, list] = defaultdict(list)
        for s in g:
            if s["power_w"] is not None:
                per_hour_gpu[hour(s)].append(s)
        per_hour_srv: dict[tuple, list] = defaultdict(list)
        for s in n:
            if s["node_power_w"] is not None:
                per_hour_srv[hour(s)].append(s["node_power_w"])
        both = set(per_hour_gpu) & set(per_hour_srv)
        gpu_w = sum(sum(s["power_w"] for s in per_hour_gpu[k]) / len({s["ts"] for s in per_hour_gpu[k]}) for k in both)
        srv_w = sum(sum(per_hour_srv[k]) / len(per_hour_srv[k]) for k in both)
        gpu_share = share(gpu_w, srv_w) if both else None
    power_section = {
        "tdp_w": TDP,
        "idle_gpu_power_median_w": in_bin(nearest(idle, 50), 5),
        "over_tdp_share": share(sum(p >= TDP for p in power), len(power)),
        "over_tdp_share_bounds": ([share(sum(p >= TDP + 5 for p in power), len(power)),
                                   share(sum(p >= TDP for p in power), len(power))] if power else None),
        "gpu_share_of_server_power": gpu_share,
        "quantile_bounds": {k: w_bound for k, v in (("idle_power", idle), ("power", power)) if v},
    }
    return utilisation, power_section


def expected_failures(fs: list[dict], flt: JobFilter, keys: set | None) -> dict | None:
    f = [x for x in fs if in_scope(x, flt, keys)]
    if not f:
        return None

    def lost(x: dict) -> float:
        return x["gpus"] * x["time_to_failure_s"] if x["gpus"] is not None and x["time_to_failure_s"] is not None else 0.0

    total = sum(lost(x) for x in f)

    def rows(key) -> dict:  # type: ignore[no-untyped-def]
        groups: dict[tuple, list] = defaultdict(list)
        for x in f:
            groups[key(x)].append(x)
        out = {}
        for k, members in groups.items():
            gpus = [x["gpus"] for x in members if x["gpus"] is not None]
            out[k] = {
                "count": float(len(members)),
                "gpu_time_share": share(sum(lost(x) for x in members), total),
                "mean_gpus": share(sum(gpus), len(gpus)),
                "ttf_median_s": nearest([x["time_to_failure_s"] for x in members if x["time_to_failure_s"] is not None], 50),
                "recovery_median_s": nearest([x["recovery_s"] for x in members if x["recovery_s"] is not None], 50),
            }
        return out

    return {"total": float(len(f)),
            "by_category": rows(lambda x: (x["origin"], x["category"])),
            "by_origin": rows(lambda x: (x["origin"],))}


def expected_report(data: dict, flt: JobFilter, period: Period) -> dict:
    sel = [j for j in data["jobs"] if in_scope(j, flt, None, "submit_ts")
           and (flt.user is None or j["user"] == flt.user)
           and (flt.workload_type is None or j["workload_type"] == flt.workload_type)]
    keys = {(j["cluster"], j["job_id"]) for j in sel} if flt.narrows_jobs else None
    utilisation, power = expected_telemetry(data["gpu_samples"], data["node_samples"], flt, keys)
    return {
        "overview": expected_overview(sel, flt, period),
        "workload": expected_workload(sel),
        "durations": expected_durations(sel),
        "scale": expected_scale(sel),
        "states": expected_states(sel),
        "utilisation": utilisation,
        "power": power,
        "failures": expected_failures(data["failures"], flt, keys),
    }


def assert_matches(actual: Any, expected: Any, path: str = "report") -> None:
    """Same structure, same strings and Nones, floats equal to 1e-9."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), f"{path}: keys {actual!r}"
        for key in expected:
            assert_matches(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected, strict=False)):
            assert_matches(a, e, f"{path}[{i}]")
    elif isinstance(expected, float) and not isinstance(expected, bool):
        assert isinstance(actual, float), f"{path}: {actual!r} is not a float"
        assert actual == pytest.approx(expected, rel=1e-9, abs=1e-9), path
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def failures_by_key(section: dict | None) -> dict | None:
    """The report's failure rows keyed like the expectation (row order is the
    database's collation, not part of the contract)."""
    if section is None:
        return None

    def keyed(rows: list[dict], fields: tuple[str, ...]) -> dict:
        return {tuple(r[f] for f in fields): {k: v for k, v in r.items() if k not in fields} for r in rows}

    return {"total": section["total"],
            "by_category": keyed(section["by_category"], ("origin", "category")),
            "by_origin": keyed(section["by_origin"], ("origin",))}


# -- generated data -------------------------------------------------------------

def make_data(seed: int = 7, n_jobs: int = 1500) -> dict[str, list[dict]]:
    """Jobs in June-August 2023 on two clusters, with GPU and node samples and
    failures, including NULLs and rows outside July and outside the cluster."""
    rng = random.Random(seed)
    start = JULY.since_ts - 20 * 86400
    jobs = list(synthetic_jobs(n_jobs, seed=seed, start_ts=start, span_s=72 * 86400, cluster="seren", users=8))
    jobs += list(synthetic_jobs(200, seed=seed + 1, start_ts=start, span_s=72 * 86400, cluster="kalos", users=8))
    for job in rng.sample(jobs, 40):  # still running: no end, no run time
        job.update(state="RUNNING", end_ts=None, duration_s=None, gpu_time_s=None)
    for job in rng.sample(jobs, 30):  # GPU time missing: the report derives it
        if job["duration_s"] is not None:
            job["gpu_time_s"] = None
    gpu_jobs = [j for j in jobs if j["gpus"] > 0]
    gs, ns = [], []
    for i in range(3000):
        cluster = "seren" if i % 10 else "kalos"
        node = f"n{rng.randrange(6)}"
        ts = float(JULY.since_ts + rng.randrange(-5, 36) * 86400 + rng.randrange(0, 86400, 15))
        job = rng.choice(gpu_jobs) if rng.random() < 0.7 else None
        util = float(rng.choice([0, 0, 0, 5, 30, 55, 80, 99, 100]))
        gs.append({
            "cluster": cluster, "node": node, "ts": ts, "gpu_index": i % 8,
            "job_id": job["job_id"] if job and job["cluster"] == cluster else None,
            "util_percent": None if rng.random() < 0.03 else util,
            "sm_active": None if rng.random() < 0.05 else round(rng.random(), 3),
            "mem_used_bytes": None if rng.random() < 0.05 else float(rng.randrange(0, 80)) * 2**30,
            "mem_total_bytes": 80.0 * 2**30,
            "power_w": None if rng.random() < 0.05 else float(rng.choice([55, 60, 62, 250, 390, 410, 450])),
        })
        if i % 8 == 0:
            ns.append({
                "cluster": cluster, "node": node, "ts": ts,
                "cpu_percent": float(rng.randrange(0, 101)),
                "mem_percent": None if rng.random() < 0.05 else float(rng.randrange(0, 101)),
                "node_power_w": float(rng.randrange(1500, 6500)),
            })
    fs = []
    for _ in range(120):
        job = rng.choice(jobs)
        origin, category = rng.choice([("infrastructure", "nvlink_error"), ("infrastructure", "nccl_timeout"),
                                       ("framework", "cuda_oom"), ("script", "syntax_error"),
                                       ("script", "file_not_found")])
        fs.append({
            "cluster": job["cluster"], "job_id": job["job_id"], "category": category, "origin": origin,
            "ts": float(JULY.since_ts + rng.randrange(-3, 34) * 86400),
            "gpus": None if rng.random() < 0.1 else rng.choice([1, 8, 64, 512]),
            "time_to_failure_s": None if rng.random() < 0.1 else float(rng.randrange(10, 200000)),
            "recovery_s": None if rng.random() < 0.3 else float(rng.randrange(60, 20000)),
        })
    return {"jobs": jobs, "gpu_samples": gs, "node_samples": ns, "failures": fs}


def load(store, data: dict) -> None:  # type: ignore[no-untyped-def]
    """The rows, then the telemetry rollups built from the raw samples (what
    the flush builds as samples arrive); reports read only the rollups."""
    with store.engine.begin() as conn:
        for table in ("gpu_samples", "node_samples"):  # Postgres: the day partitions the rows need
            stamps = [row["ts"] for row in data[table]]
            if stamps:
                ensure_days(conn, table, min(stamps), max(stamps))
        upsert(conn, jobs_table, data["jobs"], ["cluster", "job_id"])
        if data["gpu_samples"]:
            upsert(conn, gpu_samples, data["gpu_samples"], ["cluster", "node", "ts", "gpu_index"], update=())
        if data["node_samples"]:
            upsert(conn, node_samples, data["node_samples"], ["cluster", "node", "ts"], update=())
        if data["failures"]:
            conn.execute(failures_table.insert(), data["failures"])
    rebuild_from_samples(store, window_s=40 * 86400.0)


@pytest.fixture
def loaded(store):  # type: ignore[no-untyped-def]
    return store, load_unique(store, make_data())


def load_unique(store, data: dict) -> dict:  # type: ignore[no-untyped-def]
    """Load ``data``; duplicate (cluster, node, ts, gpu) sample keys collapse in
    the store, so keep the first, as insert-or-ignore does, and return the data
    as stored."""
    for table, key in (("gpu_samples", ("cluster", "node", "ts", "gpu_index")), ("node_samples", ("cluster", "node", "ts"))):
        seen, unique = set(), []
        for row in data[table]:
            if tuple(row[k] for k in key) not in seen:
                seen.add(tuple(row[k] for k in key))
                unique.append(row)
        data[table] = unique
    load(store, data)
    return data


def check(store, data: dict, flt: JobFilter, period: Period) -> dict:  # type: ignore[no-untyped-def]
    report = build_report(store, flt, period, tdp_watts=TDP, compare=True).to_json()
    assert list(report) == list(SECTIONS)
    expected = expected_report(data, flt, period)
    for section in ("overview", "workload", "durations", "scale", "states", "utilisation", "power"):
        actual = report[section]
        if section == "utilisation" and actual is not None:  # beside Acme: test_telemetry_rollups
            actual = {k: v for k, v in actual.items() if k != "beside_acme"}
        assert_matches(actual, expected[section], section)
    assert_matches(failures_by_key(report["failures"]), expected["failures"], "failures")
    return report


# -- tests ------------------------------------------------------------------------

def test_month_of_one_cluster_matches_independent_computation(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    report = check(store, data, JobFilter(JULY.since_ts, JULY.until_ts, "seren"), JULY)
    assert report["overview"]["gpu_jobs"] > 300  # the month is well populated
    assert report["utilisation"] is not None and report["failures"] is not None


def test_all_time_all_clusters_matches_independent_computation(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    check(store, data, JobFilter(), Period(None, None, "all time"))


def test_user_filter_narrows_jobs_samples_and_failures(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    report = check(store, data, JobFilter(JULY.since_ts, JULY.until_ts, "seren", user="u003"), JULY)
    assert report["utilisation"]["cpu_median"] is None  # node figures need the whole cluster
    assert report["overview"]["jobs"] < 0.3 * len(data["jobs"])


def test_type_filter_matches_independent_computation(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    report = check(store, data, JobFilter(JULY.since_ts, JULY.until_ts, None, workload_type="Pretrain"), JULY)
    assert report["workload"]["Pretrain"]["gpu_job_share"] == 1.0


def test_compare_puts_this_cluster_beside_the_reference_rows(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    report = check(store, data, JobFilter(JULY.since_ts, JULY.until_ts, "seren"), JULY)
    mine, *refs = report["compare"]
    o, s = report["overview"], report["states"]
    assert mine["cluster"] == "seren"
    assert (mine["job_num"], mine["gpu_job_num"], mine["med_run_time_gpu"], mine["med_que_time_gpu"]) == (
        o["jobs"], o["gpu_jobs"], o["gpu_run_time_median_s"], o["gpu_queue_median_s"])
    assert (mine["complete_rate_gpu"], mine["cancel_rate_gpu"], mine["fail_rate_gpu"]) == (
        s["by_count"]["completed"], s["by_count"]["cancelled"], s["by_count"]["failed"])
    assert mine["fail_rate_gpu_time"] == s["by_gpu_time"]["failed"]
    shipped = Path(slurm_acme.__file__).parent / "data" / "acme_cluster_summary.csv"
    with shipped.open(newline="") as fh:
        source = list(csv.DictReader(fh))
    assert [r["cluster"] for r in refs] == [r["id"] for r in source] == ["Seren", "Kalos", "Philly", "Helios", "PAI"]
    for ref, raw in zip(refs, source, strict=False):
        for key, value in ref.items():
            if key not in ("cluster", "source"):
                assert value == (float(raw[key]) if raw[key] else None), (raw["id"], key)


def test_empty_period_is_an_empty_report(loaded) -> None:  # type: ignore[no-untyped-def]
    store, data = loaded
    period = month_period("2019-01")
    report = check(store, data, JobFilter(period.since_ts, period.until_ts, "seren"), period)
    assert report["overview"]["empty"] is True and report["overview"]["jobs"] == 0.0
    assert report["utilisation"] is None and report["failures"] is None
