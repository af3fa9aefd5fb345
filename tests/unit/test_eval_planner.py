"""Planner properties: coverage, the shard and slot bounds, determinism, ordering."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_acme.evaluate.planner import Resources, plan_evaluation
from slurm_acme.evaluate.priors import Prior, resolve_priors
from slurm_acme.evaluate.registry import Dataset, load_registry


@st.composite
def workloads(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(min_value=1, max_value=14))
    datasets, priors = [], {}
    for i in range(n):
        examples = draw(st.integers(min_value=1, max_value=3000))
        heavy = draw(st.sampled_from(["no", "no", "yes", "partial"]))
        ds = Dataset(name=f"d{i}", num_examples=examples, mode="gen", metric="EM", cpu_heavy=heavy,
                     oc_cost_units=examples)
        datasets.append(ds)
        priors[ds.name] = Prior(gpu_s=draw(st.floats(min_value=0.5, max_value=5000)),
                                cpu_s=draw(st.floats(min_value=0.0, max_value=3000)))
    res = Resources(nodes=draw(st.integers(1, 4)), gpus_per_node=draw(st.integers(1, 8)),
                    cpu_slots=draw(st.integers(1, 64)), cpus_per_score_task=draw(st.integers(1, 4)),
                    trial_overhead_s=draw(st.floats(0, 30)), preload_s=draw(st.floats(0, 10)))
    return datasets, priors, res


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(workloads())
def test_every_example_is_covered_exactly_once(work):
    datasets, priors, res = work
    plan = plan_evaluation(datasets, priors, res)
    for ds in datasets:
        ranges = sorted((s.start, s.stop) for s in plan.shards if s.dataset == ds.name)
        assert ranges[0][0] == 0 and ranges[-1][1] == ds.num_examples
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        assert all(start < stop for start, stop in ranges)
        counts = {s.count for s in plan.shards if s.dataset == ds.name}
        assert counts == {len(ranges)}


@SETTINGS
@given(workloads())
def test_no_shard_exceeds_total_over_slots_unless_it_is_one_example(work):
    datasets, priors, res = work
    plan = plan_evaluation(datasets, priors, res)
    cap = plan.total_gpu_s / res.gpu_slots
    for shard in plan.shards:
        assert shard.gpu_s <= cap * (1 + 1e-9) or shard.stop - shard.start == 1


@SETTINGS
@given(workloads())
def test_no_slot_is_over_the_list_scheduling_bound(work):
    datasets, priors, res = work
    plan = plan_evaluation(datasets, priors, res)
    trial_total = sum(t.gpu_s for t in plan.trials)
    biggest = max(t.gpu_s for t in plan.trials)
    bound = res.preload_s + trial_total / res.gpu_slots + biggest
    for trials in plan.slot_trials().values():
        assert trials[-1].end_s <= bound * (1 + 1e-9)
        for a, b in itertools.pairwise(trials):  # a slot runs one trial at a time
            assert b.start_s >= a.end_s - 1e-9
    assert plan.predicted_makespan_s >= plan.lower_bound_s - 1e-6


@SETTINGS
@given(workloads(), st.integers(0, 2**16))
def test_same_inputs_and_seed_give_the_same_plan(work, seed):
    datasets, priors, res = work
    assert plan_evaluation(datasets, priors, res, seed=seed) == plan_evaluation(datasets, priors, res, seed=seed)


def test_long_cpu_verification_runs_first_on_each_slot():
    datasets = load_registry().select("all")
    plan = plan_evaluation(datasets, resolve_priors(datasets, 7.0), Resources(nodes=1, cpu_slots=64))
    for trials in plan.slot_trials().values():
        heavy = [t.cpu_heavy for t in trials]
        assert heavy == sorted(heavy, reverse=True), "a light trial ran before a CPU-heavy one"


def test_large_datasets_are_sharded_and_small_ones_merged():
    datasets = load_registry().select("all")
    plan = plan_evaluation(datasets, resolve_priors(datasets, 7.0), Resources(nodes=1, cpu_slots=64))
    assert any(s.count > 1 for s in plan.shards if s.dataset == "bbh")
    assert any(len(t.shards) > 1 for t in plan.trials)
    assert len(plan.trials) < len(datasets)


def test_the_plan_beats_the_baseline_and_stays_near_the_bound_for_63_datasets():
    datasets = load_registry().select("all")
    priors = resolve_priors(datasets, 7.0)
    for nodes in (1, 4):
        plan = plan_evaluation(datasets, priors, Resources(nodes=nodes, cpu_slots=64 * nodes))
        assert plan.predicted_makespan_s < plan.baseline_makespan_s
        assert plan.gap <= 0.10
