"""Benchmark failure diagnosis: corpus accuracy and ``sacme diagnose`` vs ``grep -E -f``.

Builds a synthetic multi-rank training log (default 1 GB: per-rank step logs,
progress bars, DeepSpeed/NCCL chatter, routine fp16 overflow warnings) into
which a real corpus excerpt is embedded as the failure, followed by what the
surviving ranks print. Times ``sacme diagnose`` on it against ``grep -E -f``
with the same rule patterns, in the same run, and measures peak memory.
Also scores the rule book on the labelled corpus (rules alone; rules then
retrieval with each case held out of its own index), on the holdout split
no rule was written from, and on every corpus excerpt embedded in a small
noisy log; compares retrieval leave-one-out (TF-IDF, the sentence embedding
alone, and the mix the embedding path uses); times the embedding path's
queries (logs/s, wall and per CPU-second) and the vector store at 100,000
cases (SQLite BLOBs + numpy; Postgres bytea + numpy when ``--pg-url`` or
``ACME_TEST_PG_URL`` reaches a server). Prints ONE JSON object.

    .venv/bin/python bench/diagnose.py              # 1 GB, the real run
    .venv/bin/python bench/diagnose.py --size-mb 50 # quick check
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from slurm_acme.diagnose import diagnose
from slurm_acme.diagnose.api import default_rulebook
from slurm_acme.diagnose.corpus import load_corpus
from slurm_acme.diagnose.evaluation import evaluate

RANKS = 8


def to_ere(pattern: str) -> str:
    """Our rule patterns are written in the Python/ERE common subset; map the rest."""
    return pattern.replace(r"\d", "[0-9]")


def nccl_init(rng: random.Random) -> list[str]:
    lines = []
    for rank in range(RANKS):
        host, dev, pid = f"node{rank // 4 + 1}", rank % 4, 40000 + rank
        pre = f"{rank}: {host}:{pid}:{pid}"
        lines += [
            f"{pre} [{dev}] NCCL INFO Bootstrap : Using ib0:10.0.0.{rank // 4 + 1}<0>",
            f"{pre} [{dev}] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation",
            f"{pre} [{dev}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.{rank // 4 + 1}<0>",
            f"{pre} [{dev}] NCCL INFO cudaDriverVersion 12040",
            f"{pre} [{dev}] NCCL INFO NCCL version 2.18.5+cuda12.2",
        ]
        for ch in range(32):
            lines.append(f"{pre} [{dev}] NCCL INFO Channel {ch:02d}/32 : 0 1 2 3 4 5 6 7")
            lines.append(f"{pre} [{dev}] NCCL INFO Channel {ch:02d}/0 : {rank}[{dev}] -> {(rank + 1) % RANKS}[{(dev + 1) % 4}] via P2P/IPC/read")
        lines.append(f"{pre} [{dev}] NCCL INFO comm 0x{rng.getrandbits(40):x} rank {rank} nranks {RANKS} cudaDev {dev} busId {rng.randrange(16, 255):x}000 - Init COMPLETE")
    return lines


def step_lines(step: int, rng: random.Random) -> list[str]:
    """What one training step prints across ranks."""
    loss = 2.0 + 8.0 / (1 + step / 500) + rng.random() * 0.05
    out = []
    for rank in range(RANKS):
        out.append(
            f"{rank}: [rank{rank}]: [2024-05-{1 + step // 90000:02d} {step // 3600 % 24:02d}:{step // 60 % 60:02d}:{step % 60:02d},{rng.randrange(1000):03d}] "
            f"[INFO] [timer.py:260:stop] epoch=0/micro_step={step * 4}/global_step={step}, RunningAvgSamplesPerSec={80 + rng.random() * 5:.6f}, "
            f"CurrSamplesPerSec={80 + rng.random() * 5:.6f}, MemAllocated={31 + rng.random():.2f}GB, MaxMemAllocated={42 + rng.random():.2f}GB"
        )
    out.append(
        f"7: [rank7]:  iteration {step:8d}/  250000 | consumed samples: {step * 512:12d} | consumed tokens: {step * 512 * 2048:14d} | "
        f"elapsed time per iteration (ms): {4200 + rng.random() * 80:.1f} | learning rate: {3e-4 * min(1, step / 2000):.3E} | global batch size:   512 | "
        f"lm loss: {loss:.6E} | loss scale: 65536.0 | grad norm: {0.3 + rng.random():.3f} | actual seqlen:  2048 | "
        f"number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: {121 + rng.random():.3f} | TFLOPs: {178 + rng.random():.2f} |"
    )
    done = step % 2724
    out.append(f"0: {100 * done // 2724:3d}%|{'#' * (done * 10 // 2724):10s}| {done}/2724 [{step // 3600:02d}:{step // 60 % 60:02d}:{step % 60:02d}<{(2724 - done) // 60:02d}:{(2724 - done) % 60:02d}, {1.3 + rng.random():.2f}s/it]")
    if step % 500 == 0:
        out.append(f"0: [rank0]: saving checkpoint at iteration {step:8d} to /lustre/ckpt/run42")
        out.append(f"0: [rank0]:   successfully saved checkpoint at iteration {step:8d} to /lustre/ckpt/run42")
    if step % 997 == 0:
        rank = rng.randrange(RANKS)
        out.append(f"{rank}: /usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:61: UserWarning: None of the inputs have requires_grad=True. Gradients will be None")
        out.append(f"{rank}: [rank{rank}]:[W ProcessGroupNCCL.cpp:1856] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no effect for point-to-point collectives. (function operator())")
    return out


def overflow_warmup() -> list[str]:
    """DeepSpeed's routine fp16 loss-scale search at the start of training."""
    scale, out = 4294967296, []
    for _ in range(16):
        out.append(f"0: [2024-05-01 00:00:0{_ % 10},000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {scale}, reducing to {scale // 2}")
        scale //= 2
    return out


def failure_tail(case_text: str, rank: int, *, echoes: bool = True) -> list[str]:
    """The excerpt from one rank, then what the survivors print."""
    out = [f"{rank}: {line}" for line in case_text.splitlines()]
    for other in range(RANKS if echoes else 0):
        if other != rank:
            out.append(
                f"{other}: [rank{other}]:[E ProcessGroupNCCL.cpp:616] [Rank {other}] Watchdog caught collective operation timeout: "
                f"WorkNCCL(SeqNum=46951, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600036 milliseconds before timing out."
            )
    out += [f"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {4000 + r} closing signal SIGTERM" for r in range(3)]
    return out


def write_big_log(path: Path, size_bytes: int, case_text: str, seed: int = 7) -> int:
    rng = random.Random(seed)
    lines = 0
    with path.open("w", encoding="utf-8") as out:
        head = nccl_init(rng) + overflow_warmup()
        out.write("\n".join(head) + "\n")
        lines += len(head)
        step = 1
        while out.tell() < size_bytes:
            block = []
            for _ in range(200):
                block += step_lines(step, rng)
                step += 1
            out.write("\n".join(block) + "\n")
            lines += len(block)
        tail = failure_tail(case_text, rank=3)
        out.write("\n".join(tail) + "\n")
        lines += len(tail)
    return lines


def embedded_accuracy(cases, seed: int = 11) -> dict:
    """Every corpus excerpt inside a small noisy multi-rank log, with and
    without the survivors' NCCL timeouts after it."""
    rng = random.Random(seed)
    noise = nccl_init(rng) + overflow_warmup()
    for step in range(1, 300):
        noise += step_lines(step, rng)
    cat = ori = 0
    misses = []
    for case in cases:
        for echoes in (True, False):
            verdict = diagnose([*noise, *failure_tail(case.text, rank=5, echoes=echoes)], cases=[])
            cat += verdict.category == case.category
            ori += verdict.origin == case.origin
            if verdict.category != case.category:
                misses.append(f"{case.id}{'+echoes' if echoes else ''}->{verdict.category}")
    n = 2 * len(cases)
    return {"embedded_category_accuracy": round(cat / n, 4),
            "embedded_origin_accuracy": round(ori / n, 4), "embedded_misses": misses}


def holdout_scores(cases) -> dict:
    from slurm_acme.diagnose.evaluation import holdout

    report = holdout(cases, default_rulebook()).to_dict()
    return {f"holdout_{k}": v for k, v in report.items() if k != "confusions"}


def retrieval_comparison(cases) -> dict:
    """Leave-one-out accuracy of each retrieval at its calibrated threshold (precision >= 0.9)."""
    from slurm_acme.diagnose import embedding
    from slurm_acme.diagnose.evaluation import retrieval_loo

    out = {"retrieval_loo_tfidf": retrieval_loo(cases, kind="tfidf").to_dict()}
    if not embedding.embedding_available():
        out["retrieval_loo_embedding"] = "the [embed] extra is not installed"
        return out
    out["retrieval_loo_embedding_mixed"] = retrieval_loo(cases, kind="embedding").to_dict()
    weight = embedding.EMBEDDING_WEIGHT
    try:
        embedding.EMBEDDING_WEIGHT = 1.0
        out["retrieval_loo_embedding_alone"] = retrieval_loo(cases, kind="embedding").to_dict()
    finally:
        embedding.EMBEDDING_WEIGHT = weight
    return out


def embedding_throughput(cases, n: int = 400) -> dict:
    """Queries per second through the embedding path (model warm), wall and CPU time."""
    from slurm_acme.diagnose import embedding

    if not embedding.embedding_available():
        return {}
    start = time.perf_counter()
    embedding.encoder()
    load_s = time.perf_counter() - start
    index = embedding.EmbeddingIndex([c for c in cases if c.split == "tune"])
    queries = [c.text for c in cases][:n]
    queries = (queries * (n // len(queries) + 1))[:n]
    wall, cpu = time.perf_counter(), time.process_time()
    index.propose_many(queries)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"embedding_model_load_s": round(load_s, 2), "embedding_queries": n,
            "embedding_logs_per_s": round(n / wall, 1), "embedding_logs_per_cpu_s": round(n / cpu, 1),
            "load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}


def vector_store_scale(url: str, n: int = 100_000, seed: int = 3) -> dict:
    """Write ``n`` case vectors to a fresh store, then time loading them and one query."""
    import numpy as np

    from slurm_acme.diagnose.embedding import DIMENSIONS, MODEL_NAME
    from slurm_acme.store import failures as db
    from slurm_acme.store import open_store

    rng = np.random.default_rng(seed)
    store = open_store(url)
    try:
        start = time.perf_counter()
        db.add_cases(store, [(f"synthetic case {i}", "Synthetic", "infrastructure", "bench") for i in range(n)])
        ids = [c.id for c in db.load_cases(store)][:n]
        vectors = rng.standard_normal((len(ids), DIMENSIONS)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for lo in range(0, len(ids), 10_000):
            db.save_vectors(store, MODEL_NAME, dict(zip(ids[lo:lo + 10_000], vectors[lo:lo + 10_000], strict=True)))
        write_s = time.perf_counter() - start
        start = time.perf_counter()
        loaded = db.load_vectors(store, MODEL_NAME)
        matrix = np.stack(list(loaded.values()))
        load_s = time.perf_counter() - start
        start = time.perf_counter()
        for query in vectors[:20]:
            np.argpartition(-(matrix @ query), 3)[:3]
        query_ms = (time.perf_counter() - start) / 20 * 1000
    finally:
        store.dispose()
    return {"cases": len(loaded), "write_s": round(write_s, 1), "load_s": round(load_s, 2),
            "query_ms": round(query_ms, 2)}


def vector_store_benchmarks(workdir: Path, pg_url: str | None) -> dict:
    out = {"vector_store_sqlite_100k": vector_store_scale(f"sqlite:///{workdir / 'vectors.db'}")}
    if pg_url:
        import uuid

        import psycopg

        name = f"acme_diag_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            out["vector_store_postgres_100k"] = vector_store_scale(f"{pg_url.rsplit('/', 1)[0]}/{name}")
        finally:
            with psycopg.connect(pg_url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return out


def timed(argv: list[str], **kwargs) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    return time.perf_counter() - start, proc


#: Forks and execs ``argv`` from a fresh, small interpreter and writes ``[exit code, peak RSS KiB]``
#: of that child to the file named by ``ACME_RSS_OUT``.
_RSS_PROBE = ("import json, os, sys\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    os.execvp(sys.argv[1], sys.argv[1:])\n"
              "_, status, usage = os.wait4(pid, 0)\n"
              "with open(os.environ['ACME_RSS_OUT'], 'w') as f:\n"
              "    json.dump([os.waitstatus_to_exitcode(status), usage.ru_maxrss], f)\n")


def timed_rss(argv: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess, int]:
    """Run ``argv``; wall seconds, the result and the peak RSS (KiB) of that process alone.

    A child forked from this process would be charged this process's own RSS until its
    exec (Linux keeps the old address space's high-water mark across exec), and by then
    this process holds the embedding model: it is forked from a small interpreter instead.
    """
    with tempfile.TemporaryDirectory() as tmp:
        rss_out = Path(tmp) / "rss.json"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _RSS_PROBE, *argv], env={**env, "ACME_RSS_OUT": str(rss_out)},
                              capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
        code, peak_kb = json.loads(rss_out.read_text())
    return elapsed, subprocess.CompletedProcess(argv, code, proc.stdout, proc.stderr), peak_kb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024, help="size of the synthetic log (default 1024)")
    parser.add_argument("--case", default="NetworkError-07", help="corpus case embedded as the failure")
    parser.add_argument("--workdir", default=None, help="where to write the log (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument("--pg-url", default=os.environ.get("ACME_TEST_PG_URL"),
                        help="Postgres admin URL for the 100,000-case vector store measurement")
    parser.add_argument("--no-scale", action="store_true", help="skip the 100,000-case vector store measurement")
    args = parser.parse_args()

    cases = load_corpus()
    book = default_rulebook()
    report = evaluate(cases, book)
    result: dict = {
        "corpus_cases": len(cases),
        "corpus_category_accuracy": round(report.rules_then_retrieval.category_accuracy, 4),
        "corpus_origin_accuracy": round(report.rules_then_retrieval.origin_accuracy, 4),
        "rules_only_category_accuracy": round(report.rules.category_accuracy, 4),
        "rules_only_origin_accuracy": round(report.rules.origin_accuracy, 4),
        "retrieval_only_loo_category_accuracy": round(report.retrieval_only.category_accuracy, 4),
        "retrieval_only_loo_origin_accuracy": round(report.retrieval_only.origin_accuracy, 4),
        "retrieval_only_loo_unknown": report.retrieval_only.unknown,
    }
    result.update(embedded_accuracy(cases))
    result.update(holdout_scores(cases))
    result.update(retrieval_comparison(cases))
    result.update(embedding_throughput(cases))

    case = next(c for c in cases if c.id == args.case)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="acme-bench-diag-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "train.log"
    start = time.perf_counter()
    lines = write_big_log(log, int(args.size_mb * (1 << 20)), case.text)
    result["log_bytes"] = log.stat().st_size
    result["log_lines"] = lines
    result["generate_s"] = round(time.perf_counter() - start, 1)
    patterns = workdir / "patterns.ere"
    patterns.write_text("\n".join(to_ere(r.pattern) for r in book.rules) + "\n")
    if not args.no_scale:
        result.update(vector_store_benchmarks(workdir, args.pg_url))

    sacme = shutil.which("sacme", path=str(Path(sys.executable).parent)) or "sacme"
    env = {**os.environ, "ACME_CONF": str(workdir / "none.toml")}
    (workdir / "none.toml").write_text("")
    # Warm the page cache for both tools alike.
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)
    sacme_s, proc, peak_kb = timed_rss([sacme, "--db", f"sqlite:///{workdir / 'acme.db'}", "diagnose", str(log),
                                        "--json", "--explain"], env)
    if proc.returncode != 0:
        raise SystemExit(f"sacme diagnose failed ({proc.returncode}): {proc.stderr.strip()}")
    verdict = json.loads(proc.stdout.splitlines()[0])
    # -i: some rules match case-insensitively (grep cannot say so per pattern).
    grep_s, grep_proc = timed(["grep", "-E", "-i", "-c", "-f", str(patterns), str(log)], env={**env, "LC_ALL": "C"})
    if grep_proc.returncode not in (0, 1):
        raise SystemExit(f"grep failed: {grep_proc.stderr.strip()}")

    result.update({
        "big_log_expected": case.category,
        "big_log_category": verdict["category"],
        "big_log_origin": verdict["origin"],
        "big_log_action": verdict["action"],
        "big_log_rule": verdict["rule_id"],
        "sacme_s": round(sacme_s, 2),
        "grep_s": round(grep_s, 2),
        "grep_matching_lines": int(grep_proc.stdout.strip() or 0),
        "lines_per_s": round(lines / sacme_s),
        "grep_lines_per_s": round(lines / grep_s),
        "ratio": round(grep_s / sacme_s, 3),
        "compression_ratio": verdict["compression"]["ratio"],
        "compressed_lines": verdict["compression"]["lines_out"],
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "memory_under_200mb": peak_kb / 1024 < 200,
    })
    if not args.keep and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
