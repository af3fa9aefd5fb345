"""Write a synthetic AcmeTrace-format job trace (for benchmarks and demos).

The generator is :mod:`slurm_acme.report.synthetic` (the one the tests and the
report benchmark use); this is its command line, and ``write_trace`` is what
the other benchmarks import from here.

    python bench/tracegen.py OUT.csv --rows 1000000 --style seren --months 6
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from slurm_acme.report.synthetic import write_trace

__all__ = ["write_trace"]


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
