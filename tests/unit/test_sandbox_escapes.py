"""Generated programs that attack the code-execution sandbox do no harm.

Every attack first defeats the in-process audit hook (swapping its code,
found through ``gc``) so what is tested is the OS layer; a control test
proves the defeat works. Each test asserts the harm itself did not happen:
the file is absent, the listener got no connection, the secret is not in
the output, the scorer's memory stayed small.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from slurm_acme.evaluate import sandbox
from slurm_acme.evaluate.sandbox import (
    OUTPUT_CAP,
    Limits,
    SandboxUnavailable,
    code_program,
    run_program,
    sandbox_profile,
)

#: Replaces the code of every audit hook the guard installed with a no-op.
DEFEAT_HOOK = '''
import gc, sys
def _disarm():
    n = 0
    for f in [o for o in gc.get_objects() if type(o).__name__ == "function" and o.__name__ == "_hook"]:
        names = f.__code__.co_freevars
        body = "(" + ", ".join(names) + ",)" if names else "None"
        src = ("def outer():\\n" + "".join(f"    {v} = None\\n" for v in names)
               + f"    def _hook(event, args):\\n        {body}\\n        return None\\n    return _hook\\n")
        ns = {}
        exec(src, ns)
        f.__code__ = ns["outer"]().__code__
        n += 1
    return n
print("DISARMED", _disarm(), flush=True)
'''

HOOK_ON = Limits(timeout_s=30)
HOOK_OFF = Limits(timeout_s=30, audit_hook=False)
LAYERS = pytest.mark.parametrize("limits", [HOOK_ON, HOOK_OFF], ids=["hook-defeated", "hook-off"])


def attack(body: str, limits: Limits = HOOK_ON) -> sandbox.SandboxResult:
    return run_program(DEFEAT_HOOK + body, limits)


@pytest.fixture(autouse=True)
def _needs_isolation():
    profile = sandbox_profile()
    assert not profile.unavailable, profile.unavailable  # the OS layer is what these tests test


def test_the_hook_defeat_works_so_the_os_layer_is_what_is_tested():
    result = attack("import ctypes\nopen('/sandbox/../etc/ld.so.cache', 'rb').read(1)\nprint('FREE')\n")
    assert "DISARMED 1" in result.stdout_tail
    assert "FREE" in result.stdout_tail, result.stderr_tail


def test_without_defeat_the_hook_still_refuses_ctypes():
    result = run_program("import ctypes\n", HOOK_ON)
    assert result.status == "failed"
    assert "not allowed" in result.stderr_tail


def test_a_correct_program_passes():
    program = code_program("def add(a, b):\n", "    return a + b\n",
                           "def check(candidate):\n    assert candidate(2, 3) == 5\n", "add")
    result = run_program(program)
    assert result.passed and result.isolated


def test_a_wrong_program_fails():
    program = code_program("def add(a, b):\n", "    return a - b\n",
                           "def check(candidate):\n    assert candidate(2, 3) == 5\n", "add")
    result = run_program(program)
    assert result.status == "failed"
    assert "AssertionError" in result.stderr_tail


def test_common_stdlib_modules_work_inside():
    result = run_program("import json, hashlib, sqlite3, decimal, re, math, collections, itertools\n"
                         "print(hashlib.sha256(b'x').hexdigest()[:8])\n")
    assert result.passed, result.stderr_tail
    assert "2d711642" in result.stdout_tail


# ------------------------------------------------------------ files

READ_ATTEMPTS = '''
import os
for path in {paths!r}:
    try:
        with open(path, "rb") as f:
            print("READ", path, f.read(200), flush=True)
    except OSError as exc:
        print("DENIED", path, type(exc).__name__, flush=True)
'''


@LAYERS
def test_secrets_and_system_files_are_not_readable(tmp_path, limits):
    world = Path("/tmp") / f"acme-sec-world-{uuid.uuid4().hex}"
    world.write_text("WORLD-READABLE-SECRET")
    world.chmod(0o644)
    private = tmp_path / "private.txt"
    private.write_text("PRIVATE-SECRET")
    home_file = Path.home() / ".bash_history"
    try:
        paths = ["/etc/shadow", "/etc/passwd", "/proc/1/cmdline", "/proc/self/environ", str(world),
                 str(private), str(home_file), "/run/munge/munge.socket.2", "/var/run/postgresql",
                 "/var/lib/postgresql", str(Path(sys.prefix) / "pyvenv.cfg")]
        result = attack(READ_ATTEMPTS.format(paths=paths), limits)
    finally:
        world.unlink()
    assert "DENIED /etc/shadow" in result.stdout_tail, result.stderr_tail
    assert "READ" not in result.stdout_tail
    for secret in ("WORLD-READABLE-SECRET", "PRIVATE-SECRET", "root:"):
        assert secret not in result.stdout_tail + result.stderr_tail


@LAYERS
def test_nothing_is_written_outside_the_private_scratch(tmp_path, limits):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # writable by anyone who can see it
    tag = uuid.uuid4().hex
    targets = [f"/tmp/acme-sec-{tag}", f"/dev/shm/acme-sec-{tag}", f"/var/tmp/acme-sec-{tag}",
               f"/run/acme-sec-{tag}", str(Path.home() / f"acme-sec-{tag}"), str(open_dir / tag)]
    body = "".join(f"try:\n    open({t!r}, 'w').write('x')\nexcept OSError:\n    pass\n" for t in targets)
    result = attack(body + "open('scratch-ok', 'w').write('x')\nprint('WROTE-SCRATCH')\n", limits)
    assert "WROTE-SCRATCH" in result.stdout_tail, result.stderr_tail
    for target in targets:
        assert not Path(target).exists(), target
    assert list(open_dir.iterdir()) == []


def test_the_scratch_is_gone_after_the_run():
    tag = uuid.uuid4().hex
    attack(f"open('/sandbox/{tag}', 'w').write('x')\n")
    assert not any(tag in p.name for p in Path("/tmp").iterdir())


def test_the_sandbox_runs_unprivileged_without_capabilities():
    """Root's user namespace would map the sandbox back to root: the uid must be dropped first."""
    limits = Limits(timeout_s=60, cpu_s=73, memory_mb=777)
    marker = f"/sandbox/guard.py /sandbox/program.py 73 {777 << 20}"
    found: dict[str, str] = {}
    done = threading.Event()
    result_box: list[sandbox.SandboxResult] = []

    def run() -> None:
        result_box.append(attack("import time\nprint('UP', flush=True)\ntime.sleep(600)\n", limits))
        done.set()

    def scan() -> None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                if marker in cmd and "bwrap" not in cmd:
                    found[pid] = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue

    thread = threading.Thread(target=run)
    thread.start()
    while not found and not done.is_set():
        scan()
        done.wait(0.05)
    assert found, "the sandboxed program was never seen running"
    for pid in found:  # end the wait early: kill it the way the timeout would
        os.kill(int(pid), 9)
    thread.join()
    for status in found.values():
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        caps = next(line for line in status.splitlines() if line.startswith("CapEff:")).split()[1]
        assert "0" not in uids, uids
        assert int(caps, 16) == 0
    for pid in found:
        assert not Path(f"/proc/{pid}").exists() or marker not in Path(f"/proc/{pid}/cmdline").read_text()


def test_wall_clock_timeout_kills_the_whole_tree():
    limits = Limits(timeout_s=2, cpu_s=71, memory_mb=555)
    marker = f"/sandbox/guard.py /sandbox/program.py 71 {555 << 20}"
    result = attack("import time\ntime.sleep(600)\n", limits)
    assert result.status == "timeout"
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode():
                alive.append(pid)
        except OSError:
            continue
    assert alive == []


# ------------------------------------------------------------ network

class _Listeners:
    """A unix socket in /tmp (world-connectable), an abstract one, and TCP on 127.0.0.1."""

    def __init__(self, tmp: Path) -> None:
        self.path = f"/tmp/acme-sec-{uuid.uuid4().hex[:12]}.sock"
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(self.path)
        os.chmod(self.path, 0o777)
        self.abstract_name = f"\0acme-sec-{uuid.uuid4().hex[:12]}"
        self.abstract = socket.socket(socket.AF_UNIX)
        self.abstract.bind(self.abstract_name)
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        for s in (self.unix, self.abstract, self.tcp):
            s.listen(8)
            s.setblocking(False)

    def connections(self) -> int:
        """Connections queued or accepted: a connect() completes in the backlog."""
        count = 0
        for s in (self.unix, self.abstract, self.tcp):
            while True:
                try:
                    conn, _ = s.accept()
                except BlockingIOError:
                    break
                conn.close()
                count += 1
        return count

    def close(self) -> None:
        for s in (self.unix, self.abstract, self.tcp):
            s.close()
        os.unlink(self.path)


@LAYERS
def test_no_socket_reaches_a_listener(tmp_path, limits):
    listeners = _Listeners(tmp_path)
    try:
        body = f'''
import socket
targets = [(socket.AF_UNIX, {listeners.path!r}), (socket.AF_UNIX, {listeners.abstract_name!r}),
           (socket.AF_INET, ("127.0.0.1", {listeners.port})), (socket.AF_INET, ("127.0.0.1", 5432)),
           (socket.AF_UNIX, "/run/munge/munge.socket.2"),
           (socket.AF_UNIX, "/var/run/postgresql/.s.PGSQL.5432")]
for family, addr in targets:
    try:
        s = socket.socket(family)
        s.settimeout(3)
        s.connect(addr)
        s.sendall(b"leak")
        print("CONNECTED", addr, flush=True)
    except OSError as exc:
        print("REFUSED", addr, type(exc).__name__, flush=True)
'''
        result = attack(body, limits)
        assert result.stdout_tail.count("REFUSED") == 6, result.stdout_tail + result.stderr_tail
        assert listeners.connections() == 0
    finally:
        listeners.close()


def test_ctypes_cannot_make_a_new_user_namespace_or_mount():
    body = '''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("UNSHARE", libc.unshare(0x10000000), flush=True)   # CLONE_NEWUSER
print("MOUNT", libc.mount(b"none", b"/sandbox", b"tmpfs", 0, None), flush=True)
'''
    result = attack(body)
    assert "UNSHARE -1" in result.stdout_tail, result.stdout_tail + result.stderr_tail
    assert "MOUNT -1" in result.stdout_tail


# ------------------------------------------------------------ resources

@LAYERS
def test_fork_fails_even_with_the_hook_defeated(limits):
    result = attack("import os\ntry:\n    os.fork()\n    print('FORKED', flush=True)\n"
                    "except OSError as e:\n    print('NOFORK', e.errno, flush=True)\n", limits)
    assert "NOFORK" in result.stdout_tail, result.stdout_tail + result.stderr_tail
    assert "FORKED" not in result.stdout_tail


def test_fork_bomb_ends_within_the_limits():
    result = attack("import os\nwhile True:\n    os.fork()\n", Limits(timeout_s=30))
    assert result.status == "failed"


def test_there_is_no_shell_to_exec():
    result = attack("import os\nos.execv('/bin/sh', ['sh', '-c', 'echo SHELL'])\n")
    assert result.status == "failed"
    assert "SHELL" not in result.stdout_tail


def test_infinite_loop_is_stopped_by_the_cpu_limit():
    result = attack("while True:\n    pass\n", Limits(timeout_s=120, cpu_s=1))
    assert result.status == "killed"


def test_memory_bomb_fails():
    assert attack("x = bytearray(10 ** 10)\n").status == "failed"


def test_huge_file_write_fails():
    result = attack("open('big', 'wb').write(b'x' * (64 * 2 ** 20))\n", Limits(file_mb=1))
    assert result.status in {"failed", "killed"}


def test_filling_the_scratch_with_many_files_stops_at_its_size():
    body = ("import os\nn = 0\ntry:\n    while n < 10000:\n"
            "        open(f'f{n}', 'wb').write(b'x' * (1 << 20)); n += 1\n"
            "except OSError as e:\n    print('FULL', n, e.errno, flush=True)\n")
    result = attack(body, Limits(timeout_s=60, scratch_mb=8, file_mb=2))
    assert "FULL" in result.stdout_tail, result.stderr_tail
    assert int(result.stdout_tail.split("FULL")[1].split()[0]) <= 8


FLOOD_SCORER = '''
import json, sys
from slurm_acme.evaluate.sandbox import Limits, run_program
flood = """
import os
chunk = b"x" * (1 << 20)
for _ in range({mib}):
    os.write(1, chunk)
    os.write(2, chunk)
"""
r = run_program(flood, Limits(timeout_s=600, cpu_s=600))
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]
print(json.dumps({{"status": r.status, "bytes": r.output_bytes, "hwm_kb": int(hwm),
                  "kept": len(r.stdout_tail)}}))
'''


def test_an_output_flood_does_not_grow_the_scorer():
    mib = 512
    proc = subprocess.run([sys.executable, "-c", FLOOD_SCORER.format(mib=mib)], capture_output=True,
                          text=True, timeout=900, check=True)
    report = __import__("json").loads(proc.stdout)
    assert report["bytes"] == 2 * mib << 20  # every byte was read...
    assert report["kept"] == OUTPUT_CAP  # ...the newest MiB kept...
    assert report["hwm_kb"] < 200 * 1024  # ...and the scorer stayed small


# ------------------------------------------------------------ refusal

def test_without_bubblewrap_code_execution_is_refused_naming_the_setting(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox_profile.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable) as err:
            run_program("print(1)\n")
        assert "evaluate.allow_unsandboxed_code" in str(err.value)
        assert "bubblewrap" in str(err.value)
        assert "\n" not in str(err.value)
        allowed = run_program("print(1)\n", Limits(allow_unsandboxed=True))
        assert allowed.passed and not allowed.isolated
    finally:
        sandbox_profile.cache_clear()


def test_the_site_may_allow_unsandboxed_code_only_in_the_system_config(monkeypatch, tmp_path):
    folder = tmp_path / "etc"
    folder.mkdir(mode=0o755)
    system = folder / "acme.toml"
    system.write_text("[evaluate]\nallow_unsandboxed_code = true\n")
    system.chmod(0o644)
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox_profile.cache_clear()
    try:
        monkeypatch.setattr("slurm_acme.config.SYSTEM_CONFIG", system)
        assert run_program("print(1)\n").passed
        system.chmod(0o666)  # anyone could have written it: the grant is void
        with pytest.raises(SandboxUnavailable):
            run_program("print(1)\n")
    finally:
        sandbox_profile.cache_clear()


def test_a_scorer_running_as_an_ordinary_user_keeps_her_uid_and_her_files_out():
    """A Slurm scoring job runs as the submitting user: no drop, and still no host files."""
    import json
    import shutil
    import tempfile

    from osusers import ensure_user, run_python_as

    alice = ensure_user("acme-sec-alice")
    folder = Path(tempfile.mkdtemp(prefix="acme-sec-alice-"))
    secret = folder / "secret.txt"
    secret.write_text("ALICE-SECRET")
    os.chown(folder, alice.uid, alice.gid)
    os.chown(secret, alice.uid, alice.gid)
    folder.chmod(0o700)
    secret.chmod(0o600)
    program = DEFEAT_HOOK + (f"import os\nprint('UID', os.getuid(), flush=True)\n"
                             f"print(open({str(secret)!r}).read())\n")
    scorer = ("import json, sys\nfrom slurm_acme.evaluate.sandbox import Limits, run_program\n"
              "r = run_program(sys.argv[1], Limits(timeout_s=60))\n"
              "print(json.dumps({'out': r.stdout_tail, 'err': r.stderr_tail, 'status': r.status,"
              " 'isolated': r.isolated}))\n")
    try:
        proc = run_python_as(alice, scorer, program)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["isolated"] and result["status"] == "failed"
    assert f"UID {alice.uid}" in result["out"]
    assert "ALICE-SECRET" not in result["out"] + result["err"]
