"""The two-round allgather bisection, with the test transport injected.

Round 1 splits the nodes, in a seeded random order, into 2-node groups and
tests each group; an odd node out joins the last pair as a 3-node world, so
every node is in exactly one round-1 test. Nodes of a passing group are good.
Every node of a failing group is a suspect.

Round 2 re-pairs each suspect with a node that passed, cycling through the
passed nodes: the test then fails only when the suspect itself is faulty, so
its verdict is the verdict of that one test. Round 2 is one round whatever the
number of suspects: when suspects outnumber passed nodes (a failed triple in a
5-node check, or many faults) a passed node sits in more than one concurrent
test, sharing its bandwidth, which a ``min_busbw`` threshold should allow for.
If nothing passed in round 1 there is no known good partner: each node is
then tested alone (single-node fallback), which still finds a node whose own
collective fails but cannot blame a link.

Nothing here knows about Slurm or torch: ``run_test`` is any callable from a
group of nodes to a :class:`TestResult`, so the simulator and unit tests drive
this module directly and the srun transport lives in its own module.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from slurm_acme.health.records import Evidence, TestResult

Group = tuple[str, ...]
RunTest = Callable[[Group], TestResult]
Progress = Callable[[str], None]

TEST_PAIR = "allgather:pair"
TEST_TRIPLE = "allgather:triple"
TEST_REPAIR = "allgather:repair"
TEST_SINGLE = "allgather:single"


@dataclass(frozen=True)
class BisectionOutcome:
    """Verdicts of the collective tests (pre-checks are not part of it)."""

    bad: tuple[str, ...]
    good: tuple[str, ...]
    rounds: int
    tests: int
    evidence: tuple[Evidence, ...]
    fallback_single_node: bool


def round1_groups(nodes: Sequence[str], seed: int | None = None) -> list[Group]:
    """Pairs in a seeded random order; an odd node out makes the last pair a triple."""
    order = list(dict.fromkeys(nodes))
    random.Random(seed).shuffle(order)
    if len(order) == 1:
        return [(order[0],)]
    groups: list[Group] = [(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]
    if len(order) % 2:
        groups[-1] = (*groups[-1], order[-1])
    return groups


def round2_groups(suspects: Sequence[str], passed: Sequence[str]) -> list[Group]:
    """Pair suspect ``i`` with ``passed[i % len(passed)]``."""
    if not passed:
        raise ValueError("round 2 needs at least one node that passed round 1")
    return [(suspect, passed[i % len(passed)]) for i, suspect in enumerate(suspects)]


def run_round(groups: Sequence[Group], run_test: RunTest, parallel: int) -> list[TestResult]:
    """Run one round's tests concurrently (``parallel`` at a time); results in group order."""
    if parallel <= 1 or len(groups) <= 1:
        return [run_test(group) for group in groups]
    with ThreadPoolExecutor(max_workers=min(parallel, len(groups))) as pool:
        return list(pool.map(run_test, groups))


def bisect(nodes: Sequence[str], run_test: RunTest, *, seed: int | None = None,
           parallel: int = 64, progress: Progress | None = None,
           known_good: Sequence[str] = ()) -> BisectionOutcome:
    """Find the nodes whose collective fails, in two rounds of concurrent tests.

    With ``known_good`` (nodes that just passed, e.g. a job's idle spares) every node
    of ``nodes`` is already a suspect: round 1 is skipped and each is paired with a
    known-good node, so a restart inside an allocation checks only what failed.
    """
    say = progress or (lambda _msg: None)
    nodes = list(dict.fromkeys(nodes))
    if not nodes:
        return BisectionOutcome((), (), 0, 0, (), False)
    evidence: list[Evidence] = []
    good = [n for n in dict.fromkeys(known_good) if n not in nodes]
    if good:
        groups = round2_groups(nodes, good)
        say(f"suspects only: {len(groups)} test(s), each paired with a known-good node")
        return _judge_suspects(nodes, groups, TEST_REPAIR, run_test, parallel,
                               evidence=evidence, rounds=1, tests=0, fallback=False)

    groups = round1_groups(nodes, seed)
    say(f"round 1: {len(groups)} test(s) over {len(nodes)} node(s)")
    results = run_round(groups, run_test, parallel)
    evidence += [Evidence.from_result(r, _round1_name(r.group), 1) for r in results]
    passed = [n for r in results if r.passed for n in r.group]
    suspects = [n for r in results if not r.passed for n in r.group]
    tests = len(groups)
    if not suspects:
        return BisectionOutcome((), tuple(nodes), 1, tests, tuple(evidence), False)
    if len(nodes) == 1:
        return BisectionOutcome(tuple(nodes), (), 1, tests, tuple(evidence), False)

    fallback = not passed
    if fallback:
        say("round 1: no group passed; falling back to a single-node test of each node")
        groups, name = [(n,) for n in suspects], TEST_SINGLE
    else:
        groups, name = round2_groups(suspects, passed), TEST_REPAIR
    say(f"round 2: {len(groups)} test(s) of {len(suspects)} suspect(s)")
    return _judge_suspects(nodes, groups, name, run_test, parallel,
                           evidence=evidence, rounds=2, tests=tests, fallback=fallback)


def _judge_suspects(nodes: Sequence[str], groups: Sequence[Group], name: str, run_test: RunTest,
                    parallel: int, *, evidence: list[Evidence], rounds: int, tests: int,
                    fallback: bool) -> BisectionOutcome:
    """Run the tests that judge each suspect (a group's first node) and split ``nodes``.

    Both ways into the judging round (after round 1, or straight from known-good
    nodes) end here, so a suspect is bad exactly when its own group failed.
    """
    results = run_round(groups, run_test, parallel)
    evidence = [*evidence, *(Evidence.from_result(r, name, 2) for r in results)]
    bad = {r.group[0] for r in results if not r.passed}
    return BisectionOutcome(tuple(n for n in nodes if n in bad),
                            tuple(n for n in nodes if n not in bad),
                            rounds, tests + len(groups), tuple(evidence), fallback)


def _round1_name(group: Group) -> str:
    return {1: TEST_SINGLE, 2: TEST_PAIR}.get(len(group), TEST_TRIPLE)
