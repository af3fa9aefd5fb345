"""Other users' jobs, runs and evaluations stay theirs, by every CLI path.

Real Unix users (``acme-sec-alice``, ``acme-sec-bob``) run the real CLI through
``setpriv``; the store is a root-owned 0644 SQLite file (what a site sharing a
store read-only gives its users). Each test asserts the harm did not happen:
bob's rows are not in alice's output, bob's evaluation was not cancelled.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from osusers import OsUser, ensure_user, run_as

from slurm_acme.access import Viewer, current_viewer, is_admin
from slurm_acme.report.synthetic import synthetic_jobs
from slurm_acme.store import evaluate as store_eval
from slurm_acme.store import open_store
from slurm_acme.store import runs as rs
from slurm_acme.store.rows import upsert
from slurm_acme.store.schema.core import jobs
from slurm_acme.store.schema.telemetry import job_nodes, job_summaries

ALICE, BOB = "acme-sec-alice", "acme-sec-bob"
BOB_SECRET = "bob-secret-name"


@pytest.fixture(scope="module")
def alice() -> OsUser:
    return ensure_user(ALICE)


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[str, Path]]:
    """A root-owned store every user may read (0644), holding alice's and bob's work."""
    folder = Path(tempfile.mkdtemp(prefix="acme-sec-access-"))
    folder.chmod(0o755)
    url = f"sqlite:///{folder / 'acme.db'}"
    store = open_store(url)
    rows = list(synthetic_jobs(40, seed=7, start_ts=1688169600.0, span_s=10 * 86400, cluster="c1", users=2))
    for i, row in enumerate(rows):
        row.update(user=ALICE if i < 5 else BOB, gpus=4, gpu_time_s=(row["duration_s"] or 0) * 4)
        if row["user"] == BOB:
            row["name"] = BOB_SECRET
    with store.engine.begin() as conn:
        upsert(conn, jobs, rows, ["cluster", "job_id"])
        for job_id, user in (("7001", ALICE), ("7002", BOB)):
            conn.execute(job_summaries.insert().values(cluster="c1", job_id=job_id, user=user, end_ts=1.0))
            conn.execute(job_nodes.insert().values(cluster="c1", job_id=job_id, node="n1", user=user))
    for run_id, user, ts in (("alice-run", ALICE, 1.0), ("bob-run", BOB, 2.0)):
        rs.create_run(store, run_id=run_id, name=BOB_SECRET if user == BOB else "mine", cluster="c1", user=user,
                      spec="{}", workdir=str(folder), created_ts=ts, state="PENDING", )
        rs.update_run(store, run_id, last_job_id=f"{run_id}-job")
    for eval_id, user in (("ev-alice", ALICE), ("ev-bob", BOB)):
        store_eval.create_run(store, eval_id=eval_id, checkpoint=f"/ckpt/{user}", model_size_b=1.0, cluster="c1",
                              plan={}, job_ids={"gpu-0": "999999"}, run_dir=str(folder / eval_id), mode="jobs",
                              user=user)
    store.dispose()
    (folder / "acme.db").chmod(0o644)
    try:
        yield url, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def one_line_refusal(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------ report

def test_non_admin_report_counts_only_her_jobs(shared, alice):
    proc = run_as(alice, "sacme", "--db", shared[0], "report", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["overview"]["user"] == ALICE and data["overview"]["jobs"] == 5.0
    assert BOB not in proc.stdout and BOB_SECRET not in proc.stdout


def test_non_admin_asking_for_another_users_report_is_refused(shared, alice):
    proc = run_as(alice, "sacme", "--db", shared[0], "report", "--user", BOB)
    one_line_refusal(proc)
    assert "admin group 'root'" in proc.stderr


@pytest.mark.parametrize("how", ["--config", "ACME_CONF"])
def test_her_own_config_naming_her_group_admin_grants_nothing(shared, alice, how):
    own = Path(shared[1]) / f"alice-{how.strip('-')}.toml"
    own.write_text(f'[report]\nadmin_group = "{ALICE}"\n')
    own.chmod(0o644)
    args, env = (["--config", str(own)], None) if how == "--config" else ([], {"ACME_CONF": str(own)})
    proc = run_as(alice, "sacme", *args, "--db", shared[0], "report", "--user", BOB, "--format", "json",
                  env=env)
    assert proc.returncode == 2 and BOB_SECRET not in proc.stdout
    assert "report.admin_group" in proc.stderr and "ignored" in proc.stderr


def test_root_sees_everyone(shared):
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", shared[0], "report", "--format", "json"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["overview"]["jobs"] == 40.0


def test_admin_group_membership_is_read_from_the_trusted_system_config(monkeypatch, tmp_path):
    system = tmp_path / "acme.toml"
    system.write_text('[report]\nadmin_group = "hpc-admins"\n')
    system.chmod(0o644)
    monkeypatch.setattr("slurm_acme.config.SYSTEM_CONFIG", system)
    carol = Viewer("carol", 4242, frozenset({"carol", "hpc-admins"}))
    dave = Viewer("dave", 4243, frozenset({"dave"}))
    assert is_admin(carol) and not is_admin(dave)
    system.chmod(0o666)  # writable by anyone: no longer trusted
    assert not is_admin(carol)


def test_the_viewer_comes_from_the_kernel_not_the_environment(monkeypatch):
    monkeypatch.setenv("USER", BOB)
    monkeypatch.setenv("LOGNAME", BOB)
    assert current_viewer().name == "root"


# ------------------------------------------------------------ status / logs

@pytest.mark.parametrize("ref", ["bob-run", "bob-run-job"], ids=["run-id", "job-id"])
@pytest.mark.parametrize("command", ["status", "logs"])
def test_another_users_run_is_refused(shared, alice, command, ref):
    proc = run_as(alice, "sacme", "--db", shared[0], command, ref)
    one_line_refusal(proc)
    assert "not yours" in proc.stderr and BOB_SECRET not in proc.stderr


def test_a_name_another_user_also_used_resolves_to_her_own_runs_only(shared, alice):
    proc = run_as(alice, "sacme", "--db", shared[0], "status", BOB_SECRET)
    assert proc.returncode == 2 and "no run or job" in proc.stderr


def test_status_without_a_run_shows_her_newest_not_a_newer_one_of_bob(shared, alice):
    proc = run_as(alice, "sacme", "--db", shared[0], "status", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["run_id"] == "alice-run"


def test_her_own_run_is_shown(shared, alice):
    proc = run_as(alice, "sacme", "--db", shared[0], "status", "alice-run", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["run_id"] == "alice-run"


# ------------------------------------------------------------ seval

def test_seval_status_lists_only_her_evaluations(shared, alice):
    proc = run_as(alice, "seval", "--db", shared[0], "status", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["eval_id"] for r in json.loads(proc.stdout)] == ["ev-alice"]


@pytest.mark.parametrize("argv", [["status", "ev-bob"], ["results", "ev-bob"], ["cancel", "ev-bob"]])
def test_seval_on_another_users_evaluation_is_refused(shared, alice, argv):
    proc = run_as(alice, "seval", "--db", shared[0], *argv)
    one_line_refusal(proc)
    assert "not yours" in proc.stderr
    store = open_store(shared[0], readonly=True)
    try:
        assert store_eval.get_run(store, "ev-bob").state == "SUBMITTED"  # not cancelled
    finally:
        store.dispose()


def test_seval_results_by_checkpoint_never_picks_another_users_evaluation(shared, alice):
    proc = run_as(alice, "seval", "--db", shared[0], "results", f"/ckpt/{BOB}")
    assert proc.returncode == 2 and "no evaluation" in proc.stderr


# ------------------------------------------------------------ telemetry

def test_collectd_summaries_show_only_her_jobs(shared, alice):
    proc = run_as(alice, "sacme", "--db", shared[0], "collectd", "summaries", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["job_id"] for r in json.loads(proc.stdout)] == ["7001"]


def test_collectd_job_of_another_user_is_refused(shared, alice):
    proc = run_as(alice, "sacme", "--db", shared[0], "collectd", "job", "--cluster", "c1", "7002", "--json")
    one_line_refusal(proc)
