"""The metrics JSONL a training process writes, which the supervisor reads as a heartbeat.

One JSON object per line: ``step``, ``loss`` (null when not finite; then
``loss_str`` is "nan"/"inf"), ``time`` (UTC epoch seconds), ``event`` (step,
checkpoint, resume, skip, spike, nan, done, ...), ``rank``, plus event fields.
Each line is a single ``write`` on an ``O_APPEND`` descriptor, so ranks and the
checkpoint thread can share one file without interleaving. Torch-free.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from slurm_acme.contracts import ENV_METRICS_FILE, MetricEvent


class MetricsWriter:
    """Appends this rank's metrics lines: the supervisor's heartbeat and event feed.

    `path` None writes nothing (a run outside the supervisor). Pass :meth:`write` as
    ``AsyncCheckpointer(on_event=...)`` so checkpoint events reach the supervisor, and
    write ``done`` after the last step: the supervisor then knows the run finished.
    """

    def __init__(self, path: str | os.PathLike | None, rank: int) -> None:
        self.path = Path(path) if path else None
        self.rank = rank
        self._fd: int | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    @classmethod
    def from_env(cls, rank: int) -> MetricsWriter:
        """The writer the supervisor asked for (``$ACME_METRICS_FILE``), or a silent one."""
        return cls(os.environ.get(ENV_METRICS_FILE) or None, rank)

    def write(self, event: str | MetricEvent, step: int, loss: float | None = None,
              **fields: Any) -> None:
        """One line: `event` (step, checkpoint, resume, skip, spike, nan, requeue, done,
        ...) at `step`, with `loss` and any extra JSON-serialisable fields."""
        record: dict[str, Any] = {"step": step, "loss": loss, "time": time.time(),
                                  "event": str(event), "rank": self.rank}
        if loss is not None and not math.isfinite(loss):
            record["loss"] = None
            record["loss_str"] = "nan" if math.isnan(loss) else "inf"
        record.update(fields)
        if self._fd is not None:
            os.write(self._fd, (json.dumps(record) + "\n").encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """All complete lines of a metrics file (a torn last line is ignored)."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
