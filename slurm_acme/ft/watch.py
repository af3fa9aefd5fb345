"""One training step, from launch to exit: output, heartbeat, hang, signals.

The supervisor hands a launched step (srun's process) to :class:`StepWatch`
and gets back a :class:`slurm_acme.ft.policy.AttemptEnd`: how the step ended
and everything observed on the way. A thread copies srun's labelled output
to the attempt log, into the diagnoser and through the step patterns; the
main loop reads the metrics file, keeps the hang clock and answers the
signals Slurm sends to the batch step:

* USR2 (the time-limit warning): forwarded to the trainer, or the step is
  stopped, per ``fault_tolerance.time_limit_action``; ignored once the
  trainer said ``done``;
* TERM (scancel, a node failure, the time limit itself): the step is ended at
  once, because Slurm kills the supervisor ``KillWait`` seconds later.

A step that the supervisor ended itself (a hang, a time-limit stop, a TERM)
is never diagnosed from its log: the kill would read as a failure of its own.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from slurm_acme.diagnose import Diagnosis, RuleBook, StreamingDiagnoser
from slurm_acme.ft.launch import Launch
from slurm_acme.ft.metrics import MetricsTail
from slurm_acme.ft.policy import AttemptEnd
from slurm_acme.ft.progress import Hang, HangClock, ProgressLog, StepPattern, step_of_line
from slurm_acme.ft.spec import TrainSpec

_LABEL = re.compile(r"^\s*(\d+):\s?(.*)$")
#: Seconds a TERM-ended step gets before SIGKILL (Slurm's KillWait is often 30 s, 5 s here).
TERM_GRACE_S = 2.0


@dataclass
class Signals:
    """Flags set by signal handlers and read by the watch loop.

    ``on_term`` runs inside the SIGTERM handler, at once: when Slurm kills a job
    because a node went DOWN, the node may be back (``ReturnToService=2``) within
    half a second, so what Slurm says about the nodes is read then, not at the
    next poll.
    """

    usr2: bool = False
    term: bool = False
    requeue_pending: bool = False
    on_term: Callable[[], None] | None = field(default=None, repr=False)

    def install(self) -> None:
        signal.signal(signal.SIGUSR2, self._on_usr2)
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_usr2(self, *_: object) -> None:
        self.usr2 = True

    def _on_term(self, *_: object) -> None:
        first = not self.term
        self.term = True
        if first and self.on_term is not None:
            self.on_term()


def make_diagnoser(rule_files: Sequence[str], task_nodes: Mapping[int, str] | None
                   ) -> StreamingDiagnoser:
    """The live diagnoser of one step, told the step's task layout (rank -> node)."""
    rulebook = RuleBook.load(list(rule_files)) if rule_files else None
    return StreamingDiagnoser(rulebook, task_nodes=task_nodes)


@dataclass
class _Output:
    """What the output thread saw (shared with the loop under ``lock``)."""

    clock: HangClock
    progress: ProgressLog
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class StepWatch:
    """Watch one launched training step until it ends; see the module docstring."""

    spec: TrainSpec
    metrics_path: Path
    log_path: Path
    progress_path: Path
    signals: Signals
    patterns: Sequence[StepPattern]
    poll_s: float = 0.5
    log: Callable[[str], None] = print
    diagnoser_factory: Callable[[Sequence[str], Mapping[int, str] | None],
                                StreamingDiagnoser] = make_diagnoser

    def run(self, launch: Launch, proc: subprocess.Popen[str]) -> AttemptEnd:
        ft = self.spec.fault_tolerance
        diagnoser = self.diagnoser_factory(self.spec.diagnosis.rules, launch.task_nodes())
        out = _Output(HangClock(ft.hang_timeout, ft.startup_timeout),
                      ProgressLog(self.progress_path))
        metrics = MetricsTail(self.metrics_path)
        with self.log_path.open("a", encoding="utf-8") as log_file:
            reader = threading.Thread(target=_pump, daemon=True,
                                      args=(proc, launch, diagnoser, out, log_file, self.patterns))
            reader.start()
            state = self._loop(proc, out, metrics)
            # Slurm signals the step too: srun may be gone before the loop saw the TERM
            state.term = state.term or self.signals.term
            rc = proc.wait()
            reader.join(timeout=10)
        out.progress.close()
        metrics.poll()
        # A step the supervisor stopped (hang, time limit) is not diagnosed: the kill would
        # read as its failure. One that Slurm ended is, for what its own lines say (srun's
        # "Node failure on nodeN"); the supervisor weighs that with what Slurm reports.
        ended_by_us = state.hang is not None or state.time_limit_action == "stop"
        with out.lock:
            diagnosis = diagnoser.result() if rc != 0 and not ended_by_us else None
            compressed = list(diagnoser.compressed_lines())
            output_step = out.clock.last_step
        last_step = metrics.last_step if metrics.last_step is not None else output_step
        self.log(f"trainer exited {rc}; hang={state.hang is not None}; "
                 f"diagnosis={_diagnosis_summary(diagnosis)}")
        return AttemptEnd(
            exit_code=rc, diagnosis=diagnosis, hang=state.hang,
            time_limit_signal=state.time_limit_action is not None,
            time_limit_action=state.time_limit_action, terminated=state.term,
            spike_step=metrics.spike_step if rc != 0 else None, done=metrics.done,
            checkpointed_for_requeue=metrics.checkpointed_for_requeue, last_step=last_step,
            last_ckpt_ts=state.last_ckpt_ts, compressed=tuple(compressed),
            spoke_metrics=metrics.records > 0)

    def _loop(self, proc: subprocess.Popen[str], out: _Output, metrics: MetricsTail) -> _State:
        state = _State()
        while proc.poll() is None:
            time.sleep(self.poll_s)
            checkpoints = len(metrics.checkpoints)
            before = metrics.last_step
            if metrics.poll():
                with out.lock:
                    out.clock.beat()
                    if metrics.last_step is not None and metrics.last_step != before:
                        out.clock.step(metrics.last_step)
            if len(metrics.checkpoints) > checkpoints:
                state.last_ckpt_ts = time.time()
            if self.signals.term:
                self.log("SIGTERM from Slurm: ending the training step")
                state.term = True
                _stop(proc, grace=TERM_GRACE_S)
                break
            if self.signals.usr2 and state.time_limit_action is None and not state.usr2_seen:
                state.usr2_seen = True
                self._time_limit(proc, metrics, state)
                if state.time_limit_action == "stop":
                    break
            with out.lock:
                hang = None if metrics.done else out.clock.hang()
            if hang is not None:
                self.log(hang.reason)
                state.hang = hang
                _stop(proc)
                break
        return state

    def _time_limit(self, proc: subprocess.Popen[str], metrics: MetricsTail, state: _State) -> None:
        if metrics.done:
            self.log("time-limit signal after the trainer said done: ignored")
            return
        action = self.spec.fault_tolerance.time_limit_action
        if action == "auto":
            action = ("checkpoint" if metrics.records > 0 and self.spec.launch == "srun"
                      else "stop")
        state.time_limit_action = action
        if action == "checkpoint":
            self.log("time-limit signal: asking the trainer to checkpoint (USR2)")
            proc.send_signal(signal.SIGUSR2)
            return
        grace = max(10.0, self.spec.fault_tolerance.signal_lead * 0.5)
        self.log(f"time-limit signal: stopping the step (SIGTERM, SIGKILL after {grace:g}s); "
                 "the next attempt resumes from the newest checkpoint")
        _stop(proc, grace=grace)


@dataclass
class _State:
    hang: Hang | None = None
    term: bool = False
    usr2_seen: bool = False
    time_limit_action: str | None = None
    last_ckpt_ts: float | None = None


def _pump(proc: subprocess.Popen[str], launch: Launch, diagnoser: StreamingDiagnoser,
          out: _Output, log_file: IO[str], patterns: Sequence[StepPattern]) -> None:
    """Copy srun's labelled output to the attempt log, the diagnoser and the step patterns."""
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.rstrip("\n")
        log_file.write(line + "\n")
        log_file.flush()
        match = _LABEL.match(line)
        task = int(match.group(1)) if match else None
        text = match.group(2) if match else line
        step = step_of_line(text, patterns)
        with out.lock:
            diagnoser.feed(text, rank=task if launch.task_is_rank else None,
                           node=launch.node_of_task(task))
            if step is not None:
                out.clock.step(step)
                out.progress.record(step)
            else:
                out.clock.beat()


def _stop(proc: subprocess.Popen[str], grace: float = 10.0) -> None:
    """Stop the step: SIGTERM (srun forwards it to the tasks), then SIGKILL after ``grace``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()


def _diagnosis_summary(diagnosis: Diagnosis | None) -> str:
    return f"{diagnosis.category}/{diagnosis.origin}" if diagnosis else "-"
