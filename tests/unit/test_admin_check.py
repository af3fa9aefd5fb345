"""``sacme admin check``'s rows, each against the fact it checks (the Slurm door faked by its runner)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from slurm_acme.admin import check
from slurm_acme.slurm import Slurm
from slurm_acme.telemetry.settings import CollectorSettings

REPO = Path(__file__).resolve().parents[2]


def settings(tmp_path: Path) -> CollectorSettings:
    return CollectorSettings.build("acme", "node7", None, spool_dir=str(tmp_path / "spool"))


def slurm_answering(outputs: dict[str, str]) -> Slurm:
    def runner(argv, *, timeout, env=None, stdin=None):  # type: ignore[no-untyped-def]
        return outputs[argv[0]]
    return Slurm(runner=runner)


@pytest.mark.parametrize("flags,ok", [("Alloc", True), ("Alloc,Contain", True), ("Contain,X11", False), ("", False)])
def test_prolog_flags_must_include_alloc(flags, ok):
    result = check.check_prolog_flags(flags)
    assert result.ok is ok
    assert ok or "add Alloc to PrologFlags" in result.fix


def hook_copy(tmp_path: Path) -> Path:
    """The shipped hook as an installed one, with a fake executable collector beside it."""
    (tmp_path / "prolog").mkdir()
    (tmp_path / "sbin").mkdir()
    path = tmp_path / "prolog" / "acme-prolog"
    shutil.copy2(REPO / "slurm_acme" / "data" / "node" / "acme-hook", path)
    (tmp_path / "sbin" / "acme-collectd").write_text("#!/bin/sh\n")
    (tmp_path / "sbin" / "acme-collectd").chmod(0o755)
    return path


def test_a_working_hook_passes_with_its_time(tmp_path, monkeypatch):
    conf = tmp_path / "acme.toml"
    conf.write_text(f"[telemetry]\nspool_dir = '{tmp_path}/spool'\n")
    monkeypatch.setenv("ACME_CONF", str(conf))
    result = check.check_hook("Prolog", str(hook_copy(tmp_path)), settings(tmp_path))
    assert result.ok, result
    assert " ms, spool " in result.detail


def test_a_hook_that_is_not_executable_fails_with_the_chmod_to_run(tmp_path):
    path = hook_copy(tmp_path)
    path.chmod(0o644)
    result = check.check_hook("Prolog", str(path), settings(tmp_path))
    assert not result.ok and "not executable" in result.detail and result.fix == f"chmod 0755 {path} (or rerun `sacme admin install`)"


def test_a_missing_hook_and_no_hook_configured_fail(tmp_path):
    assert "does not exist" in check.check_hook("Epilog", str(tmp_path / "acme-epilog"), settings(tmp_path)).detail
    result = check.check_hook("Epilog", "", settings(tmp_path))
    assert not result.ok and "no slurm-acme hook" in result.detail and "sacme admin install" in result.fix


def test_a_hook_writing_another_spool_than_the_collector_reads_fails(tmp_path, monkeypatch):
    conf = tmp_path / "acme.toml"
    conf.write_text(f"[telemetry]\nspool_dir = '{tmp_path}/elsewhere'\n")
    monkeypatch.setenv("ACME_CONF", str(conf))
    result = check.check_hook("Prolog", str(hook_copy(tmp_path)), settings(tmp_path))
    assert not result.ok and f"{tmp_path}/elsewhere" in result.detail


def test_no_collector_pid_fails_with_how_to_start_it(tmp_path):
    result = check.check_collector(settings(tmp_path))
    assert not result.ok and "systemctl start acme-collectd" in result.fix


@pytest.mark.parametrize("skew,ok", [(0, True), (30, False), (-30, False)])
def test_clock_offset_to_the_controller(skew, ok):
    now = int(time.time()) + skew
    slurm = slurm_answering({"sdiag": f"****\nsdiag output at Tue Dec 01 13:02:13 2026 ({now})\n"})
    result = check.check_clock(slurm)
    assert result.ok is ok
    assert ok or "NTP" in result.fix


def test_a_store_behind_the_schema_says_upgrade(tmp_path):
    from slurm_acme.store import open_store
    from slurm_acme.store.migrate import LATEST

    url = f"sqlite:///{tmp_path / 'acme.db'}"
    open_store(url).dispose()
    assert check.check_store(url).ok
    import sqlite3
    with sqlite3.connect(tmp_path / "acme.db") as conn:
        conn.execute("UPDATE acme_meta SET value = ? WHERE key = 'schema_version'", (str(LATEST - 1),))
    result = check.check_store(url)
    assert not result.ok and result.fix == "sacme db upgrade"


def test_an_unreachable_store_fails(tmp_path):
    result = check.check_store(f"sqlite:///{tmp_path / 'absent' / 'acme.db'}")
    assert not result.ok and "store.url" in result.fix
