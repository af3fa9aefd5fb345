"""The opencompass backend through the worker steps, against a stand-in ``opencompass``
(configured as an absolute executable) that writes the real tool's output layout
(the tool is the faked boundary; tests/integration/test_seval_harnesses.py runs the real one)."""

from __future__ import annotations

import sys

from slurm_acme.config import EvaluateConfig
from slurm_acme.evaluate import service, worker
from slurm_acme.evaluate.backends.catalogue import Catalogue
from slurm_acme.evaluate.spec import write_spec
from slurm_acme.store import evaluate as store_eval

FAKE_OPENCOMPASS = '''"""A stand-in for the `opencompass` CLI (the external tool is the faked boundary).

Writes the files the real tool writes: --mode infer -> <work>/<ts>/predictions/<model>/<abbr>.json,
--mode eval --reuse latest -> <work>/<ts>/results/<model>/<abbr>.json (percent).
"""
import argparse, json, os, time
p = argparse.ArgumentParser()
p.add_argument("--datasets", nargs="+", required=True)
p.add_argument("--hf-path", required=True)
p.add_argument("--work-dir", required=True)
p.add_argument("--mode", choices=["all", "infer", "eval", "viz"], default="all")
p.add_argument("--reuse", default=None)
p.add_argument("--hf-type"); p.add_argument("--max-num-workers"); p.add_argument("--hf-num-gpus")
p.add_argument("--batch-size"); p.add_argument("--max-out-len")
p.add_argument("--fail-silently", action="store_true")
a = p.parse_args()
if os.environ.get("FAKE_OC_WRITE_NOTHING"):
    raise SystemExit(0)  # the real tool exits 0 when its tasks failed
assert os.path.isdir(a.hf_path), a.hf_path
runs = sorted(os.listdir(a.work_dir)) if os.path.isdir(a.work_dir) else []
ts = runs[-1] if a.reuse == "latest" and runs else time.strftime("%Y%m%d_%H%M%S")
model = a.hf_path.rstrip("/").split("/")[-1] + "_hf"
rows = ["dataset,version,metric,mode," + model]
for cfg in a.datasets:
    abbr = cfg.rsplit("_", 1)[0]
    kind = "predictions" if a.mode == "infer" else "results"
    folder = os.path.join(a.work_dir, ts, kind, model)
    os.makedirs(folder, exist_ok=True)
    if a.mode == "infer":
        doc = {"0": {"origin_prompt": "q", "prediction": "a"}, "1": {"origin_prompt": "r", "prediction": "b"}}
    else:
        assert os.path.isdir(os.path.join(a.work_dir, ts, "predictions", model)), "eval before infer"
        doc = {"accuracy": 62.5}
        rows.append(f"{abbr},abc123,accuracy,ppl,62.50")
    json.dump(doc, open(os.path.join(folder, f"{abbr}.json"), "w"))
if a.mode == "eval":
    os.makedirs(os.path.join(a.work_dir, ts, "summary"), exist_ok=True)
    open(os.path.join(a.work_dir, ts, "summary", "summary_" + ts + ".csv"), "w").write("\\n".join(rows) + "\\n")
'''

CATALOGUE = Catalogue("opencompass", frozenset({"ceval_ppl", "SuperGLUE_BoolQ_ppl", "cmmlu_ppl"}),
                      abbrs={"ceval_ppl": ("ceval",), "SuperGLUE_BoolQ_ppl": ("SuperGLUE_BoolQ",), "cmmlu_ppl": ("cmmlu",)})


def _fake_tool(tmp_path):  # type: ignore[no-untyped-def]
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "opencompass").write_text(f"#!{sys.executable}\n{FAKE_OPENCOMPASS}")
    (tools / "opencompass").chmod(0o755)
    return tools / "opencompass"


def _prepare(tmp_path, store, eval_id):  # type: ignore[no-untyped-def]
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "model.safetensors").write_bytes(b"\0" * 2000)
    cfg = EvaluateConfig(work_dir=str(tmp_path / "work"), local_dir=str(tmp_path / "shm"), gpus_per_node=2,
                         backend="opencompass", opencompass={"executable": str(_fake_tool(tmp_path))})
    prepared = service.prepare(cfg, str(ckpt), "ceval,BoolQ,cmmlu", nodes=["n1"], db_url=store.url,
                               size_b=7.0, eval_id=eval_id, catalogue=CATALOGUE)
    write_spec(prepared.spec, prepared.run_dir)
    store_eval.create_run(store, eval_id=eval_id, checkpoint=str(ckpt), model_size_b=7.0, cluster="t",
                          plan={}, job_ids={}, run_dir=str(prepared.run_dir), mode="jobs", state="SUBMITTED")
    return prepared


def test_opencompass_infer_on_gpu_then_eval_on_cpu_then_aggregate(tmp_path, store):
    prepared = _prepare(tmp_path, store, "oc1")
    assert all(s.count == 1 for s in prepared.plan.shards), "whole datasets only for external tools"
    run_dir = prepared.run_dir
    assert worker.main(["preload", "--run-dir", str(run_dir), "--node", "0"]) == 0
    for t in prepared.spec.node_trials(0):
        assert worker.main(["trial", "--run-dir", str(run_dir), "--node", "0", "--index", str(t.index)]) == 0
        assert worker.main(["score", "--run-dir", str(run_dir), "--node", "0", "--index", str(t.index)]) == 0
    assert worker.main(["aggregate", "--run-dir", str(run_dir)]) == 0
    rows = {r.dataset: r for r in store_eval.results(store, "oc1")}
    assert set(rows) == {"ceval", "BoolQ", "cmmlu"}
    assert all(r.metric == "accuracy" and abs(r.score - 0.625) < 1e-9 for r in rows.values())
    assert all(r.examples == 2 for r in rows.values()), "n is the tool's count of predictions"
    assert store_eval.get_run(store, "oc1").state == "COMPLETED"


def test_a_tool_that_exits_0_without_output_fails_the_trial(tmp_path, store, monkeypatch):
    prepared = _prepare(tmp_path, store, "oc2")
    run_dir = prepared.run_dir
    monkeypatch.setenv("FAKE_OC_WRITE_NOTHING", "1")
    assert worker.main(["preload", "--run-dir", str(run_dir), "--node", "0"]) == 0
    assert worker.main(["trial", "--run-dir", str(run_dir), "--node", "0", "--index", "0"]) == 1
    trial = prepared.spec.node_trials(0)[0]
    assert not (run_dir / "timing" / f"{trial.trial_id}.json").exists()
    note = (run_dir / "failed" / f"{trial.trial_id}-trial.json").read_text()
    assert "OpenCompass left no" in note and "-infer.log" in note
    assert worker.main(["aggregate", "--run-dir", str(run_dir)]) == 0
    assert store_eval.get_run(store, "oc2").state == "PARTIAL"
