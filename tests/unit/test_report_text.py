"""``sacme report`` in a 100-column terminal: nothing cut, findings first.

The real CLI runs with ``COLUMNS=100`` on a store where every section has
data (three months, so the trends too, and ``--compare``). Every header of
every table it prints must appear whole on one line, no line may pass 100
columns, and nothing may be ellipsised.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from test_report_compute import TDP, load_unique, make_data

from slurm_acme.report.compute import build_report
from slurm_acme.report.labels import SECTION_TITLES
from slurm_acme.report.model import SECTIONS
from slurm_acme.report.period import Period
from slurm_acme.report.views import section_tables
from slurm_acme.store import open_store
from slurm_acme.store.report import JobFilter


@pytest.fixture(scope="module")
def store_url(tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path_factory.mktemp('text') / 'acme.db'}"
    store = open_store(url)
    load_unique(store, make_data())
    store.dispose()
    return url


def terminal_report(store_url: str, columns: int, *args: str) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    done = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", store_url, "report", *args],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_report_at_100_columns_cuts_no_header_and_no_line(store_url: str) -> None:
    out = terminal_report(store_url, 100, "--cluster", "seren", "--compare")
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "…" not in out and "..." not in out.replace("(running, preempted, ...)", "")
    store = open_store(store_url)
    report = build_report(store, JobFilter(cluster="seren"), Period(None, None, "all time"), tdp_watts=TDP,
                          compare=True)
    store.dispose()
    assert report.trends is not None and report.failures is not None and report.power is not None
    headers = 0
    for section in SECTIONS[1:]:
        assert SECTION_TITLES[section] in lines, section
        for view in section_tables(report, section):
            if view.long:
                continue
            pattern = r"\s+".join(re.escape(c) for c in view.columns)  # the header row, whole, in order
            assert any(re.search(pattern, line) for line in lines), (section, view.columns)
            headers += len(view.columns)
    assert headers > 60


def test_findings_come_first_and_read_whole_at_100_columns(store_url: str) -> None:
    out = terminal_report(store_url, 100, "--cluster", "seren", "--month", "2023-07")
    flat = " ".join(out.split())
    first_section = min(flat.index(f" {SECTION_TITLES[s]} ") for s in ("overview", "workload", "durations"))
    store = open_store(store_url)
    from slurm_acme.report.period import month_period

    july = month_period("2023-07")
    report = build_report(store, JobFilter(july.since_ts, july.until_ts, "seren"), july, tdp_watts=TDP,
                          compare=False)
    store.dispose()
    for finding in report.findings:
        at = flat.index(" ".join(finding["text"].split()))  # wrapped, never cut
        assert at < first_section
        assert " ".join(finding["acme_text"].split()) in flat


def test_narrow_terminal_wraps_rather_than_cuts(store_url: str) -> None:
    out = terminal_report(store_url, 72, "--cluster", "seren", "--month", "2023-07")
    assert max(len(line) for line in out.splitlines()) <= 72
    assert "…" not in out
