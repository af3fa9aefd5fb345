"""Deploying from the package (issue 21): wheel and sdist built, the wheel installed
into a fresh virtualenv outside the clone, ``sacme admin install --prefix`` into a
fresh folder, the local cluster's slurm.conf pointed at the installed hooks, real
jobs, then telemetry, ingest, the report and ``sacme admin check`` from the installed
tree with no file of the checkout on any path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from slurm_acme.admin.layout import NODE_FILES, Layout

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def run(argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 600,
        cwd: str | Path = "/") -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    """``make dist``'s build of this clone: one wheel and one sdist."""
    out = tmp_path_factory.mktemp("dist")
    proc = run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--sdist", "--outdir", out, REPO],
               cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,), (sdist,) = out.glob("*.whl"), out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_the_wheel_and_the_sdist_carry_every_node_file(dist):
    wheel_names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    with tarfile.open(dist["sdist"]) as tar:
        sdist_names = {"/".join(n.split("/")[1:]) for n in tar.getnames()}
    for name in NODE_FILES:
        assert f"slurm_acme/data/node/{name}" in wheel_names, name
        assert f"slurm_acme/data/node/{name}" in sdist_names, name
    assert "slurm_acme/admin/install.py" in wheel_names


def test_the_wheel_asks_for_torch_only_through_its_extra(dist):
    meta = zipfile.ZipFile(dist["wheel"]).read(
        next(n for n in zipfile.ZipFile(dist["wheel"]).namelist() if n.endswith("METADATA"))).decode()
    torch = [line for line in meta.splitlines() if line.startswith("Requires-Dist: torch")]
    assert torch and all('extra == "torch"' in line for line in torch), torch


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """A fresh virtualenv outside the clone with the wheel installed (not editable)."""
    folder = tmp_path_factory.mktemp("site") / "venv"
    assert REPO not in folder.parents
    base = getattr(sys, "_base_executable", sys.executable)
    proc = run([base, "-m", "venv", folder])
    assert proc.returncode == 0, proc.stderr
    proc = run([folder / "bin" / "pip", "install", "-q", "--no-compile", dist["wheel"]], env=clean_env(folder))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder


def clean_env(venv: Path, **extra: str) -> dict[str, str]:
    """An environment that names nothing of the clone: the venv's bin, the system's, Slurm's."""
    path = [str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]
    slurm_bin = Path(os.environ["SLURM_CONF"]).parent.parent / "bin" if "SLURM_CONF" in os.environ else None
    if slurm_bin and (slurm_bin / "sbatch").exists():  # a Slurm root's wrappers
        path.insert(0, str(slurm_bin))
    env = {"PATH": ":".join(path), "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    if "SLURM_CONF" in os.environ:
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    env.update(extra)
    for value in env.values():
        assert str(REPO) not in value, value
    return env


def test_the_installed_package_is_the_wheels_and_pulled_no_torch(venv):
    proc = run([venv / "bin" / "python", "-c", "import slurm_acme, sys; print(slurm_acme.__file__); print(sys.path)"],
               env=clean_env(venv))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(str(venv)) and str(REPO) not in proc.stdout
    listed = run([venv / "bin" / "pip", "list", "--format", "json"], env=clean_env(venv))
    assert "torch" not in {p["name"].lower() for p in json.loads(listed.stdout)}


@pytest.fixture(scope="module")
def installed(venv, slurm_cluster, tmp_path_factory):  # type: ignore[no-untyped-def]
    """`sacme admin install --prefix` into a fresh folder, the cluster's hooks pointed at it."""
    prefix = tmp_path_factory.mktemp("prefix")
    lay = Layout(prefix)
    lay.etc.mkdir(parents=True)
    # This site's config: the cluster's emulated GPUs, but a spool and a store of its own,
    # so what lands there came through the installed hooks and collectors only.
    lay.config.write_text("\n".join([
        "[store]", f"url = 'sqlite:///{prefix}/acme.db'",
        "[telemetry]", f"spool_dir = '{prefix}/spool'", "interval_s = 2", "flush_interval_s = 4",
        f"synthetic_gpus = {slurm_cluster.gpus_per_node}", ""]))
    proc = run([venv / "bin" / "sacme", "admin", "install", "--prefix", prefix], env=clean_env(venv))
    assert proc.returncode == 0, proc.stderr
    env = {**os.environ, "ACME_CLUSTER_DIR": str(slurm_cluster.dir), "ACME_CLUSTER_HOOKS_DIR": str(lay.libexec)}
    up = run([sys.executable, REPO / "sbin" / "acme-cluster", "up"], env=env, cwd=REPO)
    assert up.returncode == 0, up.stderr[-2000:]
    try:
        yield lay, proc.stdout
    finally:
        env.pop("ACME_CLUSTER_HOOKS_DIR")
        run([sys.executable, REPO / "sbin" / "acme-cluster", "up"], env=env, cwd=REPO)
        for pidfile in (prefix / "spool").glob("*/collectd.pid"):
            stop(pidfile)


def stop(pidfile: Path) -> None:
    """Stop a collector the installed hooks started (and wait until it is gone)."""
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError, IndexError):
        return
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)


def test_install_printed_the_slurm_conf_lines_it_needs(installed):
    lay, out = installed
    for line in lay.slurm_conf_lines():
        assert f"  {line}\n" in out


@pytest.fixture(scope="module")
def job(installed, wait_job, wait_accounted, tmp_path_factory):  # type: ignore[no-untyped-def]
    from slurm_acme.slurm import Slurm

    lay, _ = installed
    slurm = Slurm(timeout=60)
    config = slurm.show_config()
    assert (config["Prolog"], config["Epilog"]) == (str(lay.prolog), str(lay.epilog))
    workdir = tmp_path_factory.mktemp("deploy-job")
    job_id = slurm.sbatch(["-N", "2", "--gpus-per-node=2", "-J", "deploy probe", "-t", "3",
                           "-D", str(workdir), "-o", str(workdir / "out.txt")], "#!/bin/sh\nsleep 10\n")
    finished = wait_job(slurm, job_id, timeout=180)
    wait_accounted(slurm, [job_id])
    return job_id, finished


def site_env(venv: Path, lay: Layout) -> dict[str, str]:
    return clean_env(venv, ACME_CONF=str(lay.config))


def test_telemetry_ingest_and_report_run_from_the_installed_tree(venv, installed, job):
    lay, _ = installed
    job_id, finished = job
    assert finished.state.value == "COMPLETED"
    env = site_env(venv, lay)
    deadline = time.monotonic() + 120
    while True:
        proc = run([venv / "bin" / "sacme", "collectd", "summaries", job_id, "--json"], env=env, cwd=lay.prefix)
        summaries = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else []
        done = [s for s in summaries if "nodes_still_running" not in (s.get("flags") or "")]
        if done or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert done, f"no telemetry summary of job {job_id}: {proc.stdout} {proc.stderr}"
    for pidfile in (lay.prefix / "spool").glob("*/collectd.pid"):
        cmdline = Path(f"/proc/{pidfile.read_text().split()[0]}/cmdline").read_bytes().decode()
        assert cmdline.startswith(str(venv / "bin" / "python")) and str(REPO) not in cmdline
    ingest = run([venv / "bin" / "sacme", "ingest", "--since", "2h", "--json"], env=env, cwd=lay.prefix)
    assert ingest.returncode == 0, ingest.stderr
    report = run([venv / "bin" / "sacme", "report", "--since", "2000-01-01", "--format", "json"], env=env,
                 cwd=lay.prefix)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["overview"]["jobs"] >= 1


def admin_check(venv: Path, lay: Layout, node: str) -> tuple[int, dict, str]:
    proc = run([venv / "bin" / "sacme", "admin", "check", "--node", node, "--json"], env=site_env(venv, lay),
               cwd=lay.prefix, timeout=120)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def rows(report: dict) -> dict[str, dict]:
    return {r["name"]: r for r in report["checks"]}


def test_admin_check_passes_on_a_node_the_job_ran_on(venv, installed, job, slurm):
    lay, _ = installed
    node = slurm.show_hostnames(job[1].nodelist)[0]
    code, report, _ = admin_check(venv, lay, node)
    assert code == 0 and report["ok"], [r for r in report["checks"] if not r["ok"]]
    assert set(rows(report)) == {"prolog", "epilog", "prolog_flags", "collector", "spool", "samplers",
                                 "store", "clock"}


def test_admin_check_fails_when_the_collector_is_stopped(venv, installed, job, slurm):
    lay, _ = installed
    node = slurm.show_hostnames(job[1].nodelist)[-1]
    stop(lay.prefix / "spool" / node / "collectd.pid")
    code, report, err = admin_check(venv, lay, node)
    assert code == 1 and not report["ok"]
    row = rows(report)["collector"]
    assert row["status"] == "fail" and f"no collector runs for node {node}" in row["detail"]
    assert "systemctl start acme-collectd" in row["fix"] and "collector" in err


def test_admin_check_fails_when_the_hook_is_not_executable(venv, installed, job, slurm):
    lay, _ = installed
    node = slurm.show_hostnames(job[1].nodelist)[0]
    lay.prolog.chmod(0o644)
    try:
        code, report, _ = admin_check(venv, lay, node)
    finally:
        lay.prolog.chmod(0o755)
    assert code == 1
    row = rows(report)["prolog"]
    assert row["status"] == "fail" and f"{lay.prolog} is not executable" in row["detail"]
    assert row["fix"].startswith(f"chmod 0755 {lay.prolog}")
    assert rows(report)["epilog"]["status"] == "ok"
