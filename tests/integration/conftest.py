"""The real local Slurm cluster, started once per test session.

``slurm_cluster`` runs ``sbin/acme-cluster up`` (folder ``/tmp/acme-test-cluster``
unless ``ACME_CLUSTER_DIR`` is set; ports from ``ACME_CLUSTER_PORT_BASE``, else
those the folder's cluster already uses, else the first free base of
``PORT_BASES``, so a demo cluster on the default ports can keep running) and
exports ``SLURM_CONF`` for the whole session. It is left running
afterwards so the next run starts in a second; ``acme-cluster down`` stops it.

The Slurm release is the host's (Debian 12: 22.05) unless ``ACME_SLURM_ROOT``
names a root made by ``sbin/slurm-root`` (trixie: 24.11); then the cluster
runs there and the folder's ``bin/`` (a wrapper per Slurm command) goes first
on ``PATH`` for the session, so every test, the ``sacme`` CLI and the jobs run
that release's commands. ``SlurmCluster.version`` says which one runs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ACME_CLUSTER = REPO / "sbin" / "acme-cluster"
DEFAULT_DIR = "/tmp/acme-test-cluster"
#: The shape every integration test may rely on (the issue's 4 nodes x 8 GPUs).
NODES, GPUS_PER_NODE = 4, 8
#: Port bases tried, in order, for a new cluster folder (the default cluster uses 16800).
PORT_BASES = (17800, 19800, 20800, 21800, 22800, 23800)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs the local Slurm cluster (sbin/acme-cluster)")


#: Modules that use the cluster only through what every release does the same
#: (sbatch/srun/sacct, which the rest of the suite covers on both), but spend
#: minutes in a third-party tool, a browser or a package build: they run once,
#: on the host's Slurm, so CI's two runs fit its 60 minutes.
ONCE_ON_THE_HOST_SLURM = {
    "test_seval_harnesses": "lm-eval and OpenCompass end to end (about 6 min)",
    "test_deploy": "a wheel built and installed into a fresh venv (about 4 min)",
    "test_report_html": "the reports rendered in Chromium",
    "test_ft_user_script": "nine user-script trainings; their Slurm side (requeue, scancel, a DOWN node, "
                           "srun steps) is the other test_ft_* modules' on both releases",
    "test_ft_bad_spec": "specs refused before any Slurm command runs",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``ACME_CLUSTER_TESTS_ONLY=1``, run only the tests that use the Slurm cluster.

    ``make test-integration-slurm24`` sets it: a test that never asks for
    ``slurm_cluster`` (directly or through another fixture) runs no Slurm
    command, so a second Slurm release cannot change its outcome; it has run
    once already, on the host's Slurm. Neither does a module in
    :data:`ONCE_ON_THE_HOST_SLURM`.
    """
    if os.environ.get("ACME_CLUSTER_TESTS_ONLY") != "1":
        return
    keep = [item for item in items if "slurm_cluster" in getattr(item, "fixturenames", ())
            and item.module.__name__.rpartition(".")[2] not in ONCE_ON_THE_HOST_SLURM]
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@dataclass(frozen=True)
class SlurmCluster:
    dir: Path
    conf: Path
    nodes: tuple[str, ...]
    gpus_per_node: int
    #: ``(major, minor)`` of the Slurm that runs, e.g. ``(24, 11)``.
    version: tuple[int, int] = (0, 0)

    @property
    def env(self) -> dict[str, str]:
        """Environment for a subprocess (e.g. the real ``sacme`` CLI) to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    folder = Path(os.environ.get("ACME_CLUSTER_DIR", DEFAULT_DIR))
    env = {**os.environ, "ACME_CLUSTER_DIR": str(folder)}
    if not env.get("ACME_CLUSTER_PORT_BASE") and not (folder / "cluster.json").exists():
        env["ACME_CLUSTER_PORT_BASE"] = str(_free_port_base())
    proc = subprocess.run([sys.executable, str(ACME_CLUSTER), "up", "--nodes", str(NODES),
                           "--gpus", str(GPUS_PER_NODE)], env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        pytest.fail(f"sbin/acme-cluster up failed:\n{proc.stderr[-3000:]}", pytrace=False)
    saved = _read_cluster_json(folder)
    conf = folder / "etc" / "slurm.conf"
    previous = {key: os.environ.get(key) for key in ("SLURM_CONF", "PATH")}
    os.environ["SLURM_CONF"] = str(conf)
    if saved.get("slurm_root"):
        os.environ["PATH"] = f"{folder / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    major, _, minor = str(saved.get("slurm_version", "0.0")).partition(".")
    try:
        yield SlurmCluster(dir=folder, conf=conf,
                           nodes=tuple(f"node{i}" for i in range(1, saved["nodes"] + 1)),
                           gpus_per_node=saved["gpus"], version=(int(major), int(minor)))
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _read_cluster_json(folder: Path) -> dict:
    return json.loads((folder / "cluster.json").read_text())


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _free_port_base() -> int:
    """The first base whose MariaDB, slurmctld, slurmdbd and node1 ports are all free."""
    for base in PORT_BASES:
        if not any(_port_taken(base + offset) for offset in (6, 17, 19, 101)):
            return base
    pytest.fail(f"no free port base among {PORT_BASES}; set ACME_CLUSTER_PORT_BASE", pytrace=False)


def wait_for_job(slurm, job_id: str, *, timeout: float = 120, poll: float = 0.5):  # type: ignore[no-untyped-def]
    """Poll until ``job_id`` is in a terminal state; return its ``ScontrolJob``.

    Fails the test (naming the last state and reason) when it does not finish
    in ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        job = slurm.show_job(job_id)
        if job.state.is_terminal():
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} still {job.state.value} ({job.reason}) after {timeout:.0f}s")
        time.sleep(poll)


def wait_for_accounting(slurm, job_ids, *, array_tasks=None, timeout: float = 120,  # type: ignore[no-untyped-def]
                        poll: float = 1.0):
    """Poll ``sacct`` until every job in ``job_ids`` is finished in a time-window query.

    slurmctld reports a job's end to slurmdbd asynchronously, and on Slurm
    22.05 a windowed query (``-S``/``-E``, what ``sacme ingest`` runs) can
    lag a ``-j`` lookup of the same job by seconds. Tests that ingest from
    accounting wait for the same kind of query first.

    ``array_tasks`` maps an array's job id to how many of its tasks must be
    finished: each task is a record of its own and can lag its siblings (an
    array task was seen missing for about 4 s after ``scontrol`` said it ended).
    Returns the records of ``job_ids`` and of those arrays' tasks.
    """
    from datetime import datetime, timedelta, timezone

    wanted = {str(j) for j in job_ids}
    arrays = {str(a): n for a, n in (array_tasks or {}).items()}
    deadline = time.monotonic() + timeout
    while True:
        now = datetime.now(timezone.utc)
        records = slurm.sacct(now - timedelta(hours=2), end=now)
        finished = [r for r in records if r.state.is_terminal() and r.end is not None]
        done = {r.job_id for r in finished}
        tasks = {a: sum(r.array_job_id == a for r in finished) for a in arrays}
        if wanted <= done and all(tasks[a] >= n for a, n in arrays.items()):
            return [r for r in records if r.job_id in wanted or r.array_job_id in arrays]
        if time.monotonic() > deadline:
            short = {a: f"{tasks[a]}/{n}" for a, n in arrays.items() if tasks[a] < n}
            pytest.fail(f"not finished in sacct after {timeout:.0f}s: jobs {sorted(wanted - done)}, "
                        f"array tasks {short}")
        time.sleep(poll)


def run_sacme(env: dict[str, str], db_url: str, *args: str) -> str:
    """Run the real ``sacme`` CLI on store ``db_url``; fail unless it exits 0; its stdout."""
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", db_url, *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def stored_job_rows(db_url: str, *where):  # type: ignore[no-untyped-def]
    """The ``jobs`` rows of store ``db_url`` that match every clause of ``where``."""
    from sqlalchemy import select

    from slurm_acme.store import open_store
    from slurm_acme.store.schema.core import jobs

    store = open_store(db_url)
    try:
        with store.engine.connect() as conn:
            return conn.execute(select(jobs).where(*where)).mappings().all()
    finally:
        store.dispose()


def poll_until(predicate, what: str, *, timeout: float, poll: float = 0.5):  # type: ignore[no-untyped-def]
    """Call ``predicate`` every ``poll`` seconds until it returns something truthy; return that.

    Fails the test (``timed out waiting for <what>``) after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="session")
def wait_until():  # type: ignore[no-untyped-def]
    """The :func:`poll_until` helper, as a fixture: ``wait_until(predicate, what, timeout=...)``."""
    return poll_until


@pytest.fixture(scope="session")
def stored_jobs():  # type: ignore[no-untyped-def]
    """The :func:`stored_job_rows` helper, as a fixture: ``stored_jobs(db_url, *where)``."""
    return stored_job_rows


@pytest.fixture(scope="session")
def sacme():  # type: ignore[no-untyped-def]
    """The :func:`run_sacme` helper, as a fixture: ``sacme(env, db_url, *args) -> stdout``."""
    return run_sacme


@pytest.fixture(scope="session")
def wait_accounted():  # type: ignore[no-untyped-def]
    """The :func:`wait_for_accounting` helper, as a fixture."""
    return wait_for_accounting


@pytest.fixture(scope="session")
def wait_job():  # type: ignore[no-untyped-def]
    """The :func:`wait_for_job` helper, as a fixture (test modules cannot import conftest)."""
    return wait_for_job


@pytest.fixture
def slurm(slurm_cluster):  # type: ignore[no-untyped-def]
    """A ``slurm_acme.slurm.Slurm`` client for the test cluster."""
    from slurm_acme.slurm import Slurm

    return Slurm(timeout=60)
