"""The headline findings in ``--format json``, against an independent computation.

The report's findings come from its own sections; this file recomputes each
one from the generated rows in plain Python (nearest rank: the ``p``-th
percentile of ``n`` sorted values is the ``ceil(p * n / 100)``-th), reads
Acme's figures from the shipped AcmeTrace summary CSV with the csv module and
holds the paper's numbers to the values the paper states. SQLite and Postgres
via the ``store`` fixture; the JSON goes through the real CLI.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from test_report_compute import JULY, TDP, gtime, in_bin, in_scope, load_unique, make_data, nearest

import slurm_acme
from slurm_acme.cli.main import run_cli, sacme
from slurm_acme.report.compute import build_report
from slurm_acme.report.period import month_period
from slurm_acme.store.report import JobFilter

#: The paper's statements about Acme (Hu et al., NSDI '24), as the issue quotes them.
PAPER = {
    "eval_gpu_job_share": None,  # "most of the jobs"
    "eval_gpu_time_share": None,  # "little of the GPU time"
    "eval_queue_median": None,  # "wait longest"
    "pretrain_gpu_job_share": 0.032,
    "pretrain_gpu_time_share": [0.695, 0.94],
    "large_job_gpu_time_share": 0.96,
    "infrastructure_failure_share": 0.11,
    "infrastructure_failed_gpu_time_share": 0.82,
    "idle_gpu_power": 60.0,
}
KEYS = ["median_gpu_job_run_time", *PAPER, "over_tdp_share"]
FIELDS = {"key", "label", "value", "unit", "acme_value", "acme_text", "text", "source", "available", "detail"}


def summary() -> dict[str, dict[str, str]]:
    path = Path(slurm_acme.__file__).parent / "data" / "acme_cluster_summary.csv"
    with path.open(newline="") as fh:
        return {row["id"]: row for row in csv.DictReader(fh)}


def acme_at_or_above_400_w() -> list[float]:
    """Seren's and Kalos's share of GPU power samples >= 400 W (their A100s' TDP),
    read off the shipped AcmeTrace CDF table: one minus the highest percentile
    whose value is below 400 W."""
    path = Path(slurm_acme.__file__).parent / "data" / "acme_util_cdfs.csv"
    with path.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["metric"] == "gpu_power"]
    shares = []
    for cluster in ("Seren", "Kalos"):
        below = [float(r["percentile"]) for r in rows if r["cluster"] == cluster and float(r["value"]) < 400.0]
        shares.append(1.0 - max(below, default=0.0) / 100.0)
    return sorted(shares)


def expected_values(data: dict, flt: JobFilter) -> dict[str, float | None]:
    jobs = [j for j in data["jobs"] if in_scope(j, flt, None, "submit_ts") and j["gpus"] > 0]
    time = sum(gtime(j) for j in jobs)

    def of(wtype: str) -> list[dict]:
        return [j for j in jobs if j["workload_type"] == wtype]

    fails = [f for f in data["failures"] if in_scope(f, flt, None)]
    lost = [(f["origin"], f["gpus"] * f["time_to_failure_s"] if f["gpus"] and f["time_to_failure_s"] else 0.0)
            for f in fails]
    samples = [s for s in data["gpu_samples"] if in_scope(s, flt, None)]
    power = [s["power_w"] for s in samples if s["power_w"] is not None]
    return {
        "median_gpu_job_run_time": nearest([j["duration_s"] for j in jobs if j["duration_s"] is not None], 50),
        "eval_gpu_job_share": len(of("Eval")) / len(jobs),
        "eval_gpu_time_share": sum(gtime(j) for j in of("Eval")) / time,
        "eval_queue_median": nearest([j["queue_s"] for j in of("Eval") if j["queue_s"] is not None], 50),
        "pretrain_gpu_job_share": len(of("Pretrain")) / len(jobs),
        "pretrain_gpu_time_share": sum(gtime(j) for j in of("Pretrain")) / time,
        "large_job_gpu_time_share": sum(gtime(j) for j in jobs if j["gpus"] >= 256) / time,
        "infrastructure_failure_share": sum(o == "infrastructure" for o, _ in lost) / len(lost),
        "infrastructure_failed_gpu_time_share": sum(t for o, t in lost if o == "infrastructure") / sum(t for _, t in lost),
        # telemetry reads hourly rollups: medians at the lower edge of their 5 W bin, >= TDP exact
        "idle_gpu_power": in_bin(nearest([s["power_w"] for s in samples
                                          if s["util_percent"] == 0 and s["power_w"] is not None], 50), 5),
        "over_tdp_share": sum(p >= TDP for p in power) / len(power),
    }


def report_json(store_url: str, capsys, *args: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    code = run_cli(sacme, "sacme", ["--db", store_url, "report", *args, "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


def test_findings_lead_the_json_and_match_an_independent_computation(store, store_url, capsys) -> None:  # type: ignore[no-untyped-def]
    data = load_unique(store, make_data())
    report = report_json(store_url, capsys, "--month", "2023-07", "--cluster", "seren")
    assert next(iter(report)) == "findings"
    findings = {f["key"]: f for f in report["findings"]}
    assert [f["key"] for f in report["findings"]] == KEYS
    expected = expected_values(data, JobFilter(JULY.since_ts, JULY.until_ts, "seren"))
    for key, finding in findings.items():
        assert set(finding) == FIELDS, key
        assert finding["available"] is True, key
        assert finding["value"] == pytest.approx(expected[key], rel=1e-9), key
        assert finding["text"].count(".") >= 1 and "\n" not in finding["text"], key
    for key, acme in PAPER.items():
        assert findings[key]["acme_value"] == acme, key
        assert findings[key]["source"].startswith("Hu et al., NSDI '24"), key
    assert findings["over_tdp_share"]["acme_value"] == pytest.approx(acme_at_or_above_400_w())


def test_each_finding_sentence_carries_its_own_number(store) -> None:  # type: ignore[no-untyped-def]
    load_unique(store, make_data())
    findings = {f["key"]: f for f in build_report(store, JobFilter(JULY.since_ts, JULY.until_ts, "seren"), JULY,
                                                  tdp_watts=TDP, compare=False).findings}
    for key, f in findings.items():
        if f["unit"] == "share":
            assert f"{100 * f['value']:.1f} %" in f["text"], key
        elif f["unit"] == "W":
            assert f"{f['value']:,.0f} W" in f["text"], key
    minutes = findings["median_gpu_job_run_time"]["value"] / 60
    assert f"{minutes:.1f} min" in findings["median_gpu_job_run_time"]["text"]


def test_median_job_length_sits_beside_the_shipped_summary(store) -> None:  # type: ignore[no-untyped-def]
    data = load_unique(store, make_data())
    flt = JobFilter(JULY.since_ts, JULY.until_ts, "seren")
    finding = build_report(store, flt, JULY, tdp_watts=TDP, compare=False).findings[0]
    rows = summary()
    median = expected_values(data, flt)["median_gpu_job_run_time"]
    assert finding["acme_value"] == [float(rows["Seren"]["med_run_time_gpu"]), float(rows["Kalos"]["med_run_time_gpu"])]
    ratios = {c: float(rows[c]["med_run_time_gpu"]) / median for c in ("Philly", "Helios", "PAI")}
    assert finding["detail"]["earlier_median_ratio"] == pytest.approx(ratios)
    assert f"{min(ratios.values()):.1f}-{max(ratios.values()):.1f}x" in finding["text"]
    seren = float(rows["Seren"]["med_run_time_gpu"])
    acme = [float(rows[c]["med_run_time_gpu"]) / seren for c in ("Philly", "Helios", "PAI")]
    assert f"{min(acme):.1f}-{max(acme):.1f}x" in finding["acme_text"]
    assert "1.7-7.2x" in finding["acme_text"]  # the paper's own range, from the same summary


def test_eval_queue_finding_names_the_type_that_waits_longest(store) -> None:  # type: ignore[no-untyped-def]
    data = load_unique(store, make_data())
    flt = JobFilter(JULY.since_ts, JULY.until_ts, "seren")
    finding = next(f for f in build_report(store, flt, JULY, tdp_watts=TDP, compare=False).findings
                   if f["key"] == "eval_queue_median")
    gpu = [j for j in data["jobs"] if in_scope(j, flt, None, "submit_ts") and j["gpus"] > 0]
    medians = {t: nearest([j["queue_s"] for j in gpu if j["workload_type"] == t and j["queue_s"] is not None], 50)
               for t in {j["workload_type"] for j in gpu}}
    assert finding["detail"]["median_queue_by_type_s"] == pytest.approx(medians)
    longest = max(medians, key=lambda t: medians[t])
    if longest == "Eval":
        assert "the longest of any workload type" in finding["text"]
    else:
        assert f"({longest}: " in finding["text"] and "longest of any workload type" in finding["text"]


def test_findings_without_failures_or_telemetry_say_what_is_missing(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = make_data()
    data["failures"], data["gpu_samples"], data["node_samples"] = [], [], []
    load_unique(store, data)
    findings = {f["key"]: f for f in build_report(store, JobFilter(JULY.since_ts, JULY.until_ts, "seren"), JULY,
                                                  tdp_watts=TDP, compare=False).findings}
    assert list(findings) == KEYS  # nothing omitted
    for key in ("infrastructure_failure_share", "infrastructure_failed_gpu_time_share"):
        assert findings[key]["available"] is False and findings[key]["value"] is None
        assert findings[key]["text"].startswith("No failures were recorded in this period")
        assert findings[key]["acme_value"] == PAPER[key]  # Acme's side is still shown
    assert findings["over_tdp_share"]["acme_value"] == pytest.approx(acme_at_or_above_400_w())
    for key in ("idle_gpu_power", "over_tdp_share"):
        assert findings[key]["available"] is False
        assert findings[key]["text"].startswith("No GPU power samples in this period")
    assert findings["eval_gpu_job_share"]["available"] is True


def test_empty_period_keeps_every_finding_and_says_why(store) -> None:  # type: ignore[no-untyped-def]
    load_unique(store, make_data())
    period = month_period("2019-01")
    findings = build_report(store, JobFilter(period.since_ts, period.until_ts, "seren"), period,
                            tdp_watts=TDP, compare=False).findings
    assert [f["key"] for f in findings] == KEYS
    assert all(f["available"] is False and f["value"] is None and f["text"].startswith("No ") for f in findings)
