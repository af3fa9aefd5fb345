"""The two-round bisection, driven by a simulated transport (no Slurm, no torch)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_acme.health.bisection import (
    TEST_PAIR,
    TEST_REPAIR,
    TEST_SINGLE,
    TEST_TRIPLE,
    bisect,
    round1_groups,
    round2_groups,
)
from slurm_acme.health.records import TestResult


def cluster(n: int) -> list[str]:
    return [f"node{i}" for i in range(1, n + 1)]


def faulty(*bad: str):  # type: ignore[no-untyped-def]
    """A transport where any group containing a bad node fails."""
    calls: list[tuple[str, ...]] = []

    def run_test(group: tuple[str, ...]) -> TestResult:
        calls.append(group)
        failed = any(n in bad for n in group)
        return TestResult(group, not failed, "injected" if failed else None,
                          None if failed else 10.0, 0.1)

    run_test.calls = calls  # type: ignore[attr-defined]
    return run_test


def test_healthy_cluster_has_no_bad_node_after_one_round() -> None:
    outcome = bisect(cluster(8), faulty(), seed=1)
    assert outcome.bad == ()
    assert outcome.good == tuple(cluster(8))
    assert (outcome.rounds, outcome.tests) == (1, 4)
    assert all(e.passed and e.test == TEST_PAIR for e in outcome.evidence)


def test_one_bad_node_is_found_in_two_rounds() -> None:
    outcome = bisect(cluster(4), faulty("node3"), seed=7)
    assert outcome.bad == ("node3",)
    assert outcome.rounds == 2
    assert outcome.tests == 4  # 2 pairs, then 2 re-pairs
    round2 = [e for e in outcome.evidence if e.round == 2]
    assert {e.test for e in round2} == {TEST_REPAIR}
    assert [e.passed for e in round2 if "node3" in e.nodes] == [False]


@settings(max_examples=200, deadline=None)
@given(n=st.integers(min_value=4, max_value=300), data=st.data())
def test_any_single_bad_node_is_found_in_exactly_two_rounds(n: int, data) -> None:  # type: ignore[no-untyped-def]
    bad = data.draw(st.sampled_from(cluster(n)))
    seed = data.draw(st.integers(0, 2**32 - 1))
    outcome = bisect(cluster(n), faulty(bad), seed=seed, parallel=1)
    assert outcome.bad == (bad,)
    assert outcome.rounds == 2
    assert not outcome.fallback_single_node


def test_two_bad_nodes_sharing_a_pair_are_both_found() -> None:
    nodes = cluster(8)
    seed = next(s for s in range(1000)
                if ("node1", "node2") in {tuple(sorted(g)) for g in round1_groups(nodes, s)})
    outcome = bisect(nodes, faulty("node1", "node2"), seed=seed)
    assert outcome.bad == ("node1", "node2")
    assert outcome.rounds == 2
    assert outcome.tests == 4 + 2


def test_odd_node_out_joins_a_pair_as_a_three_node_world() -> None:
    groups = round1_groups(cluster(7), seed=3)
    assert sorted(len(g) for g in groups) == [2, 2, 3]
    assert Counter(n for g in groups for n in g) == Counter(cluster(7))
    outcome = bisect(cluster(7), faulty(), seed=3)
    assert [e.test for e in outcome.evidence].count(TEST_TRIPLE) == 1


def test_round1_pairing_is_random_but_seeded() -> None:
    nodes = cluster(16)
    assert round1_groups(nodes, 42) == round1_groups(nodes, 42)
    assert len({tuple(round1_groups(nodes, s)) for s in range(10)}) > 1


def test_round2_cycles_suspects_through_passed_nodes() -> None:
    groups = round2_groups(["s1", "s2", "s3", "s4", "s5"], ["p1", "p2"])
    assert groups == [("s1", "p1"), ("s2", "p2"), ("s3", "p1"), ("s4", "p2"), ("s5", "p1")]


def test_more_suspects_than_passed_nodes_still_takes_two_rounds() -> None:
    # 6 nodes, 2 bad in different pairs: 4 suspects share the 2 passed nodes
    nodes = cluster(6)
    seed = next(s for s in range(1000)
                if not any({"node1", "node2"} <= set(g) for g in round1_groups(nodes, s)))
    outcome = bisect(nodes, faulty("node1", "node2"), seed=seed)
    assert outcome.bad == ("node1", "node2")
    assert (outcome.rounds, outcome.tests) == (2, 3 + 4)
    partners = Counter(e.nodes[1] for e in outcome.evidence if e.round == 2)
    assert sorted(partners.values()) == [2, 2]


def test_no_group_passing_round1_falls_back_to_single_node_tests() -> None:
    outcome = bisect(cluster(4), faulty("node1", "node2", "node3", "node4"), seed=0)
    assert outcome.fallback_single_node
    assert outcome.bad == tuple(cluster(4))
    assert {e.test for e in outcome.evidence if e.round == 2} == {TEST_SINGLE}


def test_fallback_clears_nodes_that_pass_alone() -> None:
    """A fault only between nodes (both pairs fail) leaves every node passing alone."""
    def link_fault(group: tuple[str, ...]) -> TestResult:
        return TestResult(group, len(group) == 1, None if len(group) == 1 else "link")

    outcome = bisect(cluster(4), link_fault, seed=0)
    assert outcome.fallback_single_node
    assert outcome.bad == ()
    assert outcome.rounds == 2 and outcome.tests == 6


def test_a_single_node_is_tested_alone() -> None:
    outcome = bisect(["node1"], faulty("node1"))
    assert outcome.bad == ("node1",)
    assert (outcome.rounds, outcome.tests) == (1, 1)


def test_tests_of_a_round_run_concurrently() -> None:
    """Every round-1 test waits for all the others: only a concurrent round finishes."""
    barrier = threading.Barrier(4, timeout=5)

    def run_test(group: tuple[str, ...]) -> TestResult:
        barrier.wait()
        return TestResult(group, True)

    outcome = bisect(cluster(8), run_test, seed=0)
    assert outcome.bad == () and outcome.tests == 4


def test_progress_reports_each_round() -> None:
    lines: list[str] = []
    bisect(cluster(4), faulty("node2"), seed=0, progress=lines.append)
    assert [line.split(":")[0] for line in lines] == ["round 1", "round 2"]


def test_round2_needs_a_passed_node() -> None:
    with pytest.raises(ValueError):
        round2_groups(["a"], [])


def test_known_good_nodes_test_only_the_suspects_each_paired_with_one() -> None:
    run_test = faulty("node2")
    outcome = bisect(["node1", "node2"], run_test, known_good=["node3"])
    assert outcome.bad == ("node2",) and outcome.good == ("node1",)
    assert sorted(run_test.calls) == [("node1", "node3"), ("node2", "node3")]  # type: ignore[attr-defined]
    assert outcome.rounds == 1 and outcome.tests == 2


def test_known_good_suspects_that_pass_are_cleared() -> None:
    outcome = bisect(["node4"], faulty(), known_good=["node1", "node2"])
    assert outcome.bad == () and outcome.good == ("node4",)
