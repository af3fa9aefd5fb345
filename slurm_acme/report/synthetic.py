"""Seeded, AcmeTrace-shaped synthetic jobs for tests, the benchmark and demos.

Heavy-tailed run times and queue delays with ties (whole seconds), a GPU
demand mix from CPU-only to 1,024-GPU pretraining, every workload type and
every end state the report classifies. Rows are ``jobs``-table dicts; the
benchmark writes them as AcmeTrace CSV with :func:`acme_csv_row`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from slurm_acme.report.model import WORKLOAD_TYPES

#: (gpus, weight) of the GPU demand mix: many CPU and 1-GPU jobs, a few huge.
_GPU_MIX = ((0, 35), (1, 30), (2, 6), (4, 6), (8, 12), (16, 4), (32, 3),
            (64, 1.5), (128, 1), (256, 0.8), (512, 0.4), (1024, 0.3))
_TYPE_WEIGHTS = (40, 5, 15, 8, 25, 7)  # Eval, Pretrain, SFT, MLLM, Debug, Other
#: How much bigger than the base mix each type tends to be (Pretrain is wide).
_TYPE_SCALE = {"Eval": 1, "Pretrain": 16, "SFT": 4, "MLLM": 4, "Debug": 1, "Other": 1}
_STATES = (("COMPLETED", 55), ("CANCELLED", 10), ("CANCELLED by 1000", 2), ("FAILED", 25),
           ("TIMEOUT", 3), ("NODE_FAIL", 2), ("OUT_OF_MEMORY", 2), ("PREEMPTED", 1))
TRACE_COLUMNS = ("job_id", "user", "node_num", "gpu_num", "cpu_num", "type", "state",
                 "submit_time", "start_time", "end_time", "duration", "queue", "gpu_time")


def synthetic_jobs(n: int, *, seed: int, start_ts: float, span_s: float,
                   cluster: str = "synth", users: int = 20) -> Iterator[dict[str, Any]]:
    """``n`` jobs submitted over ``[start_ts, start_ts + span_s)``, busiest in
    the middle (a triangular submit-time density), in submit order with
    ascending job ids, as a real trace file is."""
    rng = random.Random(seed)
    submits = sorted(float(int(start_ts + rng.triangular(0, span_s, span_s / 2))) for _ in range(n))
    gpu_values, gpu_weights = zip(*_GPU_MIX, strict=False)
    state_values, state_weights = zip(*_STATES, strict=False)
    for i, submit in enumerate(submits):
        wtype = rng.choices(WORKLOAD_TYPES, _TYPE_WEIGHTS)[0]
        gpus = min(1024, rng.choices(gpu_values, gpu_weights)[0] * _TYPE_SCALE[wtype])
        duration = float(int(rng.lognormvariate(5.0 + gpus.bit_length() * 0.3, 2.2)) % 1_500_000)
        queue = float(int(rng.expovariate(1 / 400) if rng.random() < 0.7 else 0))
        yield {
            "cluster": cluster,
            "job_id": str(i + 1),
            "user": f"u{rng.randrange(users):03d}",
            "workload_type": wtype,
            "nodes": max(1, gpus // 8),
            "gpus": gpus,
            "cpus": max(1, gpus * 8 or rng.choice((1, 2, 4, 16))),
            "submit_ts": submit,
            "start_ts": submit + queue,
            "end_ts": submit + queue + duration,
            "duration_s": duration,
            "queue_s": queue,
            "gpu_time_s": duration * gpus,
            "state": rng.choices(state_values, state_weights)[0],
            "source": "synthetic",
        }


#: AcmeTrace only knows COMPLETED, CANCELLED, FAILED, TIMEOUT and NODE_FAIL.
_TRACE_STATE = {"CANCELLED by 1000": "CANCELLED", "OUT_OF_MEMORY": "FAILED", "PREEMPTED": "CANCELLED"}


def _iso(ts: float, tz: timezone) -> str:
    return datetime.fromtimestamp(ts, tz).isoformat()


def acme_csv_row(job: dict[str, Any], tz: timezone = timezone(timedelta(hours=8))) -> list[Any]:
    """The job as a ``trace_seren.csv`` row (times with the ``+08:00`` offset)."""
    state = _TRACE_STATE.get(job["state"], job["state"])
    return [job["job_id"], job["user"], job["nodes"], job["gpus"], job["cpus"], job["workload_type"],
            state, _iso(job["submit_ts"], tz), _iso(job["start_ts"], tz), _iso(job["end_ts"], tz),
            int(job["duration_s"]), int(job["queue_s"]), int(job["gpu_time_s"])]
