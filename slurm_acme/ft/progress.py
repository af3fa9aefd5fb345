"""Training progress from the trainer's own output, and the hang clock.

An unmodified script says nothing to slurm-acme; it prints. The supervisor
reads every line of every rank anyway (for diagnosis), so it also reads the
step out of the lines that carry one, with patterns for the common trainers
(or the site's own), and takes any line at all as a sign of life:

* a **step** is progress: the hang clock restarts, ``status`` shows it and
  goodput counts it;
* any other **output** is a heartbeat: it also restarts the clock, so a
  trainer that prints in a format nobody recognises is not killed while it
  talks.

A hang is then silence: no step and no output for ``hang_timeout`` once
training has shown a step, or for ``startup_timeout`` before the first one
(imports, process-group set-up, data loading are slow and often quiet). The
clock says which limit applied, so the reason quotes the right one.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_acme.contracts import MetricEvent


@dataclass(frozen=True)
class StepPattern:
    """A regular expression whose ``step`` group (or first group) is the training step.

    With ``epoch`` and ``total`` groups (Lightning's per-epoch bar) the step is
    ``epoch * total + step``, so it keeps growing across epochs.
    """

    name: str
    regex: re.Pattern[str]

    def step_in(self, line: str) -> int | None:
        match = self.regex.search(line)
        if match is None:
            return None
        groups = match.groupdict()
        raw = groups.get("step") or match.group(1)
        try:
            step = int(raw)
        except (TypeError, ValueError):
            return None
        if groups.get("epoch") is not None and groups.get("total"):
            step += int(groups["epoch"]) * int(groups["total"])
        return step


def _pattern(name: str, regex: str) -> StepPattern:
    return StepPattern(name, re.compile(regex))


#: Built-in patterns, most specific first; the first that matches a line wins.
DEFAULT_PATTERNS: tuple[StepPattern, ...] = (
    # Lightning: "Epoch 3:  45%|████▌     | 450/1000 [00:10<00:12, 44.1it/s, loss=2.3]"
    _pattern("lightning", r"\bEpoch (?P<epoch>\d+):.*?\|\s*(?P<step>\d+)/(?P<total>\d+)\s*\["),
    # Megatron-LM: " iteration      100/   10000 | consumed samples: ..."
    _pattern("megatron", r"\biteration\s+(?P<step>\d+)\s*/\s*\d+"),
    # HF Trainer / Accelerate tqdm: " 45%|████▌     | 450/1000 [00:10<00:12, 44.1it/s]"
    _pattern("tqdm", r"\|\s*(?P<step>\d+)/(?P<total>\d+)\s*\["),
    # torchtitan "step:  1  loss: 10.8", a plain "step 7", "Step 7/100", "global_step=7"
    _pattern("step", r"(?i)\b(?:global_)?step\b\s*[:=#]?\s*(?P<step>\d+)"),
)


def compile_patterns(extra: Sequence[str], *, defaults: bool = True) -> tuple[StepPattern, ...]:
    """The site's or user's patterns (tried first), then the built-in ones."""
    own = tuple(_pattern(f"user{i}", p) for i, p in enumerate(extra))
    return own + (DEFAULT_PATTERNS if defaults else ())


def step_of_line(line: str, patterns: Sequence[StepPattern]) -> int | None:
    for pattern in patterns:
        step = pattern.step_in(line)
        if step is not None:
            return step
    return None


@dataclass(frozen=True)
class Hang:
    """The hang clock ran out: which limit applied, and how long it was quiet."""

    limit_name: str  # "hang_timeout" or "startup_timeout"
    limit_s: float
    quiet_s: float
    last_step: int | None

    @property
    def reason(self) -> str:
        if self.limit_name == "startup_timeout":
            return (f"hang: no training step and no output for {self.quiet_s:.0f}s before the "
                    f"first step (startup_timeout {self.limit_s:g}s)")
        return (f"hang: no new step and no output for {self.quiet_s:.0f}s (hang_timeout "
                f"{self.limit_s:g}s; last step {self.last_step})")


@dataclass
class HangClock:
    """When the trainer last showed a step or any sign of life; whether it is hung."""

    hang_timeout: float
    startup_timeout: float
    started: float = field(default_factory=time.time)
    last_step: int | None = None
    last_step_ts: float | None = None
    last_beat_ts: float | None = None

    def beat(self, now: float | None = None) -> None:
        """Any output line, any metrics line: the trainer is alive."""
        self.last_beat_ts = time.time() if now is None else now

    def step(self, step: int, now: float | None = None) -> bool:
        """A training step was seen; True when it is a new one (progress)."""
        now = time.time() if now is None else now
        self.beat(now)
        if step == self.last_step:
            return False
        self.last_step, self.last_step_ts = step, now
        return True

    def hang(self, now: float | None = None) -> Hang | None:
        now = time.time() if now is None else now
        marks = [t for t in (self.started, self.last_step_ts, self.last_beat_ts) if t is not None]
        quiet = now - max(marks)
        if self.last_step_ts is None:
            name, limit = "startup_timeout", self.startup_timeout
        else:
            name, limit = "hang_timeout", self.hang_timeout
        if quiet > limit:
            return Hang(name, limit, round(quiet, 2), self.last_step)
        return None


class ProgressLog:
    """Steps read from the output, appended to the attempt's progress file.

    Same line format as the metrics file (``MetricEvent.STEP`` records, rank 0,
    ``"source": "output"``), so goodput and ``status`` read either the same way.
    Only a step higher than any before is written: every rank prints the same step.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.high: int | None = None
        self._fd: int | None = None

    def record(self, step: int, now: float | None = None) -> None:
        if self.high is not None and step <= self.high:
            return
        self.high = step
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        line = {"step": step, "loss": None, "time": time.time() if now is None else now,
                "event": MetricEvent.STEP.value, "rank": 0, "source": "output"}
        os.write(self._fd, (json.dumps(line) + "\n").encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
