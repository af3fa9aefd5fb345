"""Prometheus interop against a real Prometheus server (Debian's ``prometheus``).

The node collector serves ``/metrics`` (dcgm-exporter's metric names, Hostname /
gpu / hpc_job labels); a Prometheus started here on 127.0.0.1 scrapes it every
second. Then ``sacme collectd import`` reads it back with PromQL: hourly rollups
from range queries and, for the job that ended, its summary the jobstats way.
No Slurm needed: the prolog's marks are written as the hook writes them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from slurm_acme.contracts import MARK_VERSION
from slurm_acme.store import open_store
from slurm_acme.store import telemetry as tstore
from slurm_acme.store.schema.telemetry import cluster_hourly
from slurm_acme.telemetry.collector import Collector
from slurm_acme.telemetry.prometheus import PrometheusClient, import_window
from slurm_acme.telemetry.settings import CollectorSettings

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mark(settings: CollectorSettings, job: str, kind: str, gpus: str = "0,1") -> None:
    body = {"v": MARK_VERSION, "kind": kind, "job_id": job, "node": settings.node, "user": "alice",
            "gpus": gpus, "restart": 0}
    if kind == "end":
        body["exit_code"] = "0:0"
    settings.marks_dir.mkdir(parents=True, exist_ok=True)
    (settings.marks_dir / f"{job}.0.{kind}").write_text(json.dumps(body))


@pytest.fixture
def collector(tmp_path):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'collector.db'}"
    settings = CollectorSettings.build("acme", "pnode1", url, spool_dir=tmp_path / "spool", interval_s=1.0,
                                       flush_interval_s=3600, synthetic_gpus=4, samplers=["host"],
                                       metrics_port=free_port(), metrics_address="127.0.0.1")
    store = open_store(url)
    c = Collector(settings, open_central=lambda _: store, gpu_resolver=lambda job, node: None)
    c.start()
    thread = threading.Thread(target=c.run, daemon=True)
    thread.start()
    yield c, store
    c.stop()
    thread.join(timeout=30)
    c.close()
    store.dispose()


@pytest.fixture
def prometheus(tmp_path, collector, wait_until):  # type: ignore[no-untyped-def]
    c, _ = collector
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                      "  - job_name: acme-collector\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{c.metrics.port}']\n")
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    try:
        wait_until(ready, "Prometheus to be ready", timeout=120)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def instant(url: str, promql: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}",
                                timeout=10) as resp:
        return json.loads(resp.read())["data"]["result"]


def test_prometheus_scrapes_the_collector_and_the_import_reads_it_back(collector, prometheus, wait_until,
                                                                       tmp_path):
    c, collector_store = collector
    began = time.time()
    mark(c.settings, "4242", "start")
    busy = wait_until(lambda: (
        r if len(r := instant(prometheus, 'DCGM_FI_DEV_GPU_UTIL{hpc_job="4242"}')) == 2 else None),
        "the job's GPUs in Prometheus", timeout=90)
    # export: dcgm-exporter's names and labels, synthetic data labelled as such
    assert {r["metric"]["gpu"] for r in busy} == {"0", "1"}
    for r in busy:
        labels = r["metric"]
        assert labels["Hostname"] == "pnode1" and labels["device"] == f"nvidia{labels['gpu']}"
        assert labels["UUID"] == f"SYNTHETIC-pnode1-{labels['gpu']}" and labels["source"] == "synthetic"
        assert 80 <= float(r["value"][1]) <= 100
    idle = instant(prometheus, 'DCGM_FI_DEV_GPU_UTIL{hpc_job=""}')
    assert {r["metric"]["gpu"] for r in idle} == {"2", "3"} and all(float(r["value"][1]) == 0 for r in idle)
    fb = instant(prometheus, 'DCGM_FI_DEV_FB_USED{hpc_job="4242"} + DCGM_FI_DEV_FB_FREE{hpc_job="4242"}')
    assert all(float(r["value"][1]) == pytest.approx(80 * 1024) for r in fb)  # MiB, like dcgm-exporter
    assert instant(prometheus, "acme_node_cpu_utilisation_percent")
    wait_until(lambda: (
        (r := instant(prometheus, 'count_over_time(DCGM_FI_DEV_GPU_UTIL{hpc_job="4242"}[1m])'))
        and min(float(x["value"][1]) for x in r) >= 15), "15 scrapes of the job", timeout=90)
    mark(c.settings, "4242", "end")
    wait_until(lambda: not instant(prometheus, 'DCGM_FI_DEV_GPU_UTIL{hpc_job="4242"}'),
               "the job's series to go stale", timeout=90)
    time.sleep(3)

    # import: a fresh store gets rollups and the job's summary from PromQL
    imported = open_store(f"sqlite:///{tmp_path / 'imported.db'}")
    client = PrometheusClient(prometheus)
    result = import_window(imported, client, "acme", began - 60, time.time(), step=1.0, now=time.time())
    assert result.jobs_summarised == ["4242"]
    summary = tstore.job_summary(imported, "acme", "4242")
    assert summary["gpus"] == 2 and summary["nodes"] == "pnode1" and summary["flags"] == "prometheus"
    assert 80 <= summary["gpu_util_mean"] <= summary["gpu_util_max"] <= 100
    assert 0.45 <= summary["sm_active_mean"] <= 0.85
    assert summary["n_gpu_samples"] >= 2 * 15 and summary["gpu_energy_j"] > 2 * 280 * 15
    c.flush()
    own = tstore.job_summary(collector_store, "acme", "4242")
    # Prometheus sees the job from its first scrape after the prolog to the last scrape of the
    # collector's last tick with it (mark poll 1 s + tick 1 s + scrape 1 s after the epilog)
    assert own["start_ts"] <= summary["start_ts"] and summary["end_ts"] <= own["end_ts"] + 5
    assert summary["end_ts"] - summary["start_ts"] >= 15

    def util_samples(store) -> int:  # type: ignore[no-untyped-def]
        with store.engine.connect() as conn:
            return sum(r.samples for r in conn.execute(cluster_hourly.select().where(cluster_hourly.c.metric == "util")))

    first = util_samples(imported)
    assert first == result.gpu_samples > 4 * 20
    again = import_window(imported, client, "acme", began - 60, time.time(), step=1.0, now=time.time())
    assert util_samples(imported) >= first and again.rollup_rows == result.rollup_rows  # replaced, not added

    # the CLI: `sacme collectd import --url` against the same server
    env = {**os.environ, "ACME_DB": f"sqlite:///{tmp_path / 'cli.db'}"}
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "collectd", "import", "--url", prometheus,
                           "--since", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(began - 60)), "--step", "1",
                           "--json"], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["jobs_summarised"] == ["4242"]
    imported.dispose()


def test_import_without_a_prometheus_source_is_a_usage_error(tmp_path: Path):
    env = {**os.environ, "ACME_DB": f"sqlite:///{tmp_path / 'a.db'}"}
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "collectd", "import"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and 'telemetry.source is not "prometheus"' in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "collectd", "import", "--url",
                           f"http://127.0.0.1:{free_port()}"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and "is unreachable" in proc.stderr and "Traceback" not in proc.stderr
