"""The opencompass backend through the worker steps, against a stand-in ``opencompass``
on PATH that writes the real tool's output layout (the tool is the faked boundary)."""

from __future__ import annotations

import os
import sys

from slurm_acme.config import EvaluateConfig
from slurm_acme.evaluate import service, worker
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
a = p.parse_args()
assert os.path.isdir(a.hf_path), a.hf_path
runs = sorted(os.listdir(a.work_dir)) if os.path.isdir(a.work_dir) else []
ts = runs[-1] if a.reuse == "latest" and runs else time.strftime("%Y%m%d_%H%M%S")
for cfg in a.datasets:
    abbr = cfg.rsplit("_", 1)[0]
    kind = "predictions" if a.mode == "infer" else "results"
    folder = os.path.join(a.work_dir, ts, kind, "hf_model")
    os.makedirs(folder, exist_ok=True)
    if a.mode == "infer":
        doc = {"0": {"origin_prompt": "q", "prediction": "a"}}
    else:
        assert os.path.isdir(os.path.join(a.work_dir, ts, "predictions")), "eval before infer"
        doc = {"accuracy": 62.5}
    json.dump(doc, open(os.path.join(folder, f"{abbr}.json"), "w"))
'''


def test_opencompass_infer_on_gpu_then_eval_on_cpu_then_aggregate(tmp_path, monkeypatch, store):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "opencompass").write_text(f"#!{sys.executable}\n{FAKE_OPENCOMPASS}")
    (tools / "opencompass").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"\0" * 2000)
    cfg = EvaluateConfig(work_dir=str(tmp_path / "work"), local_dir=str(tmp_path / "shm"), gpus_per_node=2,
                         backend="opencompass")
    prepared = service.prepare(cfg, str(ckpt), "ceval,BoolQ,mbpp", nodes=["n1"], db_url=store.url,
                               size_b=7.0, eval_id="oc1")
    assert all(s.count == 1 for s in prepared.plan.shards), "whole datasets only for external tools"
    run_dir = prepared.run_dir
    write_spec(prepared.spec, run_dir)
    store_eval.create_run(store, eval_id="oc1", checkpoint=str(ckpt), model_size_b=7.0, cluster="t",
                          plan={}, job_ids={}, run_dir=str(run_dir), mode="jobs")
    assert worker.main(["preload", "--run-dir", str(run_dir), "--node", "0"]) == 0
    for t in prepared.spec.node_trials(0):
        assert worker.main(["trial", "--run-dir", str(run_dir), "--node", "0", "--index", str(t.index)]) == 0
        assert worker.main(["score", "--run-dir", str(run_dir), "--node", "0", "--index", str(t.index)]) == 0
    assert worker.main(["aggregate", "--run-dir", str(run_dir)]) == 0
    rows = {r.dataset: r for r in store_eval.results(store, "oc1")}
    assert set(rows) == {"ceval", "BoolQ", "mbpp"}
    assert all(r.metric == "accuracy" and abs(r.score - 0.625) < 1e-9 for r in rows.values())
    assert store_eval.get_run(store, "oc1").state == "COMPLETED"
