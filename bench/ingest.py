"""Benchmark: `sacme import-trace` against the sqlite3 shell's `.import` and `psql \\copy`.

Generates (once, cached under the work dir) an AcmeTrace-format CSV, imports it
with the real CLI into a fresh SQLite store, and in the same run times the
sqlite3 shell importing the same CSV into a plain table (no types, no indexes,
no validation) -- what a user would otherwise reach for. Then the same for
Postgres (``--pg-url``, a server where databases may be created; skipped with
``--no-pg``): the CLI into a fresh database against ``psql \\copy`` into a
typed table (integers, ``timestamptz``, doubles) of the same CSV. Each side runs
``--rounds`` times, the two interleaved (so a busy moment hits both), and the
medians are compared. Prints one JSON object; ``ratio`` and ``pg_ratio`` are our
rows/s over the alternative's (target >= 0.5 each, issue 22).

    python bench/ingest.py [--rows 1000000] [--rounds 3] [--workdir /tmp/acme-bench-ingest] [--pg-url URL | --no-pg]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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


#: The typed table ``psql \\copy`` fills: what a Postgres user would write for the CSV.
PG_TRACE_TABLE = """CREATE TABLE trace (
    job_id text, "user" text, node_num integer, gpu_num integer, cpu_num integer, type text, state text,
    submit_time timestamptz, start_time timestamptz, end_time timestamptz,
    duration double precision, queue double precision, gpu_time double precision)"""


def psql(url: str, sql: str) -> None:
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql], check=True, stdout=subprocess.DEVNULL)


def sqlite_side(sacme: str, csv_path: Path, workdir: Path) -> tuple[float, float]:
    """Seconds for ``sacme import-trace`` into a fresh SQLite store (its schema made
    first, so only the import is timed) and for the sqlite3 shell's ``.import``."""
    ours_db = fresh(workdir / "acme.db")
    subprocess.run([sacme, "--db", f"sqlite:///{ours_db}", "db", "upgrade"], check=True, stdout=subprocess.DEVNULL)
    ours_s = timed([sacme, "--db", f"sqlite:///{ours_db}", "import-trace", str(csv_path), "--cluster", "seren"])
    plain_db = fresh(workdir / "plain.db")
    sqlite_s = timed(["sqlite3", str(plain_db), f".import --csv {csv_path} trace"])
    return ours_s, sqlite_s


def postgres_side(sacme: str, csv_path: Path, admin_url: str) -> tuple[float, float]:
    """Seconds for ``sacme import-trace`` into a fresh database and for ``psql \\copy``
    into a typed table in another; both databases are dropped afterwards."""
    base = admin_url.rsplit("/", 1)[0]
    ours, plain = f"acme_bench_ours_{os.getpid()}", f"acme_bench_copy_{os.getpid()}"
    for name in (ours, plain):
        psql(admin_url, f'CREATE DATABASE "{name}"')
    try:
        subprocess.run([sacme, "--db", f"{base}/{ours}", "db", "upgrade"], check=True, stdout=subprocess.DEVNULL)
        ours_s = timed([sacme, "--db", f"{base}/{ours}", "import-trace", str(csv_path), "--cluster", "seren"])
        psql(f"{base}/{plain}", PG_TRACE_TABLE)
        copy_s = timed(["psql", "-q", "-v", "ON_ERROR_STOP=1", f"{base}/{plain}", "-c",
                        f"\\copy trace FROM '{csv_path}' WITH (FORMAT csv, HEADER true)"])
    finally:
        for name in (ours, plain):
            psql(admin_url, f'DROP DATABASE IF EXISTS "{name}"')
    return ours_s, copy_s


def fresh(path: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3, help="runs of each side; their medians are compared")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/acme-bench-ingest"))
    ap.add_argument("--pg-url", default=os.environ.get("ACME_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test"),
                    help="a Postgres database of a user who may create databases")
    ap.add_argument("--no-pg", action="store_true", help="time SQLite only")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    csv_path = args.workdir / f"trace_seren_{args.rows}.csv"
    if not csv_path.exists():
        write_trace(csv_path, args.rows, style="seren", months=6, seed=1)

    sacme = shutil.which("sacme") or str(Path(sys.executable).with_name("sacme"))
    sqlite_runs = [sqlite_side(sacme, csv_path, args.workdir) for _ in range(args.rounds)]
    ours_s = statistics.median(r[0] for r in sqlite_runs)
    sqlite_s = statistics.median(r[1] for r in sqlite_runs)
    ours_rate = args.rows / ours_s
    sqlite_rate = args.rows / sqlite_s
    out: dict[str, object] = {
        "rows": args.rows,
        "rounds": args.rounds,
        "rows_per_s": round(ours_rate),
        "sqlite_import_rows_per_s": round(sqlite_rate),
        "ratio": round(ours_rate / sqlite_rate, 3),
        "seconds": round(ours_s, 2),
        "sqlite_import_seconds": round(sqlite_s, 2),
    }
    if not args.no_pg:
        pg_runs = [postgres_side(sacme, csv_path, args.pg_url) for _ in range(args.rounds)]
        pg_s = statistics.median(r[0] for r in pg_runs)
        copy_s = statistics.median(r[1] for r in pg_runs)
        out.update({
            "pg_rows_per_s": round(args.rows / pg_s),
            "pg_copy_rows_per_s": round(args.rows / copy_s),
            "pg_ratio": round(copy_s / pg_s, 3),
            "pg_seconds": round(pg_s, 2),
            "pg_copy_seconds": round(copy_s, 2),
        })
    out["target_ratio"] = 0.5
    out["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
