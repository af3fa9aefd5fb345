"""The trainer's metrics JSONL read as a heartbeat, incrementally.

Each line is ``{step, loss, time, event, rank}`` with the events of
:class:`slurm_acme.contracts.MetricEvent`. The supervisor only needs the newest step,
when it arrived, a spike's step, whether training said done, and the step
timings that goodput is computed from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from slurm_acme.contracts import PROGRESS_EVENTS, ROLLBACK_EVENTS, MetricEvent, metric_event


@dataclass
class MetricsTail:
    """The metrics file read as it grows: each :meth:`poll` reads only the new, complete lines."""

    path: Path
    last_step: int | None = None
    #: Metric records read so far: a trainer that writes any speaks the contract.
    records: int = 0
    spike_step: int | None = None
    done: bool = False
    #: The trainer checkpointed after USR2 and exited for a requeue (``requeue`` event).
    checkpointed_for_requeue: bool = False
    checkpoints: list[int] = field(default_factory=list)
    _offset: int = 0
    _partial: str = ""

    def poll(self) -> int:
        """Read what was appended since the last poll; return the number of new records."""
        try:
            with self.path.open("r", encoding="utf-8", errors="replace") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
                self._offset = fh.tell()
        except FileNotFoundError:
            return 0
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        count = 0
        for line in lines:
            record = _decode(line)
            if record is not None:
                self._apply(record)
                count += 1
        self.records += count
        return count

    def _apply(self, record: dict) -> None:
        event = metric_event(record.get("event"))
        step = record.get("step")
        if event in PROGRESS_EVENTS and isinstance(step, int):
            if self.last_step is None or step > self.last_step or event is MetricEvent.RESUME:
                self.last_step = step
        if event is MetricEvent.CHECKPOINT and isinstance(step, int):
            self.checkpoints.append(step)
        if event in ROLLBACK_EVENTS and isinstance(step, int):
            self.spike_step = step if self.spike_step is None else min(self.spike_step, step)
        if event is MetricEvent.REQUEUE and record.get("checkpointed", True):
            self.checkpointed_for_requeue = True
        if event is MetricEvent.DONE:
            self.done = True


def _decode(line: str) -> dict | None:
    line = line.strip()
    if not line:
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def read_records(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [r for r in (_decode(line) for line in text.splitlines()) if r is not None]


def useful_seconds(metric_files: list[Path]) -> tuple[float, int | None]:
    """Training time that counts toward the final model, and the last step reached.

    Each step's duration is the gap to the previous step record of the same
    attempt (rank 0 only). When a step was trained more than once (after a
    failure or a rollback) only its last execution counts: the earlier ones
    are the lost work.
    """
    latest: dict[int, float] = {}
    last_step = None
    for order, path in enumerate(metric_files):
        prev_time = None
        for rec in read_records(path):
            if rec.get("rank", 0) not in (0, None):
                continue
            event, step, ts = metric_event(rec.get("event")), rec.get("step"), rec.get("time")
            if not isinstance(ts, (int, float)):
                continue
            if event is MetricEvent.RESUME:
                prev_time = ts
            if event is not MetricEvent.STEP or not isinstance(step, int):
                continue
            if prev_time is not None:
                latest[step] = max(0.0, ts - prev_time)
            prev_time = ts
            last_step = step if last_step is None or order > 0 or step > last_step else last_step
    return sum(latest.values()), last_step
