"""``sacme admin install`` / ``uninstall`` into a folder: the real CLI, real files, as root."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_acme.admin.layout import Layout
from slurm_acme.cli.main import run_cli, sacme

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="installs root-owned files")


def tree_state(root: Path) -> dict[str, tuple[int, int, int, bytes | None]]:
    """Every path under ``root``: mode, owner, group and (for files) content."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid,
                                            path.read_bytes() if path.is_file() else None)
    return out


def sacme_run(capsys, *args: str) -> tuple[int, str, str]:
    code = run_cli(sacme, "sacme", list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_dry_run_lists_every_file_and_mode_and_changes_nothing(tmp_path, capsys):
    before = tree_state(tmp_path)
    code, out, _ = sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path), "--dry-run")
    assert code == 0
    lay = Layout(tmp_path)
    for path, mode in [(lay.prolog, "0755"), (lay.epilog, "0755"), (lay.collectd, "0755"),
                       (lay.unit, "0644"), (lay.config, "0644"), (lay.snippet, "0644")]:
        assert any(line.startswith("would write") and mode in line and line.endswith(str(path))
                   for line in out.splitlines()), path
    assert tree_state(tmp_path) == before


def test_install_lays_out_root_owned_hooks_with_this_python(tmp_path, capsys):
    code, out, _ = sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))
    assert code == 0
    lay = Layout(tmp_path)
    for path in (lay.prolog, lay.epilog, lay.collectd):
        st = path.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o755, 0, 0), path
    assert lay.prolog.read_bytes() == lay.epilog.read_bytes()
    assert f"installed_python={sys.executable}\n" in lay.collectd.read_text()
    assert f"installed_conf={lay.config}\n" in lay.prolog.read_text()
    assert f"ExecStart={lay.collectd}\n" in lay.unit.read_text()
    assert f"Environment=ACME_CONF={lay.config}\n" in lay.unit.read_text()
    for line in (f"Prolog={lay.prolog}", f"Epilog={lay.epilog}", "PrologFlags=Alloc",
                 "AccountingStoreFlags=job_comment"):
        assert f"  {line}\n" in out and f"{line}\n" in lay.snippet.read_text()


def test_the_installed_wrapper_runs_this_python_from_a_bare_environment(tmp_path, capsys):
    sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))
    proc = subprocess.run([str(Layout(tmp_path).collectd), "--help"], env={}, capture_output=True,
                          text=True, timeout=60, cwd="/", check=False)
    assert proc.returncode == 0 and "Run this node's telemetry collector" in proc.stdout


def test_the_installed_hook_reads_the_installed_config_and_names_the_installed_collector(tmp_path, capsys):
    sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))
    lay = Layout(tmp_path)
    lay.config.write_text(f"[telemetry]\nspool_dir = '{tmp_path}/spool'\n")
    proc = subprocess.run([str(lay.prolog), "check"], env={"SLURM_JOB_ID": "1", "SLURMD_NODENAME": "n1"},
                          capture_output=True, text=True, timeout=10, cwd="/", check=False)
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == [f"conf={lay.config}", f"spool={tmp_path}/spool",
                                        f"collectd={lay.collectd}"]


def test_install_again_changes_nothing(tmp_path, capsys):
    sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))
    first = tree_state(tmp_path)
    code, out, _ = sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))
    assert code == 0
    assert tree_state(tmp_path) == first
    actions = {line.split()[0] for line in out.splitlines() if line.startswith(("write", "update",
                                                                                "unchanged", "kept"))}
    assert actions == {"unchanged", "kept"}


def test_an_existing_acme_toml_is_kept_and_survives_uninstall(tmp_path, capsys):
    lay = Layout(tmp_path)
    lay.etc.mkdir(parents=True)
    lay.config.write_text('[cluster]\nname = "site"\n')
    sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))
    assert lay.config.read_text() == '[cluster]\nname = "site"\n'
    sacme_run(capsys, "admin", "uninstall", "--prefix", str(tmp_path))
    assert lay.config.read_text() == '[cluster]\nname = "site"\n'


def test_install_then_uninstall_leaves_the_prefix_as_it_was(tmp_path, capsys):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    (tmp_path / "usr" / "local").mkdir(parents=True)
    before = tree_state(tmp_path)
    assert sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))[0] == 0
    assert sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))[0] == 0
    assert tree_state(tmp_path) != before
    code, out, _ = sacme_run(capsys, "admin", "uninstall", "--prefix", str(tmp_path))
    assert code == 0 and "kept" not in out
    assert tree_state(tmp_path) == before


def test_uninstall_keeps_a_file_edited_since_and_says_so(tmp_path, capsys):
    sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))
    lay = Layout(tmp_path)
    lay.unit.write_text(lay.unit.read_text() + "# site change\n")
    code, out, _ = sacme_run(capsys, "admin", "uninstall", "--prefix", str(tmp_path))
    assert code == 0
    assert lay.unit.exists() and "kept" in out and str(lay.unit) in out
    assert not lay.prolog.exists() and not lay.manifest.exists()


def test_uninstall_dry_run_changes_nothing(tmp_path, capsys):
    sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))
    before = tree_state(tmp_path)
    code, out, _ = sacme_run(capsys, "admin", "uninstall", "--prefix", str(tmp_path), "--dry-run")
    assert code == 0 and "would remove" in out and "would rmdir" in out
    assert tree_state(tmp_path) == before


@pytest.mark.parametrize("args,message", [
    (["install", "--prefix", "relative/dir"], "--prefix must be an absolute path"),
    (["install", "--prefix", "/nonexistent/acme-prefix"], "is not a folder"),
    (["uninstall", "--prefix", "/tmp"], "nothing of slurm-acme is installed under /tmp"),
])
def test_bad_prefixes_are_one_line_errors_that_write_nothing(capsys, args, message):
    code, _, err = sacme_run(capsys, "admin", *args)
    assert code == 2 and message in err and "Traceback" not in err
    assert not Path("/nonexistent").exists()


def test_install_lays_down_the_drain_policy_timer_running_this_sacme(tmp_path, capsys):
    code, out, _ = sacme_run(capsys, "admin", "install", "--prefix", str(tmp_path))
    assert code == 0
    lay = Layout(tmp_path)
    service, timer = lay.reconcile_unit.read_text(), lay.reconcile_timer.read_text()
    assert f"Environment=ACME_CONF={lay.config}\n" in service and "Type=oneshot\n" in service
    assert "Unit=acme-nodes-reconcile.service\n" in timer and "OnUnitActiveSec=5min\n" in timer
    assert f"systemctl enable --now {lay.reconcile_timer.name}" in out
    [exec_line] = [line for line in service.splitlines() if line.startswith("ExecStart=")]
    argv = exec_line.removeprefix("ExecStart=").split()
    assert argv == [sys.executable, "-m", "slurm_acme", "nodes", "reconcile"]
    helped = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert helped.returncode == 0 and "--dry-run" in helped.stdout
