"""The HTML report opens in a real headless Chromium with every section and plot.

The report comes from the real ``sacme`` CLI on a store (SQLite and Postgres)
holding generated jobs, GPU and node samples and failures, so every section
has data and every figure is drawn.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

from slurm_acme.report.model import SECTIONS
from slurm_acme.report.period import month_period
from slurm_acme.report.plots import FIGURE_SECTIONS
from slurm_acme.report.synthetic import synthetic_jobs
from slurm_acme.store import open_store
from slurm_acme.store.rows import upsert
from slurm_acme.store.schema.core import jobs
from slurm_acme.store.schema.failures import failures
from slurm_acme.store.schema.telemetry import gpu_samples, node_samples

JULY = month_period("2023-07")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is missing: run sbin/install-deps (apt-get install -y chromium)"
    return found


def fill(store_url: str) -> None:
    rng = random.Random(11)
    store = open_store(store_url)
    rows = list(synthetic_jobs(600, seed=5, start_ts=JULY.since_ts, span_s=25 * 86400, cluster="seren"))
    gs = [{"cluster": "seren", "node": f"n{i % 4}", "ts": JULY.since_ts + 15.0 * (i // 32), "gpu_index": i % 8,
           "job_id": rows[i % 50]["job_id"], "util_percent": float(rng.choice([0, 40, 90, 100])),
           "sm_active": rng.random(), "mem_used_bytes": float(rng.randrange(80)) * 2**30,
           "mem_total_bytes": 80.0 * 2**30, "power_w": float(rng.choice([60, 300, 420]))} for i in range(640)]
    ns = [{"cluster": "seren", "node": f"n{i % 4}", "ts": JULY.since_ts + 15.0 * (i // 4),
           "cpu_percent": float(rng.randrange(100)), "mem_percent": float(rng.randrange(100)),
           "node_power_w": float(rng.randrange(2000, 6000))} for i in range(80)]
    fs = [{"cluster": "seren", "job_id": rows[i]["job_id"], "ts": JULY.since_ts + 3600.0 * i,
           "category": c, "origin": o, "gpus": 8, "time_to_failure_s": 1000.0 * (i + 1), "recovery_s": 600.0}
          for i, (o, c) in enumerate([("infrastructure", "nvlink_error"), ("framework", "cuda_oom"),
                                      ("script", "syntax_error")] * 3)]
    with store.engine.begin() as conn:
        upsert(conn, jobs, rows, ["cluster", "job_id"])
        upsert(conn, gpu_samples, gs, ["cluster", "node", "ts", "gpu_index"], update=())
        upsert(conn, node_samples, ns, ["cluster", "node", "ts"], update=())
        conn.execute(failures.insert(), fs)
    store.dispose()


def test_html_report_renders_every_section_and_plot_in_chromium(store_url: str, tmp_path: Path) -> None:
    fill(store_url)
    page, plots = tmp_path / "report.html", tmp_path / "plots"
    done = subprocess.run(
        [sys.executable, "-m", "slurm_acme", "--db", store_url, "report", "--month", "2023-07",
         "--cluster", "seren", "--compare", "--format", "html", "--out", str(page), "--plots", str(plots)],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert "src='http" not in html and 'src="http' not in html  # self-contained
    assert sorted(p.stem for p in plots.iterdir()) == sorted(FIGURE_SECTIONS)

    profile = tmp_path / "chrome-profile"
    shot = tmp_path / "shot.png"
    subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}",
                    "--window-size=1200,5000", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000
    dom = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                          "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    for section in SECTIONS:
        assert re.search(rf'<section id="{section}">\s*<h2>{section}</h2>\s*<table>', dom), section
    for name, section in FIGURE_SECTIONS.items():
        assert re.search(rf'<section id="{section}">(?:(?!</section>).)*<img class="plot" id="plot-{name}"',
                         dom, re.DOTALL), name
    loaded = re.search(r'data-plots-loaded="(\d+)"', dom)
    assert loaded and int(loaded.group(1)) == len(FIGURE_SECTIONS)  # every PNG decoded in the browser


def test_empty_html_report_says_so(tmp_path: Path, sqlite_url: str) -> None:
    fill(sqlite_url)
    page = tmp_path / "empty.html"
    done = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", sqlite_url, "report", "--month", "2021-01",
                           "--format", "html", "--out", str(page)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    dom = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'p'}", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout
    assert "Empty report: no jobs were submitted in 2021-01." in dom
    assert 'data-plots-loaded="0"' in dom and "<img" not in dom

