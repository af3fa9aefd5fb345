"""Run untrusted generated programs (HumanEval/MBPP-style scoring) and survive them.

Layers, each enough for a different escape:

1. A fresh process in its own session, killed as a group at the wall-clock timeout.
2. Resource limits set inside the child before any user code runs: CPU seconds,
   address space, file size, open files, no core dumps, and ``RLIMIT_NPROC=0``
   so ``fork`` fails. Root ignores NPROC, so a root parent drops the child to
   ``nobody`` first.
3. No network: a new, empty network namespace (``unshare(CLONE_NEWNET)``) when
   the kernel lets us, and always an audit hook (PEP 578) that refuses socket
   creation, process creation (fork/exec/spawn/system/Popen), ``ctypes`` and
   opening any file outside the private temp dir and the Python installation.
4. A private temp dir (mode 0700) as cwd, HOME and TMPDIR, an empty environment,
   and ``python -I -S`` (no site, no user paths, no PYTHON* variables).

Audit hooks are not a security boundary by themselves (C extensions can skip
them), which is why the kernel-enforced limits and namespace sit under them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

NOBODY = 65534
CLONE_NEWNET = 0x40000000

#: Runs first in the child: limits, then the audit hook, then the program.
GUARD = r'''
import resource, sys, os
cpu, mem, fsize, audit = (int(v) for v in sys.argv[2:6])
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
program = os.path.abspath(sys.argv[1])
home = os.path.dirname(program)
allowed = tuple(p for p in {sys.base_prefix, sys.prefix, home} if p)
BLOCKED = ("os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
           "subprocess.Popen", "pty.spawn", "socket.", "ctypes.", "os.kill", "os.killpg",
           "signal.pthread_kill", "sys.remote_exec", "os.putenv", "os.chdir")
def _inside(path):
    try:
        real = os.path.realpath(path if isinstance(path, str) else os.fsdecode(path))
    except Exception:
        return False
    return any(real == p or real.startswith(p.rstrip("/") + "/") for p in allowed)
def _hook(event, args):
    if event.startswith(BLOCKED) or (event == "import" and args[0] in ("ctypes", "_ctypes")):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open" and args and not isinstance(args[0], int) and not _inside(args[0]):
        raise PermissionError(f"sandbox: opening {args[0]!r} is not allowed")
if audit:
    sys.addaudithook(_hook)
source = open(program).read()
del _hook
sys.argv = [program]
code = compile(source, program, "exec")
exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
'''


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0
    cpu_s: int = 5
    memory_mb: int = 1024
    file_mb: int = 8
    #: The audit-hook layer; tests turn it off to check the kernel layers alone.
    audit_hook: bool = True


@dataclass(frozen=True)
class SandboxResult:
    status: str  # "passed", "failed", "timeout", "killed"
    returncode: int | None
    elapsed_s: float
    stderr_tail: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _load_libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


#: Loaded in the parent so the child (between fork and exec) only makes a plain call.
_LIBC = _load_libc()


def _libc_unshare_net() -> bool:
    """Enter a new, empty network namespace (only loopback, and it is down)."""
    return _LIBC is not None and _LIBC.unshare(CLONE_NEWNET) == 0


def _drop_to_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _child_setup(limits: Limits, drop: bool) -> None:  # in the child between fork and exec
    os.setsid()
    _libc_unshare_net()
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if drop:
        _drop_to_nobody()


@functools.lru_cache(maxsize=1)
def sandbox_interpreter() -> tuple[str, bool]:
    """(python to run, whether to drop to ``nobody``).

    As root, RLIMIT_NPROC is not enforced, so the child must become ``nobody``;
    that needs a Python ``nobody`` may execute (a venv under /root is not), so
    the candidates are probed once. If none works the sandbox still runs, with
    the audit hook as the only guard against fork (logged).
    """
    if os.geteuid() != 0:
        return sys.executable, False
    for candidate in dict.fromkeys([sys.executable, shutil.which("python3") or "", "/usr/bin/python3"]):
        if not candidate:
            continue
        try:
            probe = subprocess.run([candidate, "-I", "-S", "-c", "import resource"], preexec_fn=_drop_to_nobody,
                                   capture_output=True, timeout=30, check=False, cwd="/")
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return candidate, True
    log.warning("sandbox: no Python runnable as nobody; fork is blocked by the audit hook only")
    return sys.executable, False


DEFAULT_LIMITS = Limits()


def run_program(source: str, limits: Limits = DEFAULT_LIMITS) -> SandboxResult:
    """Run ``source`` as ``__main__`` in the sandbox; exit 0 within the limits is a pass."""
    workdir = Path(tempfile.mkdtemp(prefix="acme-sandbox-"))
    try:
        program = workdir / "program.py"
        program.write_text(source, encoding="utf-8")
        guard = workdir / "guard.py"
        guard.write_text(GUARD, encoding="utf-8")
        python, drop = sandbox_interpreter()
        if drop:
            for path in (workdir, program, guard):
                os.chown(path, NOBODY, NOBODY)
        workdir.chmod(0o700)
        argv = [python, "-I", "-S", "-B", str(guard), str(program), str(limits.cpu_s),
                str(limits.memory_mb * 1024 * 1024), str(limits.file_mb * 1024 * 1024),
                str(int(limits.audit_hook))]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir), "LANG": "C.UTF-8"}
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                close_fds=True,
                                # Only syscalls run between fork and exec (no Python locks taken):
                                # unshare(2), setrlimit(2), setsid(2), set*id(2).
                                preexec_fn=lambda: _child_setup(limits, drop))
        try:
            _, err = proc.communicate(timeout=limits.timeout_s)
            status = None
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            _, err = proc.communicate()
            status = "timeout"
        elapsed = time.monotonic() - started
        code = proc.returncode
        if status is None:
            status = "passed" if code == 0 else ("killed" if code is not None and code < 0 else "failed")
        tail = err.decode("utf-8", "replace")[-500:] if err else ""
        return SandboxResult(status, code, elapsed, tail)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def code_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """HumanEval's layout: the prompt, the model's completion, the tests, the call."""
    return f"{prompt}{completion}\n\n{test}\n\ncheck({entry_point})\n"
