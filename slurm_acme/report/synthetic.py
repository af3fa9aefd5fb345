"""Seeded, AcmeTrace-shaped synthetic jobs for tests, the benchmark and demos.

Heavy-tailed run times and queue delays with ties (whole seconds), a GPU
demand mix from CPU-only to 1,024-GPU pretraining, every workload type and
every end state the report classifies. Rows are ``jobs``-table dicts; the
benchmarks, tests and demos write them as AcmeTrace CSV with
:func:`write_trace_csv` (or one row at a time with :func:`acme_csv_row`), and
:func:`write_trace` makes a whole Seren- or Kalos-shaped file from a seed.
The columns are the ones ``sacme import-trace`` reads (:mod:`slurm_acme.ingest.trace`).
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

from slurm_acme.ingest.trace import OPTIONAL_COLUMNS, REQUIRED_COLUMNS
from slurm_acme.report.model import WORKLOAD_TYPES

#: (gpus, weight) of the GPU demand mix: many CPU and 1-GPU jobs, a few huge.
_GPU_MIX = ((0, 35), (1, 30), (2, 6), (4, 6), (8, 12), (16, 4), (32, 3),
            (64, 1.5), (128, 1), (256, 0.8), (512, 0.4), (1024, 0.3))
_TYPE_WEIGHTS = (40, 5, 15, 8, 25, 7)  # Eval, Pretrain, SFT, MLLM, Debug, Other
#: How much bigger than the base mix each type tends to be (Pretrain is wide).
_TYPE_SCALE = {"Eval": 1, "Pretrain": 16, "SFT": 4, "MLLM": 4, "Debug": 1, "Other": 1}
_STATES = (("COMPLETED", 55), ("CANCELLED", 10), ("CANCELLED by 1000", 2), ("FAILED", 25),
           ("TIMEOUT", 3), ("NODE_FAIL", 2), ("OUT_OF_MEMORY", 2), ("PREEMPTED", 1))
#: A ``trace_seren.csv`` header; a ``trace_kalos.csv`` adds the optional columns.
TRACE_COLUMNS = REQUIRED_COLUMNS
KALOS_TRACE_COLUMNS = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)
TraceStyle = Literal["seren", "kalos"]
#: Seren's times carry +08:00, Kalos's +00:00 (as in the published traces).
_STYLE_TZ = {"seren": timezone(timedelta(hours=8)), "kalos": timezone.utc}


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
    """``2023-07-01 08:00:00+08:00``: the published traces' form (a space, not ``T``)."""
    return datetime.fromtimestamp(ts, tz).isoformat(sep=" ")


def acme_csv_row(job: dict[str, Any], tz: timezone = _STYLE_TZ["seren"]) -> list[Any]:
    """The job as a ``trace_seren.csv`` row (times with the ``+08:00`` offset)."""
    return [_seren_fields(job, tz)[c] for c in TRACE_COLUMNS]


def _seren_fields(job: dict[str, Any], tz: timezone) -> dict[str, Any]:
    return {
        "job_id": job["job_id"], "user": job["user"], "node_num": job["nodes"], "gpu_num": job["gpus"],
        "cpu_num": job["cpus"], "type": job["workload_type"],
        "state": _TRACE_STATE.get(job["state"], job["state"]),
        "submit_time": _iso(job["submit_ts"], tz), "start_time": _iso(job["start_ts"], tz),
        "end_time": _iso(job["end_ts"], tz), "duration": int(job["duration_s"]),
        "queue": int(job["queue_s"]), "gpu_time": int(job["gpu_time_s"]),
    }


def _kalos_fields(job: dict[str, Any], index: int, rng: random.Random) -> dict[str, Any]:
    """Kalos's own ids (``dlc`` + hex) and its pod memory and failure/stop times."""
    fields = _seren_fields(job, _STYLE_TZ["kalos"])
    end = fields["end_time"]
    fields.update({
        "job_id": f"dlc{index:x}",
        "mem_per_pod_GB": rng.choice((64, 128, 256, 512)),
        "shared_mem_per_pod": rng.choice((0, 32, 64)),
        "fail_time": end if fields["state"] in ("FAILED", "NODE_FAIL") else "",
        "stop_time": end,
    })
    return fields


def write_trace_csv(path: str | Path, jobs: Iterable[dict[str, Any]], *, style: TraceStyle = "seren",
                    seed: int = 0) -> int:
    """Write ``jobs`` as an AcmeTrace CSV of ``style``; returns the number of rows.

    ``seed`` drives only the Kalos-only columns, so a Seren file of the same jobs is
    the same whatever it is.
    """
    columns = TRACE_COLUMNS if style == "seren" else KALOS_TRACE_COLUMNS
    extra = random.Random(f"kalos-{seed}")
    count = 0
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(columns)
        for count, job in enumerate(jobs, start=1):
            fields = (_seren_fields(job, _STYLE_TZ["seren"]) if style == "seren"
                      else _kalos_fields(job, count - 1, extra))
            out.writerow([fields[c] for c in columns])
    return count


def write_trace(path: str | Path, rows: int, *, style: TraceStyle = "seren", months: int = 6,
                start: str = "2023-03-01", seed: int = 0, users: int = 300) -> int:
    """A whole trace file: ``rows`` jobs submitted over ``months`` months from ``start`` (UTC)."""
    start_ts = datetime.fromisoformat(start).replace(tzinfo=timezone.utc).timestamp()
    jobs = synthetic_jobs(rows, seed=seed, start_ts=start_ts, span_s=months * 30.4 * 86400,
                          cluster=style, users=users)
    return write_trace_csv(path, jobs, style=style, seed=seed)
