"""Generate synthetic AcmeTrace-format job traces (for benchmarks and demos).

The mix follows the paper's shape: many short Eval/Debug jobs, few long,
wide Pretrain jobs; CPU jobs (gpu_num 0) sprinkled in. Deterministic per seed.

    python bench/tracegen.py OUT.csv --rows 1000000 --style seren --months 6
"""

from __future__ import annotations

import argparse
import csv
import random
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

SEREN_COLUMNS = ["job_id", "user", "node_num", "gpu_num", "cpu_num", "type", "state",
                 "submit_time", "start_time", "end_time", "duration", "queue", "gpu_time"]
KALOS_COLUMNS = [*SEREN_COLUMNS, "mem_per_pod_GB", "shared_mem_per_pod", "fail_time", "stop_time"]

#: type -> (weight, gpu choices, median duration s)
MIX = {
    "Eval": (0.45, [0, 1, 1, 2, 4, 8], 300),
    "Debug": (0.20, [0, 1, 2, 8], 120),
    "SFT": (0.15, [8, 16, 32, 64], 3600),
    "Pretrain": (0.05, [64, 128, 256, 512, 1024], 20000),
    "MLLM": (0.05, [8, 16, 64, 256], 7200),
    "Other": (0.10, [0, 0, 1, 8], 600),
}
STATES = ["COMPLETED"] * 70 + ["CANCELLED"] * 15 + ["FAILED"] * 12 + ["TIMEOUT"] * 2 + ["NODE_FAIL"]


def _fmt(ts: float, offset_h: int) -> str:
    moment = datetime.fromtimestamp(ts, timezone(timedelta(hours=offset_h)))
    return moment.isoformat(sep=" ")


def write_trace(path: Path, rows: int, *, style: str = "seren", months: int = 6,
                start: str = "2023-03-01", seed: int = 0) -> None:
    """Write ``rows`` jobs submitted uniformly over ``months`` months from ``start``."""
    rng = random.Random(seed)
    offset_h = 8 if style == "seren" else 0
    t0 = datetime.fromisoformat(start).replace(tzinfo=timezone.utc).timestamp()
    span = months * 30.4 * 86400
    types = list(MIX)
    weights = [MIX[t][0] for t in types]
    columns = SEREN_COLUMNS if style == "seren" else KALOS_COLUMNS
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(columns)
        # Real traces are in submission order, with job ids rising over time.
        submits = sorted(int(t0 + rng.random() * span) for _ in range(rows))
        for i, submit in enumerate(submits):
            kind = rng.choices(types, weights)[0]
            _w, gpu_choices, median = MIX[kind]
            gpus = rng.choice(gpu_choices)
            nodes = max(1, (gpus + 7) // 8)
            cpus = max(4, gpus * 16) if gpus else rng.choice([1, 2, 4, 16])
            state = rng.choice(STATES)
            queue = int(rng.lognormvariate(3.0, 2.0))
            duration = int(rng.lognormvariate(0, 1.5) * median)
            start_ts = submit + queue
            end_ts = start_ts + duration
            job_id = f"dlc{i:x}" if style == "kalos" else str(100000 + i)
            row = [job_id, f"u{rng.randrange(300)}", nodes, gpus, cpus, kind, state,
                   _fmt(submit, offset_h), _fmt(start_ts, offset_h), _fmt(end_ts, offset_h),
                   duration, queue, duration * gpus]
            if style == "kalos":
                failed = state in ("FAILED", "NODE_FAIL")
                row += [rng.choice([64, 128, 256, 512]), rng.choice([0, 32, 64]),
                        _fmt(end_ts, offset_h) if failed else "", _fmt(end_ts, offset_h)]
            out.writerow(row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--style", choices=["seren", "kalos"], default="seren")
    ap.add_argument("--months", type=int, default=6)
    ap.add_argument("--start", default="2023-03-01")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t = time.perf_counter()
    write_trace(args.out, args.rows, style=args.style, months=args.months, start=args.start, seed=args.seed)
    print(f"wrote {args.rows} rows to {args.out} in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
