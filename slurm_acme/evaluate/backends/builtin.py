"""The builtin backend: a small causal LM checkpoint run with PyTorch (CPU or GPU).

Loads a checkpoint written by :func:`slurm_acme.models.tiny_gpt.save_pretrained`
once per trial and runs each shard: ``gen`` datasets are greedy completions,
``ppl`` datasets pick the choice with the highest log-likelihood. Predictions
go to JSONL files that the CPU scoring jobs read.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from slurm_acme.evaluate.examples import read_examples


class BuiltinModel:
    """A loaded checkpoint plus the two inference modes the registry uses."""

    def __init__(self, checkpoint: str | Path) -> None:
        import os

        import torch

        from slurm_acme.models.tiny_gpt import load_pretrained

        # One thread per CPU Slurm gave us: more only thrash when trials share a node.
        torch.set_num_threads(int(os.environ.get("SLURM_CPUS_PER_TASK") or 1))
        self.torch = torch
        self.model, self.tokenizer = load_pretrained(checkpoint)
        self.block = self.model.config.block_size

    def generate(self, prompt: str, max_new_tokens: int) -> str:
        keep = max(1, self.block - max_new_tokens)
        ids = self.tokenizer.encode(prompt)[-keep:]
        idx = self.torch.tensor([ids], dtype=self.torch.long)
        out = self.model.generate(idx, max_new_tokens, temperature=0)
        return self.tokenizer.decode(out[0, len(ids):].tolist())

    def choice_logprob(self, prompt: str, choice: str) -> float:
        ids = self.tokenizer.encode(prompt + choice)[-self.block:]
        n_choice = min(len(self.tokenizer.encode(choice)), len(ids) - 1)
        idx = self.torch.tensor([ids], dtype=self.torch.long)
        with self.torch.no_grad():
            logits, _ = self.model(idx[:, :-1])
            logp = self.torch.log_softmax(logits, dim=-1)
            picked = logp.gather(-1, idx[:, 1:].unsqueeze(-1)).squeeze(-1)[0]
        return float(picked[-n_choice:].sum()) if n_choice > 0 else 0.0


def predict_shard(model: BuiltinModel, data_path: str, start: int, stop: int, mode: str,
                  out_file: Path) -> dict[str, Any]:
    """Run one shard; write one JSON line per example; return its timing."""
    began = time.monotonic()
    examples = read_examples(data_path, start, stop)
    rows = []
    for ex in examples:
        row = dict(ex)
        if mode == "ppl":
            scores = [model.choice_logprob(ex["prompt"], c) for c in ex["choices"]]
            row["prediction"] = max(range(len(scores)), key=scores.__getitem__)
        else:
            row["prediction"] = model.generate(ex["prompt"], int(ex.get("max_new_tokens", 16)))
        rows.append(row)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out_file)
    return {"examples": len(rows), "seconds": time.monotonic() - began}
