"""The HTML report as an admin opens it: a real headless Chromium at 1280 px.

Two pages: the demo's (``examples/trace_report.sh``, exactly what ``make demo``
writes: a six-month AcmeTrace-format trace, imported and reported) and one
from a store (SQLite and Postgres) holding jobs, GPU and node samples and
failures, so every section has data and every figure is drawn. In the page:
the findings come first, every section is there with its figure, the table
of contents links to each, every image decodes, and nothing is wider than the
window (``document.documentElement.scrollWidth <= window.innerWidth``).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from chrome_page import CHROMIUM_FLAGS, ChromePage, chromium

from slurm_acme.report.labels import SECTION_TITLES
from slurm_acme.report.model import SECTIONS
from slurm_acme.report.period import month_period
from slurm_acme.report.plots import FIGURE_SECTIONS
from slurm_acme.report.synthetic import synthetic_jobs
from slurm_acme.store import open_store
from slurm_acme.store.partitions import ensure_days
from slurm_acme.store.rollup_rows import rebuild_from_samples
from slurm_acme.store.rows import upsert
from slurm_acme.store.schema.core import jobs
from slurm_acme.store.schema.failures import failures
from slurm_acme.store.schema.telemetry import gpu_samples, node_samples

REPO = Path(__file__).resolve().parents[2]
JULY = month_period("2023-07")
AUGUST = month_period("2023-08")
#: What the page is asked, in one evaluation.
PROBE = """(() => {
  const sections = [...document.querySelectorAll('body > section')];
  const right = el => el.getBoundingClientRect().right;
  return {
    innerWidth: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    sections: sections.map(s => ({id: s.id, title: s.querySelector('h2').textContent,
                                  plots: [...s.querySelectorAll('img.plot')].map(i => i.id),
                                  tables: s.querySelectorAll('table').length,
                                  note: !!s.querySelector('p.note')})),
    toc: [...document.querySelectorAll('nav#toc a')].map(a => a.getAttribute('href')),
    tocBeforeSections: !!(document.querySelector('nav#toc').compareDocumentPosition(sections[0]) & 4),
    findings: [...document.querySelectorAll('#findings tr[data-key]')].map(r => ({
        key: r.dataset.key, cells: [...r.cells].map(c => c.textContent)})),
    decoded: [...document.querySelectorAll('img.plot')].filter(i => i.complete && i.naturalWidth > 0).length,
    images: document.querySelectorAll('img.plot').length,
    overflowing: [...document.querySelectorAll('table, img, figure, section, nav, p')]
        .filter(el => right(el) > window.innerWidth + 0.5).map(el => el.tagName + '#' + el.id),
    figuresBeforeLongTables: [...document.querySelectorAll('section')].every(s => {
        const img = s.querySelector('img.plot'), long = s.querySelector('.tables.long');
        return !img || !long || !!(img.compareDocumentPosition(long) & 4); }),
  };
})()"""


def sacme(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "slurm_acme", *args], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done


def probe(page: Path, profile: Path) -> dict[str, Any]:
    with ChromePage(profile, width=1280, height=900) as browser:
        browser.open(page.as_uri())
        return browser.evaluate(PROBE)


def check_page(seen: dict[str, Any], report: dict[str, Any], figures: set[str]) -> None:
    """What every report page must show, whatever data it has."""
    assert seen["innerWidth"] == 1280
    assert seen["scrollWidth"] <= seen["innerWidth"], seen["scrollWidth"]
    assert seen["overflowing"] == []
    assert [s["id"] for s in seen["sections"]] == list(SECTIONS)  # findings first, then the rest in order
    assert seen["toc"] == [f"#{s}" for s in SECTIONS] and seen["tocBeforeSections"]
    for s in seen["sections"]:
        assert s["title"] == SECTION_TITLES[s["id"]]
        wanted = sorted(f"plot-{n}" for n in figures if FIGURE_SECTIONS[n] == s["id"])
        assert sorted(s["plots"]) == wanted, s["id"]
        if report[s["id"]] is None:
            assert s["note"], f"{s['id']}: no data, and the page does not say so"
        else:
            assert s["tables"] >= 1, s["id"]
    assert seen["images"] == len(figures) and seen["decoded"] == len(figures)
    assert seen["figuresBeforeLongTables"]
    assert [f["key"] for f in seen["findings"]] == [f["key"] for f in report["findings"]]
    for shown, finding in zip(seen["findings"], report["findings"], strict=True):
        this_site, acme, source = shown["cells"]
        assert this_site == finding["text"] and acme in finding["acme_text"] and source == finding["source"]


def test_demo_report_reads_findings_first_and_fits_1280_px(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = subprocess.run(["bash", str(REPO / "examples" / "trace_report.sh"), str(out)], capture_output=True,
                          text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].startswith("Findings")  # the text report the demo ends with
    page = out / "report.html"
    assert "src='http" not in page.read_text() and 'src="http' not in page.read_text()  # self-contained
    db = f"sqlite:///{out / 'trace.db'}"
    report = json.loads(sacme("--db", db, "report", "--since", "2023-03-01", "--until", "2023-09-01",
                              "--cluster", "synthetic", "--compare", "--format", "json").stdout)
    assert len(report["trends"]["months"]) == 6
    figures = {p.stem for p in (out / "plots").iterdir()}
    assert figures == {n for n, s in FIGURE_SECTIONS.items() if report[s] is not None}
    seen = probe(page, tmp_path / "profile")
    check_page(seen, report, figures)
    missing = [f for f in seen["findings"] if not next(r for r in report["findings"] if r["key"] == f["key"])["available"]]
    assert {f["key"] for f in missing} >= {"infrastructure_failure_share", "idle_gpu_power"}  # no failures, no samples

    shot = tmp_path / "shot.png"
    subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'shot-profile'}",
                    f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000


def fill(store_url: str) -> None:
    rng = random.Random(11)
    store = open_store(store_url)
    rows = list(synthetic_jobs(900, seed=5, start_ts=JULY.since_ts, span_s=50 * 86400, cluster="seren"))
    gs = [{"cluster": "seren", "node": f"n{i % 4}", "ts": JULY.since_ts + 15.0 * (i // 32) + 86400.0 * (i % 45),
           "gpu_index": i % 8, "job_id": rows[i % 50]["job_id"], "util_percent": float(rng.choice([0, 40, 90, 100])),
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
        for table, samples in (("gpu_samples", gs), ("node_samples", ns)):  # Postgres: their day partitions
            ensure_days(conn, table, min(r["ts"] for r in samples), max(r["ts"] for r in samples))
        upsert(conn, jobs, rows, ["cluster", "job_id"])
        upsert(conn, gpu_samples, gs, ["cluster", "node", "ts", "gpu_index"], update=())
        upsert(conn, node_samples, ns, ["cluster", "node", "ts"], update=())
        conn.execute(failures.insert(), fs)
    rebuild_from_samples(store, window_s=60 * 86400.0)  # the hourly rollups the collector's flush builds
    store.dispose()


def test_full_report_has_every_section_and_figure_in_chromium(store_url: str, tmp_path: Path) -> None:
    fill(store_url)
    page, plots = tmp_path / "report.html", tmp_path / "plots"
    flags = ["--since", "2023-07-01", "--until", "2023-09-01", "--cluster", "seren", "--compare"]
    sacme("--db", store_url, "report", *flags, "--format", "html", "--out", str(page), "--plots", str(plots))
    report = json.loads(sacme("--db", store_url, "report", *flags, "--format", "json").stdout)
    assert all(report[s] is not None for s in SECTIONS)
    figures = {p.stem for p in plots.iterdir()}
    assert figures == set(FIGURE_SECTIONS)
    seen = probe(page, tmp_path / "profile")
    check_page(seen, report, figures)
    assert all(f["available"] for f in report["findings"])


def test_empty_html_report_says_so(tmp_path: Path, sqlite_url: str) -> None:
    fill(sqlite_url)
    page = tmp_path / "empty.html"
    sacme("--db", sqlite_url, "report", "--month", "2021-01", "--format", "html", "--out", str(page))
    with ChromePage(tmp_path / "p") as browser:
        browser.open(page.as_uri())
        text = browser.evaluate("document.body.innerText")
        loaded = browser.evaluate("document.body.dataset.plotsLoaded")
        images = browser.evaluate("document.querySelectorAll('img').length")
    assert "Empty report: no jobs were submitted in 2021-01." in text
    assert loaded == "0" and images == 0
