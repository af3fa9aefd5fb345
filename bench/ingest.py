"""Benchmark: `sacme import-trace` against the sqlite3 shell's `.import`.

Generates (once, cached under the work dir) an AcmeTrace-format CSV, imports it
with the real CLI into a fresh SQLite store, and in the same run times the
sqlite3 shell importing the same CSV into a plain table (no types, no indexes,
no validation) -- what a user would otherwise reach for. Prints one JSON object.

    python bench/ingest.py [--rows 1000000] [--workdir /tmp/acme-bench-ingest]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tracegen import write_trace


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def fresh(path: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/acme-bench-ingest"))
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    csv_path = args.workdir / f"trace_seren_{args.rows}.csv"
    if not csv_path.exists():
        write_trace(csv_path, args.rows, style="seren", months=6, seed=1)

    sacme = shutil.which("sacme") or str(Path(sys.executable).with_name("sacme"))
    ours_db = fresh(args.workdir / "acme.db")
    # Create the schema first so both sides time only the import itself.
    subprocess.run([sacme, "--db", f"sqlite:///{ours_db}", "db", "upgrade"], check=True,
                   stdout=subprocess.DEVNULL)
    ours_s = timed([sacme, "--db", f"sqlite:///{ours_db}", "import-trace", str(csv_path),
                    "--cluster", "seren"])
    plain_db = fresh(args.workdir / "plain.db")
    sqlite_s = timed(["sqlite3", str(plain_db), f".import --csv {csv_path} trace"])
    ours_rate = args.rows / ours_s
    sqlite_rate = args.rows / sqlite_s
    print(json.dumps({
        "rows": args.rows,
        "rows_per_s": round(ours_rate),
        "sqlite_import_rows_per_s": round(sqlite_rate),
        "ratio": round(ours_rate / sqlite_rate, 3),
        "seconds": round(ours_s, 2),
        "sqlite_import_seconds": round(sqlite_s, 2),
    }))


if __name__ == "__main__":
    main()
