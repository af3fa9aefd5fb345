"""An AcmeTrace CSV through ``sacme import-trace`` and ``sacme report``, checked
against pandas reading the same CSV (nearest rank = numpy ``inverted_cdf``).

Seren-style timestamps carry ``+08:00``; the report's month is UTC by submit
time, so jobs submitted late on the last local day fall in the next month.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from slurm_acme.report.synthetic import synthetic_jobs, write_trace_csv

PCTS = (10, 25, 50, 75, 90, 99)


def sacme(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "slurm_acme", *args], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def q(values: pd.Series, p: int) -> float | None:
    return float(np.quantile(values.to_numpy(float), p / 100, method="inverted_cdf")) if len(values) else None


def test_imported_trace_month_matches_pandas(tmp_path: Path, sqlite_url: str) -> None:
    trace = tmp_path / "trace_seren.csv"
    start = datetime(2023, 6, 20, tzinfo=timezone.utc).timestamp()
    write_trace_csv(trace, synthetic_jobs(4000, seed=9, start_ts=start, span_s=45 * 86400, cluster="seren"))
    sacme("--db", sqlite_url, "import-trace", str(trace), "--cluster", "seren")
    report = json.loads(sacme("--db", sqlite_url, "report", "--month", "2023-07", "--cluster", "seren",
                              "--format", "json"))

    df = pd.read_csv(trace)
    submit = pd.to_datetime(df["submit_time"], utc=True, format="ISO8601")
    df = df[(submit >= pd.Timestamp("2023-07-01", tz="UTC")) & (submit < pd.Timestamp("2023-08-01", tz="UTC"))]
    gpu = df[df["gpu_num"] > 0]
    o = report["overview"]
    assert (o["jobs"], o["cpu_jobs"], o["gpu_jobs"]) == (len(df), float((df["gpu_num"] == 0).sum()), len(gpu))
    assert o["gpu_hours"] == pytest.approx(gpu["gpu_time"].sum() / 3600)
    assert o["gpu_run_time_median_s"] == q(gpu["duration"], 50)
    assert o["gpu_queue_mean_s"] == pytest.approx(gpu["queue"].mean())
    for wtype, rows in gpu.groupby("type"):
        w = report["workload"][wtype]
        assert w["gpu_job_share"] == pytest.approx(len(rows) / len(gpu))
        assert w["gpu_time_share"] == pytest.approx(rows["gpu_time"].sum() / gpu["gpu_time"].sum())
        assert [w["gpu_demand"][f"p{p}"] for p in (25, 50, 75)] == [q(rows["gpu_num"], p) for p in (25, 50, 75)]
        d = report["durations"][wtype]
        assert [d["run_time"][f"p{p}"] for p in PCTS] == [q(rows["duration"], p) for p in PCTS]
        assert [c["share"] for c in d["queue"]["cdf"]] == pytest.approx(
            [float((rows["queue"] <= 2**k).mean()) for k in range(16)])
    failed = gpu["state"].isin(["FAILED", "TIMEOUT", "NODE_FAIL"])
    assert report["states"]["by_count"]["failed"] == pytest.approx(failed.mean())
    assert report["states"]["by_gpu_time"]["cancelled"] == pytest.approx(
        gpu.loc[gpu["state"] == "CANCELLED", "gpu_time"].sum() / gpu["gpu_time"].sum())
