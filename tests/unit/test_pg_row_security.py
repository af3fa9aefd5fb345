"""On a shared Postgres store a user's own credentials return only her rows,
through the CLI and through direct SQL; an admin role sees everything.

Roles are created uniquely named on the real local Postgres and dropped after.
The CLI is run as root (an admin to the CLI itself) with the user's database
credentials, so what keeps bob's rows out is the database, not the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from slurm_acme.store import evaluate as store_eval
from slurm_acme.store import open_store
from slurm_acme.store import runs as rs
from slurm_acme.store.partitions import ensure_days
from slurm_acme.store.rows import upsert
from slurm_acme.store.schema import metadata
from slurm_acme.store.schema.core import jobs
from slurm_acme.store.schema.telemetry import gpu_samples
from slurm_acme.store.security import SHARED, VIA_PARENT, rule_for

pytestmark = pytest.mark.postgres


@dataclass(frozen=True)
class Roles:
    alice: str
    bob: str
    users: str
    admin: str


def _admin_conn(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def _url_as(url: str, role: str) -> str:
    base, db = url.rsplit("/", 1)
    host = base.split("@", 1)[1]
    return f"postgresql://{role}@{host}/{db}"


PG_ADMIN_URL = os.environ.get("ACME_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="module")
def pg_db() -> Iterator[str]:
    """One throw-away database for this module (the tests only read, or are refused writes)."""
    name = f"acme_t_sec_{uuid.uuid4().hex[:10]}"
    with _admin_conn(PG_ADMIN_URL) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        with _admin_conn(PG_ADMIN_URL) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def roles(pg_db: str) -> Iterator[Roles]:
    tag = uuid.uuid4().hex[:8]
    r = Roles(f"acme_sec_{tag}_alice", f"acme_sec_{tag}_bob", f"acme_sec_{tag}_users", f"acme_sec_{tag}_admin")
    with _admin_conn(pg_db) as conn:
        conn.execute(f'CREATE ROLE "{r.users}" NOLOGIN')
        conn.execute(f'CREATE ROLE "{r.alice}" LOGIN IN ROLE "{r.users}"')
        conn.execute(f'CREATE ROLE "{r.bob}" LOGIN IN ROLE "{r.users}"')
        conn.execute(f'CREATE ROLE "{r.admin}" LOGIN BYPASSRLS')
    try:
        yield r
    finally:
        names = ", ".join(f'"{role}"' for role in (r.alice, r.bob, r.admin, r.users))
        with _admin_conn(pg_db) as conn:  # their privileges in this database, then the roles
            conn.execute(f"DROP OWNED BY {names}")
            conn.execute(f"DROP ROLE {names}")


@pytest.fixture(scope="module")
def filled(pg_db: str, roles: Roles) -> str:
    pg_url = pg_db
    store = open_store(pg_url)
    rows = []
    for i, user in enumerate([roles.alice] * 3 + [roles.bob] * 4):
        rows.append({"cluster": "c1", "job_id": str(100 + i), "user": user, "name": f"job-of-{user}",
                     "state": "COMPLETED", "gpus": 8, "nodes": 1, "submit_ts": 1688169600.0 + i,
                     "start_ts": 1688169601.0 + i, "end_ts": 1688173200.0, "duration_s": 3599.0,
                     "queue_s": 1.0, "gpu_time_s": 3599.0 * 8, "workload_type": "Pretrain"})
    with store.engine.begin() as conn:
        upsert(conn, jobs, rows, ["cluster", "job_id"])
        ensure_days(conn, "gpu_samples", 1688170000.0, 1688170006.0)
        conn.execute(gpu_samples.insert(), [{"cluster": "c1", "node": "n1", "ts": 1688170000.0 + i, "gpu_index": 0,
                                             "job_id": str(100 + i), "util_percent": 50.0} for i in range(7)])
    for run_id, user in (("ra", roles.alice), ("rb", roles.bob)):
        rs.create_run(store, run_id=run_id, name=run_id, cluster="c1", user=user, spec="{}", workdir="/w",
                      created_ts=1.0, state="PENDING")
        rs.start_attempt(store, run_id=run_id, attempt=0, job_id=f"{run_id}-job", nodelist="n1", start_ts=1.0)
    store_eval.create_run(store, eval_id="eb", checkpoint="/c", model_size_b=1.0, cluster="c1", plan={},
                          job_ids={}, run_dir="/r", mode="jobs", user=roles.bob)
    store.dispose()
    for role, admin in ((roles.users, False), (roles.admin, True)):
        proc = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", pg_url, "db", "grant", role,
                               *(["--admin"] if admin else [])], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
    return pg_url


def test_every_table_has_a_decided_policy():
    for table in metadata.tables:
        rule = rule_for(table)
        assert table in SHARED or table in VIA_PARENT or rule in ('"user" = current_user', "false"), table


def test_direct_sql_returns_only_her_rows(filled: str, roles: Roles):
    with psycopg.connect(_url_as(filled, roles.alice)) as conn:
        users = {r[0] for r in conn.execute("SELECT DISTINCT \"user\" FROM jobs")}
        runs = [r[0] for r in conn.execute("SELECT run_id FROM runs")]
        attempts = [r[0] for r in conn.execute("SELECT run_id FROM attempts")]
        samples = conn.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
        evals = conn.execute("SELECT count(*) FROM eval_runs").fetchone()[0]
        by_name = conn.execute("SELECT count(*) FROM jobs WHERE name LIKE %s", (f"%{roles.bob}%",)).fetchone()[0]
    assert users == {roles.alice}
    assert runs == ["ra"] and attempts == ["ra"]
    assert samples == 3 and evals == 0 and by_name == 0


def test_she_cannot_write_rows_as_someone_else_nor_touch_theirs(filled: str, roles: Roles):
    with psycopg.connect(_url_as(filled, roles.alice), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO runs (run_id, name, cluster, \"user\", spec, created_ts, state) "
                         "VALUES ('forged', 'x', 'c1', %s, '{}', 1, 'PENDING')", (roles.bob,))
        changed = conn.execute("UPDATE runs SET state = 'STOPPED' WHERE run_id = 'rb'").rowcount
        deleted = conn.execute("DELETE FROM attempts WHERE run_id = 'rb'").rowcount
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM jobs")  # ingest's table: read-only for users
    assert changed == 0 and deleted == 0
    with _admin_conn(filled) as conn:
        assert conn.execute("SELECT state FROM runs WHERE run_id = 'rb'").fetchone()[0] == "PENDING"
        assert conn.execute("SELECT count(*) FROM attempts WHERE run_id = 'rb'").fetchone()[0] == 1


def test_the_cli_with_her_credentials_returns_only_her_rows_even_as_a_cli_admin(filled: str, roles: Roles):
    env = {k: v for k, v in os.environ.items() if k not in ("ACME_DB", "ACME_CONF")}
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", _url_as(filled, roles.alice), "report",
                           "--format", "json"], capture_output=True, text=True, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["overview"]["user"] is None  # the CLI asked for everyone...
    assert data["overview"]["jobs"] == 3.0  # ...and the database returned hers only
    assert roles.bob not in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", _url_as(filled, roles.alice), "status",
                           "rb"], capture_output=True, text=True, check=False, env=env)
    assert proc.returncode == 2 and "no run or job 'rb'" in proc.stderr


def test_the_admin_role_sees_everything(filled: str, roles: Roles):
    with psycopg.connect(_url_as(filled, roles.admin)) as conn:
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 7
        assert conn.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == 7
        assert conn.execute("SELECT count(*) FROM eval_runs").fetchone()[0] == 1


def test_day_partitions_cannot_be_read_around_the_policy(filled: str, roles: Roles):
    with _admin_conn(filled) as conn:
        parts = [r[0] for r in conn.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                                            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'gpu_samples'")]
    assert parts, "gpu_samples is expected to be partitioned by day on Postgres"
    with psycopg.connect(_url_as(filled, roles.alice), autocommit=True) as conn:
        for part in parts:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f'SELECT count(*) FROM "{part}"')
