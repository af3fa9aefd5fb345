"""The metrics heartbeat and the goodput arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

from slurm_acme.ft.metrics import MetricsTail, useful_seconds


def _write(path: Path, records: list[dict], mode: str = "w") -> None:
    with path.open(mode) as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def test_tail_reads_only_new_complete_lines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "m.jsonl"
    tail = MetricsTail(path)
    assert tail.poll() == 0  # no file yet
    _write(path, [{"step": 1, "time": 1.0, "event": "step", "rank": 0}])
    with path.open("a") as fh:
        fh.write('{"step": 2, "time": 2.0, "ev')  # torn line
    assert tail.poll() == 1 and tail.last_step == 1
    with path.open("a") as fh:
        fh.write('ent": "step", "rank": 0}\n{"step": 2, "event": "spike", "rank": 0}\n')
    assert tail.poll() == 2
    assert (tail.last_step, tail.spike_step) == (2, 2)


def test_useful_time_counts_each_step_once_across_attempts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    a0, a1 = tmp_path / "a0", tmp_path / "a1"
    # attempt 0: steps 1..4 at 1 s each; attempt 1 resumes at step 2 and redoes 3..4 at 2 s each
    _write(a0, [{"step": s, "time": float(s), "event": "step", "rank": 0} for s in range(5)]
           + [{"step": 3, "time": 3.5, "event": "step", "rank": 1}])
    _write(a1, [{"step": 2, "time": 10.0, "event": "resume", "rank": 0},
                {"step": 3, "time": 12.0, "event": "step", "rank": 0},
                {"step": 4, "time": 14.0, "event": "step", "rank": 0}])
    useful, last = useful_seconds([a0, a1])
    assert useful == 1 + 1 + 2 + 2  # steps 1, 2 from attempt 0; 3, 4 from attempt 1
    assert last == 4
