"""Benchmark: ``sacme`` start-up beside ``python3 -c pass``.

Times, as separate processes and interleaved round by round (so a burst of
load on a shared machine hits every command alike), the commands people wait
on at a prompt:

- ``sacme --help``;
- ``sacme diagnose`` on a one-line log (recorded in the store, as by default);
- ``sacme status RUN --json`` on a finished run;
- ``sacme report --month M --format json`` on a store of a few hundred jobs;

and in the same rounds ``python3 -c pass`` (the interpreter on PATH: the
floor of any Python tool) and this venv's ``python -c pass`` (that floor plus
the venv's site start-up, which every ``sacme`` process pays too). Prints one
JSON object: each median in seconds, its ratio to ``python3 -c pass``, the
targets from issue 22 and the load average.

The package's bytecode is compiled first, as ``pip install`` of the wheel does
(``bytecode`` in the JSON): a source checkout run with ``PYTHONDONTWRITEBYTECODE``
(as this project's machines set it) otherwise recompiles every module it imports
in every process, 60-90 ms a command that no installed site pays.
``--no-compile`` times that source-only case instead.

    python bench/cli.py [--rounds 15] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bytecode import compile_like_pip
from tracegen import write_trace

#: Seconds, issue 22 (on an idle machine of this kind).
TARGETS = {"help_s": 0.15, "diagnose_s": 0.25, "status_s": 0.25}


def once(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return elapsed


def prepare(work: Path, sacme: str, env: dict[str, str]) -> dict[str, list[str]]:
    """A store with a finished run and a small trace; the commands to time."""
    from slurm_acme.store import open_store
    from slurm_acme.store import runs as run_store

    subprocess.run([sacme, "db", "upgrade"], env=env, check=True, stdout=subprocess.DEVNULL)
    trace = work / "trace.csv"
    write_trace(trace, 500, style="seren", months=1, start="2023-03-01", seed=3)
    subprocess.run([sacme, "import-trace", str(trace), "--cluster", "seren"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = open_store(env["ACME_DB"])
    try:
        now = time.time()
        run_store.create_run(store, run_id="bench-run", name="bench", cluster="seren", user=None,
                             spec="{}", workdir=str(work), created_ts=now - 60, job_id="1001",
                             state="COMPLETED")
        run_store.start_attempt(store, run_id="bench-run", attempt=1, job_id="1001",
                                nodelist="node1", start_ts=now - 50)
        run_store.end_attempt(store, run_id="bench-run", attempt=1, job_id="1001", end_ts=now - 5,
                              outcome="COMPLETED", exit_code=0, last_step=100)
    finally:
        store.dispose()
    log = work / "one.log"
    log.write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    python3 = shutil.which("python3") or "/usr/bin/python3"
    return {
        "python3_pass_s": [python3, "-c", "pass"],
        "venv_python_pass_s": [sys.executable, "-c", "pass"],
        "help_s": [sacme, "--help"],
        "diagnose_s": [sacme, "diagnose", str(log)],
        "status_s": [sacme, "status", "bench-run", "--json"],
        "report_s": [sacme, "report", "--month", "2023-03", "--cluster", "seren", "--format", "json"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-compile", action="store_true",
                        help="do not compile the package's bytecode first (a source checkout's case)")
    args = parser.parse_args()
    bytecode = compile_like_pip(not args.no_compile)
    bindir = Path(sys.executable).parent
    sacme = str(bindir / "sacme") if (bindir / "sacme").exists() else shutil.which("sacme") or "sacme"
    work = Path(tempfile.mkdtemp(prefix="acme-bench-cli-"))
    env = {**os.environ, "ACME_DB": f"sqlite:///{work / 'acme.db'}", "HOME": str(work),
           "XDG_DATA_HOME": str(work / "data")}
    env.pop("ACME_CONF", None)
    try:
        commands = prepare(work, sacme, env)
        load_before = os.getloadavg()[0]
        times: dict[str, list[float]] = {k: [] for k in commands}
        for argv in commands.values():  # warm the page cache once
            once(argv, env)
        for _ in range(args.rounds):
            for key, argv in commands.items():
                times[key].append(once(argv, env))
        medians = {k: statistics.median(v) for k, v in times.items()}
        floor = medians["python3_pass_s"]
        out: dict[str, object] = {k: round(v, 3) for k, v in medians.items()}
        out.update({k.removesuffix("_s") + "_over_python3": round(v / floor, 1)
                    for k, v in medians.items() if k not in ("python3_pass_s",)})
        out["targets_s"] = TARGETS
        out["meets_targets"] = {k: medians[k] <= t for k, t in TARGETS.items()}
        out["bytecode"] = bytecode
        out["rounds"] = args.rounds
        out["load_avg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        out["cpus"] = os.cpu_count()
        print(json.dumps(out))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
