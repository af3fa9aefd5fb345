"""The srun + torch.distributed transport: one test = one srun step = one world.

Each group gets its own port and its own process group, so a round's tests
run side by side. The parent enforces the hard timeout: start-up (srun launch
and the torch import) has its own allowance, and the collective's clock starts
once every rank has said it is ready. A step past either deadline is killed
(srun in its own session, then ``scancel JOB.STEP``) and the test fails with
``"timeout"``: a hang is a failure, never a wait.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from slurm_acme.errors import AcmeError
from slurm_acme.health.records import TIMEOUT, TestResult
from slurm_acme.health.steps import StepShape, pair_test_step
from slurm_acme.ports import free_port
from slurm_acme.slurm.steps import start_step, step_argv, step_env

log = logging.getLogger(__name__)

#: Seconds srun gets to end its tasks after SIGTERM before it is killed.
KILL_GRACE_S = 5.0
#: Seconds a step may take to exit once its verdict is known (torch teardown
#: is slow on a busy node); past that it is killed, the verdict stands.
TEARDOWN_S = 30.0


class PortPicker:
    """Free TCP ports (:func:`slurm_acme.ports.free_port`), never the same one twice in one check."""

    def __init__(self) -> None:
        self._used: set[int] = set()
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            port = free_port(avoid=self._used)
            self._used.add(port)
            return port


@dataclass
class _StepOutput:
    """What one step said on stdout, collected while it runs."""

    ready: int = 0
    steps: set[str] = field(default_factory=set)
    result: dict | None = None
    errors: list[str] = field(default_factory=list)


class SrunTransport:
    """``run_test`` for :func:`bisection.bisect` that runs each group as an srun step."""

    def __init__(self, shape: StepShape, addresses: Mapping[str, str], *,
                 min_busbw: float | None = None, environ: Mapping[str, str] | None = None,
                 cancel_step: Callable[[str], None] | None = None) -> None:
        self.shape = shape
        self.addresses = dict(addresses)
        self.min_busbw = min_busbw
        self.env = step_env(os.environ if environ is None else environ)
        self.cancel_step = cancel_step
        self.ports = PortPicker()

    def __call__(self, group: tuple[str, ...]) -> TestResult:
        master = self.addresses.get(group[0], group[0])
        request, command = pair_test_step(group, port=self.ports(), master=master, shape=self.shape)
        log.debug("health: %s", step_argv(request, command))
        started = time.monotonic()
        proc = start_step(request, command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=self.env, start_new_session=True)
        stderr_tail: list[str] = []
        threading.Thread(target=_keep_tail, args=(proc.stderr, stderr_tail), daemon=True).start()
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        out, overdue = self._watch(proc, lines, world=len(group) * self.shape.tasks_per_node)
        if overdue:
            self._kill(proc, out)
        else:
            proc.wait()
        timed_out = overdue and out.result is None and not out.errors
        return self._verdict(group, out, timed_out, proc.returncode, stderr_tail,
                             time.monotonic() - started)

    def _watch(self, proc: subprocess.Popen, lines: queue.Queue, world: int) -> tuple[_StepOutput, bool]:
        """Read events until stdout closes or a deadline passes; True if it is overdue.

        Deadlines: start-up plus timeout at launch; the timeout once every rank
        is ready; the teardown allowance once the verdict is known.
        """
        out = _StepOutput()
        deadline = time.monotonic() + self.shape.startup_s + self.shape.timeout_s
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return out, True
            if line is None:
                return out, False
            event = _event(line)
            kind = event.get("event")
            if kind == "ready":
                out.ready += 1
                if event.get("step"):
                    out.steps.add(str(event["step"]))
                if out.ready == world:
                    deadline = time.monotonic() + self.shape.timeout_s
            elif kind == "result":
                out.result = event
                deadline = time.monotonic() + TEARDOWN_S
            elif kind == "error":
                out.errors.append(f"{event.get('node', '?')}: {event.get('error', '')}")
                deadline = min(deadline, time.monotonic() + TEARDOWN_S)

    def _kill(self, proc: subprocess.Popen, out: _StepOutput) -> None:
        """End a step past its deadline: srun's session, then the step itself."""
        for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                break
        if self.cancel_step and self.shape.job_id:
            for step in out.steps:
                try:
                    self.cancel_step(f"{self.shape.job_id}.{step}")
                except AcmeError as exc:  # the step may be gone already: log, keep going
                    log.debug("health: scancel %s.%s: %s", self.shape.job_id, step, exc)

    def _verdict(self, group: tuple[str, ...], out: _StepOutput, timed_out: bool,
                 returncode: int | None, stderr_tail: list[str], duration: float) -> TestResult:
        if timed_out:
            return TestResult(group, False, TIMEOUT, None, duration)
        if out.errors:
            return TestResult(group, False, "; ".join(out.errors[:2])[:600], None, duration)
        if out.result is None:  # rank 0's result comes after a barrier: all ranks finished
            last = stderr_tail[-1] if stderr_tail else "no output"
            return TestResult(group, False, f"srun exit {returncode}: {last}"[:600], None, duration)
        busbw = float(out.result.get("busbw_gbps") or 0.0)
        world = int(out.result.get("world") or 1)
        if self.min_busbw is not None and world > 1 and busbw < self.min_busbw:
            return TestResult(group, False, f"busbw {busbw:.3g} GB/s below min {self.min_busbw:g}",
                              busbw, duration)
        return TestResult(group, True, None, busbw, duration)


def _event(line: str) -> dict:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return event if isinstance(event, dict) else {}


def _pump(stream, lines: queue.Queue) -> None:  # type: ignore[no-untyped-def]
    for line in stream:
        lines.put(line)
    lines.put(None)


def _keep_tail(stream, tail: list[str], keep: int = 20) -> None:  # type: ignore[no-untyped-def]
    for line in stream:
        if line.strip():
            tail.append(line.strip())
            del tail[:-keep]
