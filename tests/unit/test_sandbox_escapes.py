"""Generated programs that try to escape the code-execution sandbox fail safely."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from slurm_acme.evaluate.sandbox import Limits, code_program, run_program, sandbox_interpreter

BOTH_LAYERS = [Limits(timeout_s=10), Limits(timeout_s=10, audit_hook=False)]


def test_a_correct_program_passes():
    program = code_program("def add(a, b):\n", "    return a + b\n",
                           "def check(candidate):\n    assert candidate(2, 3) == 5\n", "add")
    assert run_program(program).passed


def test_a_wrong_program_fails():
    program = code_program("def add(a, b):\n", "    return a - b\n",
                           "def check(candidate):\n    assert candidate(2, 3) == 5\n", "add")
    result = run_program(program)
    assert result.status == "failed"
    assert "AssertionError" in result.stderr_tail


@pytest.mark.parametrize("limits", BOTH_LAYERS, ids=["audit+kernel", "kernel-only"])
def test_fork_bomb_cannot_fork(limits):
    result = run_program("import os\nwhile True:\n    os.fork()\n", limits)
    assert result.status == "failed"
    assert result.elapsed_s < limits.timeout_s


def test_kernel_layer_blocks_fork_when_not_root_or_dropped_to_nobody():
    _, dropped = sandbox_interpreter()
    result = run_program("import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\n",
                         Limits(audit_hook=False))
    # Either we run unprivileged or as nobody: RLIMIT_NPROC=0 is enforced by the kernel.
    assert dropped or __import__("os").geteuid() != 0
    assert "Resource temporarily unavailable" in result.stderr_tail


def test_infinite_loop_is_stopped_by_cpu_limit_or_timeout():
    limits = Limits(timeout_s=6, cpu_s=1)
    started = time.monotonic()
    result = run_program("while True:\n    pass\n", limits)
    assert result.status in {"killed", "timeout"}
    assert time.monotonic() - started < limits.timeout_s + 3


def test_sleeping_forever_hits_the_wall_clock_timeout():
    result = run_program("import time\ntime.sleep(600)\n", Limits(timeout_s=1.5))
    assert result.status == "timeout"
    assert result.elapsed_s < 5


@pytest.mark.parametrize("limits", BOTH_LAYERS, ids=["audit+kernel", "kernel-only"])
def test_reading_a_file_outside_fails(tmp_path, limits):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-42")
    secret.chmod(0o600)
    result = run_program(f"print(open({str(secret)!r}).read())\nraise SystemExit(0)\n", limits)
    assert result.status == "failed"
    assert "TOP-SECRET-42" not in result.stderr_tail


def test_reading_world_readable_system_files_fails():
    assert run_program("open('/etc/passwd').read()\n").status == "failed"


@pytest.mark.parametrize("limits", BOTH_LAYERS, ids=["audit+kernel", "kernel-only"])
def test_network_is_unreachable(limits):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set() and not accepted:
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        result = run_program(
            f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "s.sendall(b'leak')\n", limits)
        time.sleep(0.5)  # let a connection that slipped through be accepted
    finally:
        done.set()
        thread.join()
        server.close()
    assert result.status == "failed"
    assert not accepted


def test_memory_bomb_fails():
    assert run_program("x = bytearray(10 ** 10)\n").status == "failed"


def test_huge_file_write_fails():
    result = run_program("open('big', 'wb').write(b'x' * (64 * 2 ** 20))\n", Limits(file_mb=1))
    assert result.status in {"failed", "killed"}


def test_subprocess_and_ctypes_are_refused():
    assert run_program("import subprocess\nsubprocess.run(['true'])\n").status == "failed"
    assert run_program("import ctypes\n").status == "failed"
