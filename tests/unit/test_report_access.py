"""A real non-root process sees only its own jobs; root sees everyone's.

The child process starts as root, imports what the report needs, then drops
to the ``nobody`` user (uid and groups) before running ``sacme report``, so
the identity check reads the real process credentials, not a fake.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_acme.report.synthetic import synthetic_jobs
from slurm_acme.store import open_store
from slurm_acme.store.rows import upsert
from slurm_acme.store.schema.core import jobs

CHILD = r"""
import os, pwd, sys
from slurm_acme.cli.main import run_cli, sacme
import slurm_acme.cli.report, slurm_acme.report.compute, slurm_acme.report.render_json
import slurm_acme.report.render_text, slurm_acme.report.access, slurm_acme.store.migrate, slurm_acme.config
from slurm_acme.store import open_store
open_store(sys.argv[1]).dispose()      # load the SQLite dialect while still root
user = pwd.getpwnam("nobody")
os.setgroups([])
os.setgid(user.pw_gid)
os.setuid(user.pw_uid)
sys.exit(run_cli(sacme, "sacme", ["--db", sys.argv[1], "report", *sys.argv[2:]]))
"""


@pytest.fixture
def shared_db() -> Iterator[str]:
    """A store in a folder ``nobody`` may write (SQLite WAL needs it)."""
    folder = Path(tempfile.mkdtemp(prefix="acme-report-access-"))
    folder.chmod(0o777)
    url = f"sqlite:///{folder / 'acme.db'}"
    store = open_store(url)
    rows = list(synthetic_jobs(60, seed=4, start_ts=1688169600.0, span_s=10 * 86400, cluster="c1", users=3))
    for row in rows[:3]:
        row.update(user="nobody", gpus=4, gpu_time_s=(row["duration_s"] or 0) * 4)
    with store.engine.begin() as conn:
        upsert(conn, jobs, rows, ["cluster", "job_id"])
    store.dispose()
    for path in folder.iterdir():
        path.chmod(0o666)
    try:
        yield url
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_as_nobody(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, url, *args], capture_output=True, text=True,
                          timeout=300, check=False,
                          env={k: v for k, v in os.environ.items() if k not in ("ACME_CONF", "ACME_DB")})


def test_tests_run_as_root() -> None:
    assert os.getuid() == 0, "this test drops privileges, so it must start as root (make test does)"
    assert pwd.getpwnam("nobody").pw_uid != 0


def test_non_admin_sees_only_own_jobs(shared_db: str) -> None:
    done = run_as_nobody(shared_db, "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["overview"]["user"] == "nobody"
    assert data["overview"]["jobs"] == 3.0 and data["overview"]["gpu_jobs"] == 3.0


def test_non_admin_asking_for_another_user_is_exit_2(shared_db: str) -> None:
    done = run_as_nobody(shared_db, "--user", "u001")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("sacme: error: --user 'u001'") and done.stderr.count("\n") == 1


def test_root_sees_everyone(shared_db: str) -> None:
    done = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", shared_db, "report", "--format", "json"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["overview"]["user"] is None and data["overview"]["jobs"] == 60.0
