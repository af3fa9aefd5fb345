"""The aggregation step: complete datasets become results and priors; missing shards do not."""

from __future__ import annotations

import json

from slurm_acme.evaluate.aggregate import aggregate_run, collect
from slurm_acme.evaluate.priors import measured_priors
from slurm_acme.evaluate.spec import (
    DatasetSpec,
    RunSpec,
    ShardSpec,
    TrialSpec,
    read_spec,
    write_spec,
)
from slurm_acme.store import evaluate as store_eval


def _spec(db_url: str) -> RunSpec:
    return RunSpec(
        eval_id="e1", checkpoint="/ck", local_dir="/dev/shm/x", backend="builtin", model_size_b=0.001,
        db_url=db_url, nodes=("node1",),
        datasets={"a": DatasetSpec("a", "gen", "gen", "EM", "/a.jsonl"),
                  "b": DatasetSpec("b", "ppl", "ppl", "acc", "/b.jsonl")},
        trials=(TrialSpec("t000", 0, 0, 0, (ShardSpec("a#0of2", "a", 0, 5), ShardSpec("b", "b", 0, 4))),
                TrialSpec("t001", 0, 1, 1, (ShardSpec("a#1of2", "a", 5, 10),))))


def _write(run_dir, trial, shards):  # type: ignore[no-untyped-def]
    (run_dir / "timing" / f"{trial}.json").write_text(json.dumps(
        {"trial": trial, "started": 1.0, "ended": 2.0, "load_s": 0.5, "job_id": "7",
         "shards": {k: {"seconds": gpu, "examples": n} for k, _, n, _, gpu, _ in shards}}))
    (run_dir / "score" / f"{trial}.json").write_text(json.dumps(
        {"trial": trial, "started": 2.0, "ended": 3.0, "shards": [
            {"dataset": d, "key": k, "metric": m, "correct": c, "total": n, "cpu_s": cpu}
            for k, d, n, (m, c), gpu, cpu in [(k, d, n, mc, g, cpu) for k, d, n, mc, g, cpu in shards]]}))


def test_spec_round_trips_through_the_run_dir(tmp_path):
    spec = _spec("sqlite:///x.db")
    write_spec(spec, tmp_path)
    assert read_spec(tmp_path) == spec


def test_a_dataset_with_a_missing_shard_gets_no_result(tmp_path):
    spec = _spec("sqlite:///x.db")
    write_spec(spec, tmp_path)
    _write(tmp_path, "t000", [("a#0of2", "a", 5, ("em", 2), 1.5, 0.1), ("b", "b", 4, ("acc", 3), 2.0, 0.2)])
    results, trials, complete = collect(spec, tmp_path)
    assert [r.dataset for r in results] == ["b"] and not complete
    assert {t["trial"]: t["state"] for t in trials} == {"t000": "SCORED", "t001": "MISSING"}


def test_aggregate_writes_results_priors_and_state(tmp_path, store):
    spec = _spec(store.url)
    write_spec(spec, tmp_path)
    _write(tmp_path, "t000", [("a#0of2", "a", 5, ("em", 2), 1.5, 0.1), ("b", "b", 4, ("acc", 3), 2.0, 0.2)])
    _write(tmp_path, "t001", [("a#1of2", "a", 5, ("em", 1), 2.5, 0.3)])
    aggregate_run(spec, tmp_path)
    rows = {r.dataset: r for r in store_eval.results(store, "e1")}
    assert rows["a"].score == 0.3 and rows["a"].examples == 10
    assert rows["a"].gpu_s == 4.0 and abs(rows["a"].cpu_s - 0.4) < 1e-9
    priors = measured_priors(store, 0.001)
    assert priors["a"].gpu_s == 4.0 and priors["a"].samples == 1 and priors["b"].samples == 1
