"""Run untrusted generated programs (HumanEval/MBPP-style scoring) under OS isolation.

Model-generated code is hostile, and an in-process check is no boundary (a
program can rewrite the globals an audit hook reads, or swap its ``__code__``
found through ``gc``). The boundary here is the kernel, set up by bubblewrap:

1. **An unprivileged uid.** A scorer running as root first becomes ``nobody``
   (65534), *then* bubblewrap creates the namespaces; a user namespace made by
   root maps the sandbox back to root outside (it could read /etc/shadow). A
   scorer that already runs as a normal user (a Slurm job) keeps its uid.
2. **A mount namespace holding only the interpreter**: its binary, the
   directories of the shared libraries it maps, its standard library (with any
   site-packages masked), ``/etc/ld.so.cache``, a minimal ``/dev``, and a
   private size-capped tmpfs ``/sandbox`` as cwd, HOME and TMPDIR. No home
   directories, no /tmp, /run, /var/run, /dev/shm, store or checkpoint paths,
   hence no filesystem socket (munge, Postgres) to connect to.
3. **New network, pid, ipc, uts and user namespaces**: no reachable TCP or
   abstract unix socket; no other process to see or signal.
4. **rlimits** set before any user code runs (CPU seconds, address space, file
   size, open files, no core dumps, ``RLIMIT_NPROC=0`` so ``fork`` fails), and a
   wall-clock limit that kills the whole tree (bubblewrap's process group; the
   pid namespace dies with it, ``--die-with-parent`` covers a dead scorer).
5. **Bounded output**: stdout and stderr are read in chunks and only the last
   :data:`OUTPUT_CAP` bytes of each are kept, so a flood cannot grow the scorer.

The PEP 578 audit hook stays inside as defence in depth only. Where bubblewrap
or unprivileged user namespaces are missing, :func:`run_program` refuses with
:class:`SandboxUnavailable` unless ``evaluate.allow_unsandboxed_code`` is set
(then only the rlimits, the timeout, the output cap and the hook remain).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from slurm_acme.errors import AcmeError

log = logging.getLogger(__name__)

NOBODY = 65534
#: Bytes of each of stdout/stderr kept (the newest ones); the rest is read and dropped.
OUTPUT_CAP = 1 << 20
#: Where the program, the guard and the scratch space live inside the sandbox.
INSIDE = "/sandbox"
#: The acme.toml setting that lets code run without OS isolation (named in errors).
UNSANDBOXED_SETTING = "evaluate.allow_unsandboxed_code"

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
def _make_hook(allowed, blocked):
    def _inside(path):
        try:
            real = os.path.realpath(path if isinstance(path, str) else os.fsdecode(path))
        except Exception:
            return False
        return any(real == p or real.startswith(p.rstrip("/") + "/") for p in allowed)
    def _hook(event, args):
        if event.startswith(blocked) or (event == "import" and args[0] in ("ctypes", "_ctypes")):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open" and args and not isinstance(args[0], int) and not _inside(args[0]):
            raise PermissionError(f"sandbox: opening {args[0]!r} is not allowed")
    return _hook
if audit:
    sys.addaudithook(_make_hook(
        tuple(p for p in {sys.base_prefix, sys.prefix, os.path.dirname(program)} if p),
        ("os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
         "subprocess.Popen", "pty.spawn", "socket.", "ctypes.", "os.kill", "os.killpg",
         "signal.pthread_kill", "sys.remote_exec", "os.putenv", "os.chdir")))
del _make_hook
with open(program) as f:
    source = f.read()
sys.argv = [program]
code = compile(source, program, "exec")
exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
'''

#: Run (trusted, unsandboxed, as the sandbox uid) to learn what an interpreter needs.
_QUERY = r'''
import json, os, sys, sysconfig
for name in ("_ssl", "_hashlib", "_sqlite3", "_ctypes", "_decimal", "zlib", "_bz2", "_lzma",
             "_json", "math", "_datetime", "array", "select", "_socket", "unicodedata", "_struct",
             "binascii", "_random", "_bisect", "_heapq", "_pickle", "pyexpat", "_uuid", "_statistics",
             "_posixsubprocess", "_multiprocessing", "_queue", "_contextvars", "_csv", "_opcode"):
    try:
        __import__(name)
    except Exception:
        pass
maps = set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            maps.add(parts[5].strip())
paths = sysconfig.get_paths()
print(json.dumps({"executable": os.path.realpath(sys.executable), "maps": sorted(maps),
                  "stdlib": sorted({paths["stdlib"], paths["platstdlib"]}),
                  "site": sorted({paths["purelib"], paths["platlib"]})}))
'''


class SandboxUnavailable(AcmeError):
    """Generated code cannot run under OS isolation here (and the site did not allow
    running it without)."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0
    cpu_s: int = 5
    memory_mb: int = 1024
    file_mb: int = 8
    #: Size of the private writable tmpfs the program runs in.
    scratch_mb: int = 32
    #: The in-process audit hook (defence in depth); tests turn it off to check the OS layers.
    audit_hook: bool = True
    #: Run without OS isolation where bubblewrap/user namespaces are missing
    #: (``evaluate.allow_unsandboxed_code``); otherwise such a run is refused.
    allow_unsandboxed: bool = False


@dataclass(frozen=True)
class SandboxResult:
    status: str  # "passed", "failed", "timeout", "killed"
    returncode: int | None
    elapsed_s: float
    stderr_tail: str
    #: The last bytes of stdout (at most OUTPUT_CAP), decoded.
    stdout_tail: str = ""
    #: Bytes the program wrote to stdout and stderr together (kept or dropped).
    output_bytes: int = 0
    #: Whether the OS layers (namespaces, unprivileged uid) were in place.
    isolated: bool = True

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass(frozen=True)
class SandboxProfile:
    """How to start the sandbox here: found once per process by :func:`sandbox_profile`."""

    python: str
    #: bubblewrap's arguments up to (not including) the command; empty when unisolated.
    bwrap: tuple[str, ...]
    #: uid/gid the sandbox runs as (None: keep the caller's).
    uid: int | None
    #: Why OS isolation is unavailable (empty when it is available).
    unavailable: str = ""


# ----------------------------------------------------------------- profile

def _sandbox_uid() -> int | None:
    """Root drops to ``nobody`` before any namespace exists; anyone else stays."""
    return NOBODY if os.geteuid() == 0 else None


def _as_uid(uid: int | None) -> dict[str, object]:
    """``Popen`` keywords that switch to ``uid`` in the child (C code, no preexec_fn)."""
    if uid is None:
        return {}
    return {"user": uid, "group": uid, "extra_groups": []}


def _elf_interpreter(path: str) -> str | None:
    """The dynamic loader an ELF executable names (PT_INTERP), e.g. /lib64/ld-linux-x86-64.so.2."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only; others get the maps' dirs
                return None
            order = "<" if head[5] == 1 else ">"
            phoff, = struct.unpack(order + "Q", head[32:40])
            phentsize, phnum = struct.unpack(order + "HH", head[54:58])
            for i in range(phnum):
                f.seek(phoff + i * phentsize)
                p_type, _flags, offset, _va, _pa, size = struct.unpack(order + "IIQQQQ", f.read(40))
                if p_type == 3:  # PT_INTERP
                    f.seek(offset)
                    return f.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def _resolve(path: str, links: list[tuple[str, str]], depth: int = 0) -> str:
    """The real path of ``path``; every symlink met on the way is appended to ``links``
    as (where, target), so the sandbox can recreate the chain."""
    current = "/"
    for part in Path(path).parts[1:]:
        candidate = os.path.join(current, part)
        if os.path.islink(candidate) and depth < 16:
            target = os.readlink(candidate)
            links.append((candidate, target))
            current = _resolve(os.path.normpath(os.path.join(current, target)), links, depth + 1)
        else:
            current = candidate
    return current


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _mount_args(paths: list[str], masks: list[str]) -> list[str]:
    """bubblewrap arguments that expose ``paths`` read-only at the same place (the
    symlinks leading to them recreated) and hide ``masks`` under empty tmpfs mounts."""
    links: list[tuple[str, str]] = []
    reals = {_resolve(p, links) for p in paths}
    reals = {r for r in reals if os.path.exists(r)}
    bound = sorted((r for r in reals if not _under(r, reals - {r})), key=lambda p: (p.count("/"), p))
    args: list[str] = []
    for real in bound:
        args += ["--ro-bind", real, real]
    for where, target in dict.fromkeys(links):
        if not _under(where, bound):
            args += ["--symlink", target, where]
    for mask in masks:
        if os.path.isdir(mask) and _under(mask, bound):
            args += ["--tmpfs", mask]
    return args


def _interpreter_needs(python: str, uid: int | None) -> tuple[list[str], list[str]] | None:
    """(paths to expose, site-packages to mask) for ``python``, asked of it as ``uid``."""
    try:
        probe = subprocess.run([python, "-I", "-S", "-c", _QUERY], capture_output=True, text=True,
                               timeout=60, check=False, cwd="/", env=_child_env("/"),
                               **_as_uid(uid))  # type: ignore[call-overload]
        info = json.loads(probe.stdout) if probe.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not info:
        return None
    executable = info["executable"]
    binds = [executable, *info["stdlib"]]
    for mapped in info["maps"]:
        if os.path.realpath(mapped) != executable and not mapped.startswith(("/proc", "/dev", "/memfd")):
            binds.append(os.path.dirname(mapped))
    loader = _elf_interpreter(executable)
    if loader:
        binds.append(loader)
    if os.path.exists("/etc/ld.so.cache"):
        binds.append("/etc/ld.so.cache")
    return binds, list(info["site"])


def _bwrap_base(binds: list[str], masks: list[str], bwrap: str) -> list[str]:
    return [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--hostname", "sandbox", "--clearenv",
            *_mount_args(binds, masks), "--dev", "/dev"]


def _interpreter_candidates() -> list[str]:
    found = [getattr(sys, "_base_executable", "") or sys.executable, sys.executable,
             shutil.which("python3") or "", "/usr/bin/python3"]
    return [p for p in dict.fromkeys(os.path.realpath(f) for f in found if f) if os.path.exists(p)]


@functools.lru_cache(maxsize=1)
def sandbox_profile() -> SandboxProfile:
    """Find, once, an interpreter the sandbox uid can run and check bubblewrap works with it.

    The caller's own interpreter comes first; as root it usually lives where
    ``nobody`` cannot reach (a venv or pyenv under /root), so the system Python is
    tried next. A probe runs a real sandboxed ``python -c pass``: user namespaces
    forbidden by the kernel or a missing ``bwrap`` show up here, once.
    """
    uid = _sandbox_uid()
    bwrap = shutil.which("bwrap")
    reasons: list[str] = []
    fallback = None
    for python in _interpreter_candidates():
        needs = _interpreter_needs(python, uid)
        if needs is None:
            reasons.append(f"{python} is not runnable as uid {uid if uid is not None else os.getuid()}")
            continue
        fallback = fallback or python
        if bwrap is None:
            break
        base = _bwrap_base(*needs, bwrap)
        try:
            probe = subprocess.run([*base, "--", python, "-I", "-S", "-c", "pass"], capture_output=True,
                                   text=True, timeout=60, check=False, cwd="/", **_as_uid(uid))  # type: ignore[call-overload]
        except (OSError, subprocess.SubprocessError) as exc:
            reasons.append(f"bwrap failed to start: {exc}")
            continue
        if probe.returncode == 0:
            return SandboxProfile(python=python, bwrap=tuple(base), uid=uid)
        first = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
        reasons.append(f"bwrap: {first}")
    if bwrap is None:
        reasons.insert(0, "bubblewrap (bwrap) is not installed")
    return SandboxProfile(python=fallback or sys.executable, bwrap=(), uid=uid,
                          unavailable="; ".join(reasons) or "no usable Python interpreter")


def _site_allows_unsandboxed() -> bool:
    from slurm_acme.config import system_config

    return system_config().evaluate.allow_unsandboxed_code


def require_sandbox(limits: Limits | None = None) -> SandboxProfile:
    """The profile, or :class:`SandboxUnavailable` naming the setting that would allow
    running generated code without OS isolation. Call it before planning code datasets."""
    profile = sandbox_profile()
    if profile.unavailable and not (limits and limits.allow_unsandboxed) and not _site_allows_unsandboxed():
        raise SandboxUnavailable(
            f"code execution needs OS isolation, which is unavailable here ({profile.unavailable}); "
            f"install bubblewrap and allow unprivileged user namespaces, or set "
            f"{UNSANDBOXED_SETTING} = true in /etc/acme/acme.toml to run generated code without it")
    return profile


# ----------------------------------------------------------------- running

def _child_env(home: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}


def _memfd(name: str, data: str) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data.encode("utf-8"))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class _Tail:
    """The newest ``cap`` bytes of a stream, and how many bytes went by."""

    def __init__(self, cap: int = OUTPUT_CAP) -> None:
        self.cap, self.total, self.kept = cap, 0, 0
        self.chunks: deque[bytes] = deque()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.chunks.append(chunk)
        self.kept += len(chunk)
        while self.kept - len(self.chunks[0]) >= self.cap:
            self.kept -= len(self.chunks.popleft())

    def text(self, last: int | None = None) -> str:
        data = b"".join(self.chunks)[-(last or self.cap):]
        return data.decode("utf-8", "replace")


def _pump(proc: subprocess.Popen[bytes], deadline: float, info_fd: int | None,
          on_info: Callable[[bytes], None]) -> tuple[_Tail, _Tail, bool]:
    """Read stdout and stderr in chunks until both close or the deadline passes;
    bubblewrap's ``--info-fd`` JSON (its child's pid) goes to ``on_info``."""
    out, err = _Tail(), _Tail()
    info = bytearray()
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    if info_fd is not None:
        sel.register(info_fd, selectors.EVENT_READ, info)
    timed_out = False
    try:
        while any(key.data is not info for key in sel.get_map().values()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(remaining, 1.0)):
                chunk = os.read(key.fd, 65536)
                if key.data is info:
                    info.extend(chunk)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        on_info(bytes(info))
                elif chunk:
                    key.data.add(chunk)
                else:
                    sel.unregister(key.fileobj)
    finally:
        sel.close()
    return out, err, timed_out


class _Tree:
    """The sandbox's process tree: bubblewrap's process group, and the init of its pid
    namespace (held by a pidfd), whose death takes every process inside with it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pidfd: int | None = None

    def learn(self, info: bytes) -> None:
        try:
            pid = int(json.loads(info.decode() or "{}").get("child-pid", 0))
            if pid > 0:
                self.pidfd = os.pidfd_open(pid)
        except (ValueError, OSError, AttributeError):
            self.pidfd = None

    def kill(self) -> None:
        """SIGKILL everything and return once the namespace's init is gone."""
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            with selectors.DefaultSelector() as sel:
                sel.register(self.pidfd, selectors.EVENT_READ)
                sel.select(timeout=30)
            os.close(self.pidfd)
            self.pidfd = None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


DEFAULT_LIMITS = Limits()


def run_program(source: str, limits: Limits = DEFAULT_LIMITS) -> SandboxResult:
    """Run ``source`` as ``__main__`` in the sandbox; exit 0 within the limits is a pass.

    Raises :class:`SandboxUnavailable` where OS isolation cannot be had and
    ``limits.allow_unsandboxed`` is false.
    """
    profile = require_sandbox(limits)
    program_fd, guard_fd = _memfd("program.py", source), _memfd("guard.py", GUARD)
    workdir = None
    info_r = info_w = None
    try:
        guard_args = [str(limits.cpu_s), str(limits.memory_mb << 20), str(limits.file_mb << 20),
                      str(int(limits.audit_hook))]
        if profile.bwrap:
            home = INSIDE
            info_r, info_w = os.pipe()
            argv = [*profile.bwrap, "--info-fd", str(info_w), "--size", str(limits.scratch_mb << 20), "--tmpfs", INSIDE,
                    "--perms", "0400", "--file", str(guard_fd), f"{INSIDE}/guard.py",
                    "--perms", "0600", "--file", str(program_fd), f"{INSIDE}/program.py",
                    "--chdir", INSIDE, *[a for k, v in _child_env(home).items() for a in ("--setenv", k, v)],
                    "--", profile.python, "-I", "-S", "-B", f"{INSIDE}/guard.py", f"{INSIDE}/program.py",
                    *guard_args]
            cwd = "/"
        else:  # allowed by the site: limits, timeout, output cap and the audit hook only
            workdir = tempfile.mkdtemp(prefix="acme-sandbox-")
            home = workdir
            shutil.copyfile(f"/proc/self/fd/{program_fd}", f"{workdir}/program.py")
            shutil.copyfile(f"/proc/self/fd/{guard_fd}", f"{workdir}/guard.py")
            if profile.uid is not None:
                for name in ("", "program.py", "guard.py"):
                    os.chown(os.path.join(workdir, name), profile.uid, profile.uid)
            argv = [profile.python, "-I", "-S", "-B", f"{workdir}/guard.py", f"{workdir}/program.py",
                    *guard_args]
            cwd = workdir
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, env=_child_env(home), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True,
                                pass_fds=tuple(fd for fd in (program_fd, guard_fd, info_w) if fd is not None),
                                start_new_session=True, **_as_uid(profile.uid))  # type: ignore[call-overload]
        if info_w is not None:
            os.close(info_w)
            info_w = None
        tree = _Tree(proc)
        try:
            out, err, timed_out = _pump(proc, started + limits.timeout_s, info_r, tree.learn)
        finally:
            tree.kill()  # whatever is left of the tree, on every path
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            proc.wait()
        elapsed = time.monotonic() - started
        code = proc.returncode
        if timed_out:
            status = "timeout"
        else:
            status = "passed" if code == 0 else ("killed" if code < 0 or code > 128 else "failed")
        return SandboxResult(status, code, elapsed, err.text(500), out.text(), out.total + err.total,
                             isolated=bool(profile.bwrap))
    finally:
        for fd in (program_fd, guard_fd, info_r, info_w):
            if fd is not None:
                os.close(fd)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def code_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """HumanEval's layout: the prompt, the model's completion, the tests, the call."""
    return f"{prompt}{completion}\n\n{test}\n\ncheck({entry_point})\n"
