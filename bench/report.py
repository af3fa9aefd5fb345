"""Benchmark: ``sacme report`` on a 1,000,000-job store vs a pandas script.

Generates an AcmeTrace-format CSV (GPU and CPU jobs over 6 months), imports
it with ``sacme import-trace`` into a fresh SQLite store, then times, as
separate processes (start-up included on both sides):

- ``sacme report --month M --cluster seren --format json`` for the busiest month;
- the script a user would otherwise write: pandas reads the CSV and computes
  the same workload, durations (nearest-rank percentiles and 2**k CDFs) and
  states numbers for that month.

``import-trace`` also builds the store's monthly rollups, which the report
reads (see :mod:`slurm_acme.store.schema.report`); ``--reuse`` of a store
imported before they existed builds them first (``rollup_refresh_s``), so it
is measured the same way.

It checks the two agree and prints one JSON object: ``jobs``, ``month``,
``import_s``, ``report_s``, ``pandas_s``, ``ratio`` (report_s / pandas_s;
target <= 0.2), the same as CPU seconds (``*_cpu_s``, ``cpu_ratio``: steadier
on a shared machine), ``sacme_startup_s`` (``sacme --help``: the floor any
``sacme`` command pays) and ``agree``.

    python bench/report.py [--jobs N] [--keep DIR [--reuse]]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bytecode import compile_like_pip

from slurm_acme.report.synthetic import synthetic_jobs, write_trace_csv

START = datetime(2023, 3, 1, tzinfo=timezone.utc).timestamp()
SPAN_S = 183 * 86400.0

#: What a pandas user writes for the same numbers (nearest rank = inverted_cdf).
PANDAS_SCRIPT = r"""
import json, sys
import numpy as np
import pandas as pd

path, month = sys.argv[1], sys.argv[2]
df = pd.read_csv(path, usecols=["gpu_num", "type", "state", "submit_time", "duration", "queue", "gpu_time"])
submit = pd.to_datetime(df["submit_time"], utc=True, format="ISO8601")
since = pd.Timestamp(month + "-01", tz="UTC")
df = df[(submit >= since) & (submit < since + pd.offsets.MonthBegin(1))]
gpu = df[df["gpu_num"] > 0]
pcts = [10, 25, 50, 75, 90, 99]

def block(values, ks):
    v = np.sort(values.to_numpy(dtype=float))
    q = np.quantile(v, [p / 100 for p in pcts], method="inverted_cdf") if len(v) else [None] * 6
    cdf = np.searchsorted(v, [2.0 ** k for k in ks], side="right") / len(v) if len(v) else [None] * len(ks)
    return {"n": float(len(v)), **{f"p{p}": float(x) for p, x in zip(pcts, q)},
            "cdf": [float(c) for c in cdf]}

durations = {"overall": {"run_time": block(gpu["duration"], range(22)), "queue": block(gpu["queue"], range(16))}}
for t, g in gpu.groupby("type"):
    durations[t] = {"run_time": block(g["duration"], range(22)), "queue": block(g["queue"], range(16))}
by_type = gpu.groupby("type").agg(jobs=("gpu_num", "size"), gtime=("gpu_time", "sum"))
workload = {t: {"gpu_job_share": float(r.jobs / len(gpu)), "gpu_time_share": float(r.gtime / gpu["gpu_time"].sum()),
                **{f"p{p}": float(np.quantile(gpu.loc[gpu["type"] == t, "gpu_num"], p / 100, method="inverted_cdf"))
                   for p in (25, 50, 75)}}
            for t, r in by_type.iterrows()}
outcome = np.select([gpu["state"] == "COMPLETED", gpu["state"].str.startswith("CANCELLED"),
                     gpu["state"].isin(["FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"])],
                    ["completed", "cancelled", "failed"], "other")
counts = pd.Series(outcome).value_counts(normalize=True)
times = gpu["gpu_time"].groupby(outcome).sum() / gpu["gpu_time"].sum()
states = {"by_count": {k: float(counts.get(k, 0.0)) for k in ("completed", "cancelled", "failed", "other")},
          "by_gpu_time": {k: float(times.get(k, 0.0)) for k in ("completed", "cancelled", "failed", "other")}}
print(json.dumps({"workload": workload, "durations": durations, "states": states}))
"""


def generate(path: Path, n: int) -> str:
    """Write the CSV; return the busiest month (by UTC submit time)."""
    months: Counter[str] = Counter()

    def counted(jobs: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for job in jobs:
            months[datetime.fromtimestamp(job["submit_ts"], timezone.utc).strftime("%Y-%m")] += 1
            yield job

    write_trace_csv(path, counted(synthetic_jobs(n, seed=2024, start_ts=START, span_s=SPAN_S, cluster="seren",
                                                 users=300)))
    return months.most_common(1)[0][0]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + sys) and stdout of one process."""
    cpu, started = _children_cpu(), time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return elapsed, _children_cpu() - cpu, done.stdout


def best_of(runs: int, argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Best wall and best CPU time of ``runs`` runs (a shared machine only
    ever adds time), and the last output."""
    results = [timed(argv, env) for _ in range(runs)]
    return min(r[0] for r in results), min(r[1] for r in results), results[-1][2]


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def agree(report: dict, frame: dict) -> bool:
    """The report and pandas give the same workload, durations and states."""
    ok = all(_close(report["states"][k][s], frame["states"][k][s])
             for k in ("by_count", "by_gpu_time") for s in frame["states"][k])
    for t, w in frame["workload"].items():
        r = report["workload"][t]
        ok &= _close(r["gpu_job_share"], w["gpu_job_share"]) and _close(r["gpu_time_share"], w["gpu_time_share"])
        ok &= all(_close(r["gpu_demand"][f"p{p}"], w[f"p{p}"]) for p in (25, 50, 75))
    for group, blocks in frame["durations"].items():
        for metric, b in blocks.items():
            r = report["durations"][group][metric]
            ok &= all(_close(r[f"p{p}"], b[f"p{p}"]) for p in (10, 25, 50, 75, 90, 99))
            ok &= all(_close(c["share"], s) for c, s in zip(r["cdf"], b["cdf"], strict=False))
    return bool(ok)


def refresh_rollups(db_url: str) -> float | None:
    """Build the store's monthly report rollups (what import-trace does at its
    end) unless it has them; wall seconds, or ``None`` when it had them."""
    from sqlalchemy import func, select

    from slurm_acme.store import open_store
    from slurm_acme.store.report import refresh_job_rollups
    from slurm_acme.store.schema.report import report_rollup_parts

    started = time.perf_counter()
    store = open_store(db_url)
    try:
        with store.engine.connect() as conn:
            if conn.dialect.has_table(conn, report_rollup_parts.name) and conn.execute(
                    select(func.count()).select_from(report_rollup_parts)).scalar_one():
                return None
        refresh_job_rollups(store)
    finally:
        store.dispose()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3, help="timed runs per side (best is kept)")
    parser.add_argument("--keep", help="work in this folder and keep it")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep: reuse its trace and store from an earlier run")
    args = parser.parse_args()
    bytecode = compile_like_pip()
    work = Path(args.keep or tempfile.mkdtemp(prefix="acme-bench-report-"))
    work.mkdir(parents=True, exist_ok=True)
    bindir = Path(sys.executable).parent
    sacme = str(bindir / "sacme") if (bindir / "sacme").exists() else shutil.which("sacme") or "sacme"
    env = {**os.environ, "ACME_DB": f"sqlite:///{work / 'acme.db'}"}
    try:
        trace = work / "trace_seren.csv"
        started = time.perf_counter()
        generate_s = import_s = None
        refresh_s = None
        if args.reuse and (work / "month").exists():
            month = (work / "month").read_text().strip()
            # a store imported before the rollups existed gets them as an import now would
            refreshed = refresh_rollups(env["ACME_DB"])
            refresh_s = round(refreshed, 2) if refreshed is not None else None
        else:
            month = generate(trace, args.jobs)
            generate_s = round(time.perf_counter() - started, 2)
            (work / "acme.db").unlink(missing_ok=True)
            import_s = round(timed([sacme, "import-trace", str(trace), "--cluster", "seren"], env)[0], 2)
            (work / "month").write_text(month)
        report_argv = [sacme, "report", "--month", month, "--cluster", "seren", "--format", "json"]
        startup_s, startup_cpu_s, _ = best_of(args.runs, [sacme, "--help"], env)
        report_s, report_cpu_s, report_out = best_of(args.runs, report_argv, env)
        pandas_s, pandas_cpu_s, pandas_out = best_of(
            args.runs, [sys.executable, "-c", PANDAS_SCRIPT, str(trace), month], env)
        report = json.loads(report_out)
        print(json.dumps({
            "jobs": args.jobs,
            "month": month,
            "month_jobs": report["overview"]["jobs"],
            "generate_s": generate_s,
            "import_s": import_s,
            "rollup_refresh_s": refresh_s,
            "report_s": round(report_s, 3),
            "pandas_s": round(pandas_s, 3),
            "ratio": round(report_s / pandas_s, 3),
            "target_ratio": 0.2,
            "bytecode": bytecode,
            "report_cpu_s": round(report_cpu_s, 3),
            "pandas_cpu_s": round(pandas_cpu_s, 3),
            "cpu_ratio": round(report_cpu_s / pandas_cpu_s, 3),
            "sacme_startup_s": round(startup_s, 3),
            "sacme_startup_cpu_s": round(startup_cpu_s, 3),
            "load_avg_1m": round(os.getloadavg()[0], 1),
            "agree": agree(report, json.loads(pandas_out)),
        }))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
