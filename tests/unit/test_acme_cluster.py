"""sbin/acme-cluster's generated config (dry: `print-config` starts nothing)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "sbin" / "acme-cluster"


def print_config(*args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    out = subprocess.run([sys.executable, str(SCRIPT), "print-config", *args],
                         capture_output=True, text=True, check=True, timeout=30,
                         env={k: v for k, v in os.environ.items() if k != "ACME_CLUSTER_HOOKS_DIR"}
                         | (env or {})).stdout
    lines = [ln for ln in out.splitlines() if ln and not ln.startswith("#")]
    return {ln.split("=", 1)[0]: ln.split("=", 1)[1] for ln in lines}


def test_ports_and_paths_derive_from_port_base_and_dir(tmp_path):
    conf = print_config("--dir", str(tmp_path), "--port-base", "20000", "--nodes", "3", "--gpus", "2")
    assert conf["SlurmctldPort"] == "20017" and conf["AccountingStoragePort"] == "20019"
    assert "Port=[20101-20103]" in conf["NodeName"] and "Gres=gpu:2" in conf["NodeName"]
    assert conf["NodeName"].startswith("node[1-3] ")
    assert conf["SlurmdSpoolDir"] == f"{tmp_path}/spool/slurmd-%n"
    assert not (tmp_path / "etc").exists()


def test_hooks_are_the_repos_absolute_paths(tmp_path):
    conf = print_config("--dir", str(tmp_path))
    root = SCRIPT.parent.parent
    assert conf["Prolog"] == str(root / "prolog" / "acme-prolog")
    assert conf["Epilog"] == str(root / "epilog" / "acme-epilog")


def test_hooks_from_an_installed_folder_when_asked(tmp_path):
    conf = print_config("--dir", str(tmp_path), env={"ACME_CLUSTER_HOOKS_DIR": "/opt/x/libexec"})
    assert conf["Prolog"] == "/opt/x/libexec/acme-prolog" and conf["Epilog"] == "/opt/x/libexec/acme-epilog"


def test_settings_the_project_relies_on(tmp_path):
    conf = print_config("--dir", str(tmp_path))
    assert conf["AccountingStoreFlags"] == "job_comment"
    assert conf["AccountingStorageTRES"] == "gres/gpu"
    assert conf["JobRequeue"] == "1" and conf["PrologFlags"] == "Alloc"
    assert conf["SlurmdParameters"] == "config_overrides"
    assert int(conf["MinJobAge"]) >= 300 and int(conf["SlurmdTimeout"]) <= 20


def test_single_node_without_gpus_has_no_ranges(tmp_path):
    conf = print_config("--dir", str(tmp_path), "--nodes", "1", "--gpus", "0", "--port-base", "21000")
    assert conf["NodeName"].startswith("node1 ") and "Port=21101 " in conf["NodeName"]
    assert "Gres" not in conf["NodeName"]


def load_script():  # type: ignore[no-untyped-def]
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("acme_cluster", str(SCRIPT))
    spec = importlib.util.spec_from_loader("acme_cluster", loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules["acme_cluster"] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


def exec_finished(pid: int) -> bool:
    """True once /proc shows the exec'd program's command line and environment."""
    proc = Path(f"/proc/{pid}")
    return (proc / "cmdline").read_bytes().startswith(b"sleep\0") and b"SLURM_CONF=" in (
        proc / "environ"
    ).read_bytes()


def test_a_process_is_ours_only_if_it_names_our_folder(tmp_path):
    script = load_script()
    ours = tmp_path / "c"
    sibling = tmp_path / "c2"  # shares a prefix with ours
    proc = subprocess.Popen(["sleep", "30"], env={"SLURM_CONF": f"{ours}/etc/slurm.conf"})
    other = subprocess.Popen(["sleep", "30"], env={"SLURM_CONF": f"{sibling}/etc/slurm.conf"})
    try:
        # Popen returns once exec has begun; the kernel fills in the new program's
        # command line and environment a moment later, so wait for them first.
        for p in (proc, other):
            assert script.wait_until(lambda p=p: exec_finished(p.pid), timeout=10, interval=0.01)
        assert script.alive(proc.pid, "sleep", ours)
        assert not script.alive(proc.pid, "sleep", tmp_path / "other")
        assert not script.alive(proc.pid, "sleep", tmp_path / "c" / "etc" / "x")
        assert not script.alive(proc.pid, "sleep", Path(str(ours)[:-1] + "d"))
        assert not script.alive(proc.pid, "slurmd", ours)
        assert not script.alive(other.pid, "sleep", ours)
    finally:
        for p in (proc, other):
            p.kill()
            p.wait()
    assert not script.alive(proc.pid, "sleep", ours)


def test_gres_conf_points_at_one_file_per_gpu(tmp_path):
    script = load_script()
    spec = script.Spec(dir=tmp_path, nodes=2, gpus=8, cpus=4, memory_mb=1000, port_base=30000,
                       name="t")
    assert script.gres_conf(spec).splitlines()[1] == (
        f"NodeName=node[1-2] Name=gpu File={tmp_path}/gpu/nvidia[0-7]")


def _fake_collector(spool_dir: Path) -> subprocess.Popen:
    """A process whose command line looks like a node collector of that spool."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                             "collectd", "--node", "node1", "--spool-dir", str(spool_dir)])


def test_down_stops_this_clusters_collectors_and_only_those(tmp_path):
    ours = _fake_collector(tmp_path / "mine" / "spool" / "acme")
    theirs = _fake_collector(tmp_path / "other" / "spool" / "acme")
    try:
        subprocess.run([sys.executable, str(SCRIPT), "down", "--dir", str(tmp_path / "mine")],
                       capture_output=True, text=True, check=True, timeout=60)
        assert ours.wait(timeout=30) is not None
        assert theirs.poll() is None
    finally:
        for proc in (ours, theirs):
            proc.kill()
            proc.wait()


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_cgroup_conf_only_where_slurm_needs_it():
    script = load_script()
    assert script.cgroup_conf((22, 5)) is None
    assert "CgroupPlugin=disabled" in script.cgroup_conf((24, 11)).splitlines()


def fake_root(path: Path, commands=("sacct", "sbatch")) -> Path:
    """A folder that looks like a finished root to the script (no real system in it)."""
    (path / "usr" / "bin").mkdir(parents=True)
    for name in commands:
        (path / "usr" / "bin" / name).write_text("")
    (path / ".acme-slurm-root").write_text("recipe=1\n")
    return path


def test_wrappers_run_each_command_of_the_root_and_bind_the_clone(tmp_path):
    script = load_script()
    root = fake_root(tmp_path / "a root's 'dir'")
    spec = script.Spec(dir=tmp_path / "c", nodes=1, gpus=0, cpus=1, memory_mb=100, port_base=30000,
                       name="t", slurm_root=str(root))
    enter = script.write_wrappers(spec)
    assert sorted(p.name for p in spec.bin.iterdir()) == ["in-slurm-root", "sacct", "sbatch"]
    wrapper = (spec.bin / "sacct").read_text()
    assert "exec /usr/bin/sacct" in wrapper and str(enter) in wrapper
    text = enter.read_text()
    assert subprocess.run(["sh", "-n", str(enter)], check=False).returncode == 0
    [assign] = [line for line in text.splitlines() if line.startswith("r=")]
    shown = subprocess.run(["sh", "-c", f'{assign}; printf %s "$r"'], capture_output=True, text=True,
                           check=True).stdout
    assert shown == str(root)
    clone = str(SCRIPT.parent.parent)
    assert "mount --bind /tmp " in text
    # The clone is bound at its own path, unless /tmp's bind already shows it.
    assert (f"mount --bind {clone} " in text) is not clone.startswith("/tmp/")
    hosts = (spec.etc / "hosts").read_text().split()
    assert socket.gethostname().split(".")[0] in hosts


def test_up_refuses_a_root_that_is_not_finished(tmp_path):
    (tmp_path / "root").mkdir()
    proc = run_script("up", "--dir", str(tmp_path / "c"), "--slurm-root", str(tmp_path / "root"))
    assert proc.returncode == 1 and "not a finished Slurm root" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_up_refuses_to_switch_a_folder_to_another_slurm(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "cluster.json").write_text('{"nodes": 1, "gpus": 0, "slurm_root": ""}')
    root = fake_root(tmp_path / "root")
    proc = run_script("up", "--dir", str(folder), "--slurm-root", str(root))
    assert proc.returncode == 1 and "down --purge" in proc.stderr
    assert not (folder / "bin").exists()


def test_env_of_a_root_cluster_puts_its_wrappers_first(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "cluster.json").write_text('{"nodes": 1, "gpus": 0, "slurm_root": "/r"}')
    out = run_script("env", "--dir", str(folder)).stdout.splitlines()
    assert out == [f"export SLURM_CONF={folder}/etc/slurm.conf", f'export PATH={folder}/bin:"$PATH"']
    (folder / "cluster.json").write_text('{"nodes": 1, "gpus": 0}')
    assert run_script("env", "--dir", str(folder)).stdout.splitlines() == [
        f"export SLURM_CONF={folder}/etc/slurm.conf"]


def test_a_daemon_that_sees_another_copy_of_the_clone_is_told_apart(tmp_path):
    script = load_script()
    assert script.sees_this_clone(os.getpid())
    assert not script.sees_this_clone(None)
    # A process whose mount namespace has another folder at the clone's path (as a
    # root's daemon has after the clone was made again at the same path).
    other = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                              'mount --bind "$0" "$1" && touch "$0/ready" && exec sleep 60',
                              str(tmp_path), str(script.REPO)])
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ready").exists():
            assert other.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert not script.sees_this_clone(other.pid)
    finally:
        other.kill()
        other.wait()
