"""What slurm-acme creates is private; read-only commands create nothing; a failed
submit leaves nothing; a store others may only read is still readable."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from osusers import ensure_group, ensure_user, run_as, run_python_as

from slurm_acme.errors import StoreUnavailable
from slurm_acme.files import PLAIN_PARENT_MODE, SHARED_ROOT_MODE, make_private_dirs, remove_created
from slurm_acme.ft.plan import build_plan
from slurm_acme.ft.spec import parse_spec
from slurm_acme.ft.submitter import submit_plan
from slurm_acme.slurm import NodeInfo, SlurmError
from slurm_acme.store import open_store
from slurm_acme.store import runs as rs


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def outside_tmp():
    """A folder outside pytest's 0700 basetemp, so other users could reach what is in it."""
    folder = Path(tempfile.mkdtemp(prefix="acme-sec-files-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_new_sqlite_store_and_its_folder_are_private(outside_tmp):
    db = outside_tmp / "new" / "acme.db"
    store = open_store(f"sqlite:///{db}")
    store.dispose()
    assert mode(db) == 0o600 and mode(db.parent) == 0o700
    for extra in db.parent.iterdir():  # -wal / -shm follow the database's mode
        assert mode(extra) & 0o077 == 0, extra


def test_a_configured_group_gets_read_access(outside_tmp):
    group = "acme-sec-readers"
    gid = ensure_group(group)
    db = outside_tmp / "shared" / "acme.db"
    open_store(f"sqlite:///{db}", group=group).dispose()
    assert mode(db) == 0o640 and db.stat().st_gid == gid
    assert mode(db.parent) == 0o2750 and db.parent.stat().st_gid == gid


def test_another_user_cannot_read_a_new_store(outside_tmp):
    db = outside_tmp / "acme.db"
    open_store(f"sqlite:///{db}").dispose()
    alice = ensure_user("acme-sec-alice")
    proc = run_python_as(alice, f"open({str(db)!r}, 'rb').read(1)")
    assert proc.returncode != 0 and "PermissionError" in proc.stderr


def test_make_private_dirs_records_only_what_it_made_and_undoes_it(tmp_path):
    (tmp_path / "had").mkdir(mode=0o755)
    created = make_private_dirs(tmp_path / "had" / "a" / "b")
    assert created == [tmp_path / "had" / "a", tmp_path / "had" / "a" / "b"]
    assert all(mode(p) == 0o700 for p in created) and mode(tmp_path / "had") == 0o755
    remove_created(created)
    assert list((tmp_path / "had").iterdir()) == []


def test_a_shared_scratch_root_is_sticky_and_only_the_leaf_private(tmp_path):
    created = make_private_dirs(tmp_path / "scratch" / "eval-1", parents_mode=SHARED_ROOT_MODE)
    assert mode(created[0]) == 0o1777 and mode(created[1]) == 0o700


def test_plain_parents_are_not_world_writable(tmp_path):
    created = make_private_dirs(tmp_path / "home" / ".local" / "seval" / "ev-1", parents_mode=PLAIN_PARENT_MODE)
    assert [mode(p) for p in created] == [0o755, 0o755, 0o755, 0o700]


# ------------------------------------------------------------ read-only commands

@pytest.mark.parametrize("args", [["db", "info"], ["report", "--format", "json"], ["status"]])
def test_read_only_commands_create_nothing_for_a_mistyped_db(tmp_path, args):
    target = tmp_path / "typo" / "dir" / "acme.db"
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", f"sqlite:///{target}", *args],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "does not exist" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "typo").exists()


def test_mysql_url_does_not_suggest_the_postgres_extra():
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "--db", "mysql://u@localhost/acme", "db", "info"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "postgres]" not in proc.stderr and "not supported" in proc.stderr


def test_a_root_owned_0644_store_is_readable_by_another_user(outside_tmp):
    db = outside_tmp / "acme.db"
    store = open_store(f"sqlite:///{db}")
    rs.create_run(store, run_id="r-1", name="n", cluster="c", user="acme-sec-alice", spec="{}",
                  workdir="/w", created_ts=1.0, state="PENDING")
    store.dispose()
    db.chmod(0o644)
    assert not db.with_name("acme.db-wal").exists()  # closed cleanly: reading needs -shm it cannot make
    alice = ensure_user("acme-sec-alice")
    proc = run_as(alice, "sacme", "--db", f"sqlite:///{db}", "status", "r-1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"run_id": "r-1"' in proc.stdout.replace("'", '"')
    assert sorted(p.name for p in outside_tmp.iterdir()) == ["acme.db"]  # nothing created beside it


def test_readonly_open_refuses_a_missing_store(tmp_path):
    with pytest.raises(StoreUnavailable, match="does not exist"):
        open_store(f"sqlite:///{tmp_path / 'no.db'}", readonly=True)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------ failed submit

SPEC = "name: t\nnodes: 1\ncommand: [python, x.py]\ncheckpoint: {dir: ckpt/deep}\n"


@dataclass
class RefusingSlurm:
    error: BaseException
    submitted: list[tuple] = field(default_factory=list)

    def sinfo_nodes(self) -> list[NodeInfo]:
        return [NodeInfo("node1", "idle")]

    def sbatch(self, options, script):  # type: ignore[no-untyped-def]
        raise self.error


@pytest.mark.parametrize("error", [SlurmError(["sbatch"], 1, "sbatch: error: Invalid account"),
                                   KeyboardInterrupt()], ids=["sbatch-refuses", "interrupted"])
def test_a_failed_submit_removes_the_run_folder_checkpoint_folder_and_row(store, tmp_path, error):
    work = tmp_path / "work"
    work.mkdir()
    plan = build_plan(parse_spec(SPEC, "t.yaml"), spec_path="t.yaml", db_url="sqlite://", run_id="r1",
                      cwd=str(work))
    with pytest.raises(type(error)):
        submit_plan(plan, slurm=RefusingSlurm(error), store=store, cluster="acme")  # type: ignore[arg-type]
    assert list(work.iterdir()) == []
    assert rs.get_run(store, "r1") is None


def test_a_failed_submit_keeps_folders_that_were_there(store, tmp_path):
    work = tmp_path / "work"
    (work / "ckpt").mkdir(parents=True)
    (work / "ckpt" / "old.pt").write_text("x")
    plan = build_plan(parse_spec(SPEC, "t.yaml"), spec_path="t.yaml", db_url="sqlite://", run_id="r2",
                      cwd=str(work))
    with pytest.raises(SlurmError):
        submit_plan(plan, slurm=RefusingSlurm(SlurmError(["sbatch"], 1, "no")), store=store,  # type: ignore[arg-type]
                    cluster="acme")
    assert sorted(p.name for p in work.rglob("*")) == ["ckpt", "old.pt"]


def test_a_submitted_run_folder_is_private_and_owned_by_the_real_user(store, tmp_path, monkeypatch):
    class Accepting(RefusingSlurm):
        def sbatch(self, options, script):  # type: ignore[no-untyped-def]
            return "5"

    monkeypatch.setenv("USER", f"someone-else-{uuid.uuid4().hex[:6]}")
    plan = build_plan(parse_spec(SPEC, "t.yaml"), spec_path="t.yaml", db_url="sqlite://", run_id="r3",
                      cwd=str(tmp_path))
    submit_plan(plan, slurm=Accepting(KeyboardInterrupt()), store=store, cluster="acme")  # type: ignore[arg-type]
    assert mode(Path(plan.run_dir)) == 0o700 and mode(Path(plan.run_dir).parent) == 0o700
    assert rs.get_run(store, "r3").user == "root"  # from the kernel, not $USER
