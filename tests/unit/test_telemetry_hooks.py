"""The real prolog/epilog executables, run as slurmd runs them: a bare environment
(no PATH), Slurm's variables, stdout/stderr discarded. They must always exit 0."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from slurm_acme.contracts import MARK_VERSION
from slurm_acme.telemetry.marks import read_mark

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path):
    """A copy of the hooks with a fake sbin/acme-collectd that records how it was started."""
    for rel in ("prolog/acme-prolog", "epilog/acme-epilog"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, tmp_path / rel)
    fake = tmp_path / "sbin" / "acme-collectd"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$ACME_CONF $*" >> {tmp_path}/started\n')
    fake.chmod(0o755)
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("")
    (etc / "acme.toml").write_text(
        f'[store]\nurl = "sqlite:///x.db"\n\n[telemetry]  # node side\n'
        f'interval_s = 5\nspool_dir = "{tmp_path}/spool"   # local disk\n')
    return tmp_path


def slurm_env(tree: Path, **extra: str) -> dict[str, str]:
    env = {"SLURM_JOB_ID": "4242", "SLURMD_NODENAME": "node7", "SLURM_JOB_USER": "alice",
           "SLURM_CONF": str(tree / "etc" / "slurm.conf"), "SLURM_JOB_RESTART_COUNT": "0",
           "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def run_hook(tree: Path, kind: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    path = tree / ("prolog/acme-prolog" if kind == "prolog" else "epilog/acme-epilog")
    return subprocess.run([str(path)], env=env, capture_output=True, text=True, timeout=10,
                          cwd="/", check=False)


def run_hook_to_the_end(tree: Path, kind: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run the hook and return once it *and every process it started* have exited.

    The hook gets the write end of a pipe as an extra descriptor; everything it
    forks inherits it (the collector is started with only 0-2 redirected), so
    the read end reaches EOF exactly when the last of them is gone. A test of
    "nothing was started" then waits on that event, not on a guessed sleep.
    """
    path = tree / ("prolog/acme-prolog" if kind == "prolog" else "epilog/acme-epilog")
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.run([str(path)], env=env, capture_output=True, text=True, timeout=10,
                              cwd="/", check=False, pass_fds=(write_fd,))
        os.close(write_fd)
        write_fd = -1
        ready, _, _ = select.select([read_fd], [], [], 10)
        assert ready and os.read(read_fd, 1) == b"", "a process the hook started is still running after 10 s"
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    return proc


def marks(tree: Path, node: str = "node7") -> dict[str, dict]:
    folder = tree / "spool" / node / "marks"
    return {p.name: json.loads(p.read_text()) for p in folder.iterdir() if p.is_file()}


def wait_started(tree: Path) -> list[str]:
    deadline = time.monotonic() + 5
    while not (tree / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return (tree / "started").read_text().splitlines()


def test_prolog_marks_start_with_gpus_user_and_time(tree):
    before = time.time()
    proc = run_hook(tree, "prolog", slurm_env(tree, SLURM_JOB_GPUS="0,1,2"))
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    mark = marks(tree)["4242.0.start"]
    assert mark["v"] == MARK_VERSION and mark["kind"] == "start" and mark["job_id"] == "4242"
    assert mark["node"] == "node7" and mark["user"] == "alice" and mark["gpus"] == "0,1,2"
    mtime = (tree / "spool" / "node7" / "marks" / "4242.0.start").stat().st_mtime
    assert before - 1 <= mtime <= time.time() + 1  # the mark's time is its mtime


def test_epilog_marks_end_with_exit_code(tree):
    env = slurm_env(tree, SLURM_SCRIPT_CONTEXT="epilog_slurmd", SLURM_JOB_EXIT_CODE2="3:0",
                    SLURM_JOB_GPUS="4")
    assert run_hook(tree, "epilog", env).returncode == 0
    mark = marks(tree)["4242.0.end"]
    assert mark["kind"] == "end" and mark["exit_code"] == "3:0" and mark["gpus"] == "4"


@pytest.mark.parametrize("var", ["CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_STEP_GPUS"])
def test_prolog_falls_back_to_other_gpu_variables(tree, var):
    run_hook(tree, "prolog", slurm_env(tree, **{var: "3,5"}))
    assert marks(tree)["4242.0.start"]["gpus"] == "3,5"


def test_prolog_without_gpu_variables_says_unknown(tree):
    run_hook(tree, "prolog", slurm_env(tree))
    assert marks(tree)["4242.0.start"]["gpus"] is None


def test_requeued_run_gets_its_own_mark(tree):
    run_hook(tree, "prolog", slurm_env(tree))
    run_hook(tree, "prolog", slurm_env(tree, SLURM_JOB_RESTART_COUNT="1"))
    assert set(marks(tree)) == {"4242.0.start", "4242.1.start"}


def test_hostile_values_cannot_break_the_json_or_the_path(tree):
    env = slurm_env(tree, SLURM_JOB_USER='a"b\\c', SLURM_JOB_GPUS='0","x":"1',
                    SLURM_JOB_ID="12/../../evil")
    assert run_hook(tree, "prolog", env).returncode == 0
    (name, mark), = marks(tree).items()
    assert name == "12....evil.0.start" and mark["user"] == "abc"


def test_prolog_starts_the_collector_detached_with_the_config(tree):
    run_hook(tree, "prolog", slurm_env(tree))
    started = wait_started(tree)
    assert started == [(f"{tree}/etc/acme.toml --node node7 --spool-dir {tree}/spool "
                        f"--log-file {tree}/spool/node7/collectd.log")]


def test_the_collector_survives_slurmd_killing_the_hooks_process_group(tree):
    """slurmd SIGKILLs a hook's process group the moment the hook exits. The started
    collector must already be in a session of its own by then: before the hook waited
    for that, about one start in three died before it wrote a line (CI, test_deploy)."""
    import signal

    fake = tree / "sbin" / "acme-collectd"
    fake.write_text(f'#!/bin/sh\n/bin/sleep 0.3\necho "$*" >> {tree}/started\n')
    node_dir = tree / "spool" / "node7"
    tries = 20
    for i in range(tries):
        (node_dir / "collectd.starting").unlink(missing_ok=True)  # each try is a first start
        hook = subprocess.Popen([str(tree / "prolog" / "acme-prolog")], env=slurm_env(tree, SLURM_JOB_ID=str(i)),
                                cwd="/", start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        assert hook.wait(timeout=10) == 0
        try:
            os.killpg(hook.pid, signal.SIGKILL)  # what slurmd does to the hook's group
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        started = (tree / "started").read_text().splitlines() if (tree / "started").exists() else []
        if len(started) == tries:
            break
        time.sleep(0.1)
    assert len(started) == tries, f"{tries - len(started)} of {tries} collectors were killed with the hook"


def test_waiting_for_the_hook_to_the_end_covers_the_collector_it_starts(tree):
    """The event the negative test below waits on really includes the detached start."""
    assert run_hook_to_the_end(tree, "prolog", slurm_env(tree)).returncode == 0
    assert (tree / "started").read_text().count("--node node7") == 1


def test_a_live_collector_is_not_started_again(tree):
    node_dir = tree / "spool" / "node7"
    node_dir.mkdir(parents=True)
    sleeper = subprocess.Popen(["acme-collectd", "30"], executable="/bin/sleep")
    try:
        (node_dir / "collectd.pid").write_text(f"{sleeper.pid}\n")
        assert run_hook_to_the_end(tree, "prolog", slurm_env(tree)).returncode == 0
        assert not (tree / "started").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_stale_pid_file_does_not_stop_a_restart(tree):
    node_dir = tree / "spool" / "node7"
    node_dir.mkdir(parents=True)
    (node_dir / "collectd.pid").write_text("1\n")  # pid 1 is alive but is no collector
    run_hook(tree, "prolog", slurm_env(tree))
    assert len(wait_started(tree)) == 1


def test_spool_dir_defaults_to_var_spool_when_no_config(tree, tmp_path):
    (tree / "etc" / "acme.toml").unlink()
    env = slurm_env(tree, ACME_CONF=str(tmp_path / "missing.toml"))
    # /var/spool/acme may not be writable in a test sandbox; the hook still exits 0.
    assert run_hook(tree, "prolog", env).returncode == 0


def test_acme_conf_beats_the_file_beside_slurm_conf(tree, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text(f'[telemetry]\nspool_dir = "{tmp_path}/other-spool"\n')
    run_hook(tree, "prolog", slurm_env(tree, ACME_CONF=str(other)))
    assert (tmp_path / "other-spool" / "node7" / "marks" / "4242.0.start").exists()


@pytest.mark.parametrize("missing", ["SLURM_JOB_ID", "SLURMD_NODENAME"])
def test_missing_slurm_variables_still_exit_zero(tree, missing):
    env = slurm_env(tree)
    del env[missing]
    proc = run_hook(tree, "prolog", env)
    assert proc.returncode == 0
    assert not (tree / "spool" / "node7" / "marks").exists() or not marks(tree)


def test_unwritable_spool_still_exits_zero(tree):
    (tree / "spool").write_text("a file where the folder should be")
    assert run_hook(tree, "prolog", slurm_env(tree)).returncode == 0
    assert run_hook(tree, "epilog", slurm_env(tree, SLURM_SCRIPT_CONTEXT="epilog_slurmd")).returncode == 0


def test_missing_collector_is_logged_and_exit_is_zero(tree):
    (tree / "sbin" / "acme-collectd").unlink()
    assert run_hook(tree, "prolog", slurm_env(tree)).returncode == 0
    log = (tree / "spool" / "node7" / "hooks.log").read_text()
    assert "acme-prolog[4242]" in log and "collector not started" in log


def test_prolog_and_epilog_are_one_shipped_file():
    hook = REPO / "slurm_acme" / "data" / "node" / "acme-hook"
    for rel in ("prolog/acme-prolog", "epilog/acme-epilog"):
        assert (REPO / rel).is_symlink() and (REPO / rel).resolve() == hook, rel


def check_run(tree: Path, env: dict[str, str]) -> dict[str, str]:
    """The hook's check mode: the config and spool it resolved (key=value lines)."""
    proc = subprocess.run([str(tree / "prolog" / "acme-prolog"), "check"], env=env, capture_output=True,
                          text=True, timeout=10, cwd="/", check=False)
    assert proc.returncode == 0 and proc.stderr == ""
    return dict(line.split("=", 1) for line in proc.stdout.splitlines())


@pytest.mark.parametrize("line", [
    "spool_dir = '{spool}'",
    'spool_dir = "{spool}"',
    "  spool_dir='{spool}'   # local disk, 'quoted' words",
    'spool_dir="{spool}"',
    "\tspool_dir\t=\t'{spool}'",
])
def test_spool_dir_in_either_quote_style_is_read_as_tomllib_reads_it(tree, line):
    spool = tree / "quoted spool"
    toml = ('[store]\nspool_dir = "/not/this"\n[telemetry]\nold_spool_dir = "/nor/this"\n'
            + line.replace("\\t", "\t").format(spool=spool) + '\n[telemetry.extra]\nspool_dir = "/not/that"\n')
    conf = tree / "etc" / "acme.toml"
    conf.write_text(toml)
    seen = check_run(tree, slurm_env(tree))
    assert seen["spool"] == str(spool)
    assert (spool / "node7" / "hook.check").exists() and not (spool / "node7" / "marks" / "0.0.check").exists()
    import tomllib
    assert tomllib.loads(toml)["telemetry"]["spool_dir"] == str(spool)


def test_check_mode_writes_no_mark_and_starts_nothing(tree):
    check_run(tree, slurm_env(tree))
    assert marks(tree) == {}
    assert not (tree / "started").exists()


@pytest.mark.parametrize("case", ["acme_conf", "beside_slurm_conf", "acme_conf_missing", "none"])
def test_the_hook_finds_the_config_slurm_acme_config_finds(tree, tmp_path, monkeypatch, case):
    """One search order: the shell hook and slurm_acme.config pick the same file."""
    from slurm_acme import config as cfg

    other = tmp_path / "other.toml"
    other.write_text(f"[telemetry]\nspool_dir = '{tmp_path}/other-spool'\n")
    env = slurm_env(tree)
    if case == "acme_conf":
        env["ACME_CONF"] = str(other)
    elif case == "acme_conf_missing":
        env["ACME_CONF"] = str(tmp_path / "missing.toml")
    elif case == "none":
        env["SLURM_CONF"] = str(tmp_path / "nowhere" / "slurm.conf")
    if Path("/etc/acme/acme.toml").exists() and case == "none":
        pytest.skip("this machine has a system /etc/acme/acme.toml")
    for key in ("ACME_CONF", "SLURM_CONF"):
        monkeypatch.delenv(key, raising=False)
        if key in env:
            monkeypatch.setenv(key, env[key])
    monkeypatch.setattr(cfg, "SYSTEM_CONFIG", Path("/etc/acme/acme.toml"))
    expected = cfg.find_config_path()
    seen = check_run(tree, env)
    assert seen["conf"] == (str(expected) if expected else "")
    if expected is not None and expected.exists():
        assert seen["spool"] == cfg.load_config().telemetry.spool_dir


def test_epilog_named_hook_without_context_writes_an_end_mark(tree):
    env = slurm_env(tree)
    del env["SLURM_SCRIPT_CONTEXT"]
    run_hook(tree, "epilog", env)
    assert set(marks(tree)) == {"4242.0.end"}


def test_hooks_are_posix_sh_without_syntax_errors():
    for rel in ("prolog/acme-prolog", "epilog/acme-epilog", "sbin/acme-collectd"):
        assert subprocess.run(["/bin/sh", "-n", str(REPO / rel)], check=False).returncode == 0, rel


@pytest.mark.parametrize("hook,kind", [("prolog", "start"), ("epilog", "end")])
def test_marks_the_hooks_write_are_read_back_by_the_collector(tree, hook, kind):
    """The mark version contract, writer to reader: what the real hook writes,
    the collector's reader parses into the same job, node, user, GPUs, exit code."""
    env = slurm_env(tree, SLURM_JOB_GPUS="1,3", SLURM_JOB_EXIT_CODE2="0:9",
                    SLURM_SCRIPT_CONTEXT=f"{hook}_slurmd")
    assert run_hook(tree, hook, env).returncode == 0
    path = tree / "spool" / "node7" / "marks" / f"4242.0.{kind}"
    assert json.loads(path.read_text())["v"] == MARK_VERSION
    mark = read_mark(path)
    assert (mark.kind, mark.job_id, mark.node, mark.user, mark.gpu_indices) == (
        kind, "4242", "node7", "alice", (1, 3))
    assert mark.exit_code == (137 if kind == "end" else None)
    assert mark.ts == pytest.approx(path.stat().st_mtime)


def test_64_hooks_at_once_with_no_collector_start_one(tree):
    """The fake collector never removes the start claim, as a real one still
    starting would not have yet: every other hook must leave the start to it."""
    env = slurm_env(tree)
    procs = [subprocess.Popen([str(tree / "epilog/acme-epilog")], cwd="/", env={**env, "SLURM_JOB_ID": str(5000 + i),
                              "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for i in range(64)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    run_hook_to_the_end(tree, "epilog", {**env, "SLURM_JOB_ID": "6000", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"})
    assert len(wait_started(tree)) == 1
    assert len(marks(tree)) == 65  # every hook still wrote its mark


def test_a_start_claim_older_than_a_minute_is_taken_over(tree):
    node_dir = tree / "spool" / "node7"
    node_dir.mkdir(parents=True)
    claim = node_dir / "collectd.starting"
    claim.write_text("")
    os.utime(claim, (time.time() - 120, time.time() - 120))  # a start that died two minutes ago
    run_hook_to_the_end(tree, "prolog", slurm_env(tree))
    assert len(wait_started(tree)) == 1


def test_a_fresh_start_claim_is_left_to_its_owner(tree):
    node_dir = tree / "spool" / "node7"
    node_dir.mkdir(parents=True)
    (node_dir / "collectd.starting").write_text("")
    run_hook_to_the_end(tree, "prolog", slurm_env(tree))
    assert not (tree / "started").exists()
