"""Cost of the telemetry hooks and of the node collector.

Prints one JSON object: prolog/epilog wall time (median and p95 over 200 runs
of the real executables, with the environment slurmd gives them on Slurm
22.05 and a live collector, i.e. the steady state) and their CPU time; the
same for the floor (an empty ``sh -c :``, which shows how loaded the machine
is) and for the alternative a site might write first (a Python hook that
imports slurm_acme); and the collector's CPU use (percent of one core) at a 1 s interval with 8
synthetic GPUs, flushing to a SQLite store.
Targets: hook medians < 20 ms, p95 < 50 ms, collector < 2 % of a core.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
RUNS = 200
NODE = "bench1"


def hook_env(root: Path, job: int, kind: str) -> dict[str, str]:
    """What slurmd 22.05 passes a Prolog/Epilog with PrologFlags=Alloc (seen on the local cluster)."""
    env = {"SLURM_JOB_ID": str(job), "SLURM_JOBID": str(job), "SLURMD_NODENAME": NODE,
           "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1000", "SLURM_JOB_GID": "1000",
           "SLURM_UID": "1000", "SLURM_JOB_ACCOUNT": "llm", "SLURM_JOB_PARTITION": "gpu",
           "SLURM_JOB_NUM_NODES": "2", "SLURM_NODELIST": f"{NODE},bench2",
           "SLURM_JOB_CPUS_PER_NODE": "16(x2)", "SLURM_CLUSTER_NAME": "acme",
           "SLURM_JOB_RESTART_COUNT": "0", "SLURM_JOB_WORK_DIR": "/home/alice",
           "SLURM_CONF": str(root / "etc" / "slurm.conf"), "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7",
           "GPU_DEVICE_ORDINAL": "0,1,2,3,4,5,6,7",
           "SLURM_SCRIPT_CONTEXT": f"{kind}_slurmd"}
    if kind == "epilog":
        env.update({"SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0",
                    "SLURM_JOB_DERIVED_EC": "0"})
    return env


def time_runs(argv: list[str], envs: list[dict[str, str]]) -> tuple[list[float], list[float]]:
    """Wall time and CPU time (user+sys of the hook and its children) per run, in ms."""
    wall, cpu = [], []
    for env in envs:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall.append((time.perf_counter() - start) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(1000 * (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime))
    return wall, cpu


def summary(name: str, runs: tuple[list[float], list[float]]) -> dict[str, float]:
    wall, cpu = sorted(runs[0]), runs[1]
    return {f"{name}_ms_median": round(statistics.median(wall), 2),
            f"{name}_ms_p95": round(wall[int(0.95 * (len(wall) - 1))], 2),
            f"{name}_cpu_ms_median": round(statistics.median(cpu), 2)}


def wait_for(predicate, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("bench/hooks.py: the collector did not start")
        time.sleep(0.2)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="acme-bench-hooks-") as tmp:
        root = Path(tmp)
        (root / "etc").mkdir()
        (root / "etc" / "slurm.conf").write_text("")
        conf = root / "etc" / "acme.toml"
        conf.write_text(f'[store]\nurl = "sqlite:///{root}/acme.db"\n[telemetry]\n'
                        f'spool_dir = "{root}/spool"\ninterval_s = 1\nflush_interval_s = 15\n'
                        f'synthetic_gpus = 8\n')
        node_dir = root / "spool" / NODE
        node_dir.mkdir(parents=True)
        collector = subprocess.Popen(
            [str(REPO / "sbin" / "acme-collectd"), "--node", NODE, "--log-file",
             str(node_dir / "collectd.log")], env={**os.environ, "ACME_CONF": str(conf)},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        try:
            wait_for(lambda: (node_dir / "collectd.pid").exists(), 120)
            time.sleep(3)
            result: dict[str, object] = {"runs": RUNS}
            for kind, path in (("prolog", "prolog/acme-prolog"), ("epilog", "epilog/acme-epilog")):
                envs = [hook_env(root, 10_000 + i, kind) for i in range(RUNS)]
                result.update(summary(kind, time_runs([str(REPO / path)], envs)))
            # The floor on this machine now: starting a shell that does nothing.
            result.update(summary("floor_empty_sh", time_runs(["/bin/sh", "-c", ":"],
                                                              [{}] * RUNS)))
            python_hook = [sys.executable, "-c",
                           ("import slurm_acme.telemetry.marks, json, time, os; "
                            "open(os.devnull, 'w').write(json.dumps({'ts': time.time()}))")]
            result.update(summary("alternative_python_hook",
                                  time_runs(python_hook, [dict(os.environ)] * 20)))
            wait_for(lambda: not any((node_dir / "marks").glob("*.*")), 120)
            proc = psutil.Process(collector.pid)
            time.sleep(3)
            cpu0, wall0 = sum(proc.cpu_times()[:2]), time.monotonic()
            time.sleep(30)
            cpu1, wall1 = sum(proc.cpu_times()[:2]), time.monotonic()
            result["collector_cpu_percent"] = round(100 * (cpu1 - cpu0) / (wall1 - wall0), 2)
            result["collector_interval_s"] = 1
            result["collector_gpus"] = 8
            result["collector_source"] = "synthetic"
        finally:
            collector.terminate()
            collector.wait(timeout=60)
        print(json.dumps(result))


if __name__ == "__main__":
    main()
