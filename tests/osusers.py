"""Real Unix users for access-control tests, and running the real CLI as them.

Users are created once, idempotently, by root (``useradd --system``), with names
no one else uses (``acme-sec-*``). A command runs as one of them through
``setpriv`` (uid, gid and supplementary groups switched by the kernel), so what
the code under test sees is real credentials, not an environment variable.

The project's venv may live where an ordinary user cannot reach (pyenv under
/root); the child then runs a system interpreter of the same Python version with
the venv's site-packages and the repository on its path.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_LOCK = "/run/lock/acme-sec-users.lock" if os.path.isdir("/run/lock") else "/tmp/acme-sec-users.lock"


@dataclass(frozen=True)
class OsUser:
    name: str
    uid: int
    gid: int
    groups: tuple[str, ...]


def ensure_group(name: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        subprocess.run(["groupadd", "--system", name], check=False, capture_output=True)
        return grp.getgrnam(name).gr_gid


def ensure_user(name: str, groups: tuple[str, ...] = ()) -> OsUser:
    """Create (once) a system user with its own group and the given extra groups."""
    assert os.geteuid() == 0, "creating test users needs root (make test runs as root)"
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for group in groups:
            ensure_group(group)
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                            "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
                           check=True, capture_output=True)
        for group in groups:
            members = grp.getgrnam(group).gr_mem
            if name not in members:
                subprocess.run(["usermod", "-a", "-G", group, name], check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    return OsUser(name, entry.pw_uid, entry.pw_gid, groups)


def _interpreter_for_others() -> tuple[str, list[str]]:
    """(python an unprivileged user can run, extra sys.path entries)."""
    here = os.path.realpath(sys.executable)
    candidates = [here, f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"]
    paths = [str(REPO), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    for python in candidates:
        probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python,
                                "-c", "pass"], capture_output=True, check=False, cwd="/")
        if probe.returncode == 0:
            return python, paths
    raise AssertionError(f"no Python {sys.version_info[:2]} runnable by an unprivileged user")


_BOOT = """
import site, sys
for p in {paths!r}:
    site.addsitedir(p)
sys.path.insert(0, {repo!r})
from slurm_acme.cli.main import run_cli, sacme
from slurm_acme.cli.seval import seval
cmd = seval if sys.argv[1] == "seval" else sacme
sys.exit(run_cli(cmd, sys.argv[1], sys.argv[2:]))
"""


def run_as(user: OsUser, prog: str, *args: str, env: dict[str, str] | None = None,
           cwd: str | os.PathLike[str] = "/", timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``sacme ARGS`` (or ``seval ARGS``) as ``user`` with the real CLI."""
    python, paths = _interpreter_for_others()
    boot = _BOOT.format(paths=paths, repo=str(REPO))
    base_env = {k: v for k, v in os.environ.items() if k not in ("ACME_CONF", "ACME_DB", "HOME", "USER",
                                                                 "LOGNAME", "XDG_DATA_HOME")}
    base_env.update({"HOME": "/nonexistent", "USER": user.name, "LOGNAME": user.name})
    return subprocess.run(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups",
                           python, "-c", boot, prog, *args], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=cwd, env={**base_env, **(env or {})})


def run_python_as(user: OsUser, code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a Python snippet as ``user`` (same interpreter resolution as :func:`run_as`)."""
    python, paths = _interpreter_for_others()
    boot = f"import site, sys\nfor p in {paths!r}:\n    site.addsitedir(p)\nsys.path.insert(0, {str(REPO)!r})\n"
    return subprocess.run(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups",
                           python, "-c", boot + code, *args], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd="/")
