"""Evaluation runs, results and EWMA priors in the store (SQLite and Postgres)."""

from __future__ import annotations

import pytest

from slurm_acme.evaluate.priors import measured_priors, record_measurements
from slurm_acme.store import evaluate as store_eval


def test_priors_start_from_the_first_measurement_then_average(store):
    first = record_measurements(store, 7.0, {"mmlu": (100.0, 10.0)})
    assert first["mmlu"].samples == 1 and first["mmlu"].gpu_s == 100.0
    second = record_measurements(store, 6.96, {"mmlu": (50.0, 20.0), "bbh": (7.0, 1.0)})
    assert second["mmlu"].samples == 2 and second["mmlu"].gpu_s == pytest.approx(75.0)
    loaded = measured_priors(store, 7.0)
    assert loaded["mmlu"] == second["mmlu"] and loaded["bbh"].samples == 1
    assert measured_priors(store, 70.0) == {}


def test_runs_results_and_trials_round_trip(store):
    store_eval.create_run(store, eval_id="e1", checkpoint="/ck", model_size_b=0.001, cluster="acme",
                          plan={"trials": []}, job_ids={"aggregate": "9"}, run_dir="/w/e1", mode="jobs",
                          state="SUBMITTED")
    store_eval.create_run(store, eval_id="e2", checkpoint="/ck", model_size_b=0.001, cluster="acme",
                          plan={}, job_ids={}, run_dir="/w/e2", mode="jobs",
                          state="SUBMITTED")
    store_eval.record_results(store, "e1", [store_eval.EvalResult("tiny_code", "pass@1", 0.5, 12, 3.0, 1.5)])
    store_eval.record_results(store, "e1", [store_eval.EvalResult("tiny_code", "pass@1", 0.25, 12, 3.0, 1.5)])
    store_eval.record_trials(store, "e1", [{"trial": "t000", "node": "node1", "slot": 0, "state": "SCORED",
                                            "gpu_s": 2.0, "load_s": 1.0, "cpu_s": 0.5}])
    store_eval.set_run_state(store, "e1", "COMPLETED", finished=True)
    run = store_eval.get_run(store, "e1")
    assert run.state == "COMPLETED" and run.job_ids == {"aggregate": "9"} and run.finished_ts
    assert [r.score for r in store_eval.results(store, "e1")] == [0.25]
    assert store_eval.trials(store, "e1")[0]["node"] == "node1"
    # the newest run with results, not merely the newest run
    assert store_eval.latest_run_for(store, "/ck").eval_id == "e1"
    assert {r.eval_id for r in store_eval.list_runs(store)} == {"e1", "e2"}
