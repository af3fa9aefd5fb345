"""Simulate the two-round allgather bisection against recursive binary search.

    python bench/health_sim.py [--trials 20] [--seed 0]

For N in {16, 64, 256, 1024} nodes and k in {1, 2, 4} bad nodes, each trial
draws the bad nodes and round 1's pairing at random; a test fails exactly when
its group holds a bad node. Both methods run on the same library code path the
real check uses (``slurm_acme.health.bisection.bisect`` with a simulated
transport). A second, flaky model lets a bad node fail each test only with
probability ``--flaky-p``: there a bad node can pass round 1 and become a
"known good" partner, which is where two rounds miss nodes or blame good ones.
Binary search is the alternative an operator would script: one
allgather over the whole group, then split every failing group in halves, one
allgather per half, down to single nodes. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_acme.health.bisection import bisect, round1_groups
from slurm_acme.health.records import TestResult

SIZES = (16, 64, 256, 1024)
BAD_COUNTS = (1, 2, 4)


def simulated_transport(bad: set[str], fail_p: float = 1.0,  # type: ignore[no-untyped-def]
                        rng: random.Random | None = None):
    """A test fails when a bad node in it misbehaves (always, or with ``fail_p``)."""
    def run_test(group: tuple[str, ...]) -> TestResult:
        failed = any(n in bad and (fail_p >= 1 or rng.random() < fail_p) for n in group)
        return TestResult(group, not failed, "simulated fault" if failed else None)

    return run_test


def binary_search(nodes: Sequence[str], run_test) -> tuple[set[str], int, int]:  # type: ignore[no-untyped-def]
    """Recursive halving, one allgather per group per level: (found, rounds, tests)."""
    level, found, rounds, tests = [tuple(nodes)], set(), 0, 0
    while level:
        rounds += 1
        tests += len(level)
        failing = [g for g in level if not run_test(g).passed]
        found |= {g[0] for g in failing if len(g) == 1}
        level = [half for g in failing if len(g) > 1
                 for half in (g[:len(g) // 2], g[len(g) // 2:])]
    return found, rounds, tests


def bad_share_a_pair(nodes: Sequence[str], bad: set[str], seed: int) -> bool:
    return any(len(bad & set(g)) > 1 for g in round1_groups(nodes, seed))


def row(n: int, k: int, trials: int, rng: random.Random, fail_p: float = 1.0) -> dict:
    nodes = [f"node{i:04d}" for i in range(n)]
    two_rounds, two_tests, bs_rounds, bs_tests = [], [], [], []
    found_all = found_all_bs = True
    false_pos = false_pos_bs = shared = missed = missed_bs = 0
    for _ in range(trials):
        bad = set(rng.sample(nodes, k))
        seed = rng.getrandbits(32)
        outcome = bisect(nodes, simulated_transport(bad, fail_p, rng), seed=seed, parallel=1)
        two_rounds.append(outcome.rounds)
        two_tests.append(outcome.tests)
        found_all &= bad <= set(outcome.bad)
        missed += len(bad - set(outcome.bad))
        false_pos += len(set(outcome.bad) - bad)
        shared += bad_share_a_pair(nodes, bad, seed)
        found, rounds, tests = binary_search(nodes, simulated_transport(bad, fail_p, rng))
        bs_rounds.append(rounds)
        bs_tests.append(tests)
        found_all_bs &= bad <= found
        missed_bs += len(bad - found)
        false_pos_bs += len(found - bad)
    return {
        "nodes": n, "bad": k, "trials": trials,
        "rounds_two_round": max(two_rounds),
        "tests_two_round": round(statistics.mean(two_tests), 1),
        "rounds_binary_search": max(bs_rounds),
        "tests_binary_search": round(statistics.mean(bs_tests), 1),
        "found_all": found_all,
        "found_all_binary_search": found_all_bs,
        "missed_two_round": missed,
        "missed_binary_search": missed_bs,
        "false_positives_two_round": false_pos,
        "false_positives_binary_search": false_pos_bs,
        "trials_bad_nodes_paired_together": shared,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flaky-p", type=float, default=0.5,
                   help="failure probability per test of a bad node in the flaky model")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    started = time.perf_counter()
    rows = [row(n, k, args.trials, rng) for n in SIZES for k in BAD_COUNTS]
    print(json.dumps({
        "bench": "health_sim",
        "model": "a test fails iff its group holds a bad node",
        "trials_per_row": args.trials, "seed": args.seed,
        "two_round_finds_k1_in_2_rounds_at_every_n": all(
            r["rounds_two_round"] == 2 and r["found_all"] for r in rows if r["bad"] == 1),
        "rows": rows,
        "flaky_model": f"a bad node fails each test it is in with probability {args.flaky_p}",
        "flaky_rows": [row(n, k, args.trials, rng, args.flaky_p) for n in SIZES for k in BAD_COUNTS],
        "sim_seconds": round(time.perf_counter() - started, 2),
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
