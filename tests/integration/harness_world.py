"""What an evaluation owner brings to ``seval``: a Hugging Face causal LM and local tasks.

Built at test time, nothing downloaded: a 2-layer GPT-2 (``transformers.GPT2Config``)
with a byte-level BPE tokenizer trained on local text, briefly trained so its
answers are neither all right nor all wrong; two local tasks (a multiple-choice
log-likelihood task and a generate-until task) as JSONL files; and the task
definitions each tool reads: lm-eval YAMLs for ``--include_path`` and OpenCompass
dataset configs under ``<config_dir>/datasets`` for ``--config-dir``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

#: Environment that keeps both tools off the network.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_EVALUATE_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

CHOICE_TASK, GEN_TASK = "acme_tiny_mc", "acme_tiny_gen"
OC_CHOICE, OC_GEN = "acme_tiny_mc_ppl", "acme_tiny_gen_gen"

_WORDS = ["red", "blue", "green", "cold", "hot", "wet", "dry", "big", "small", "fast", "slow", "old"]


@dataclass(frozen=True)
class HarnessWorld:
    model: Path
    include_path: Path  # lm-eval task YAMLs
    config_dir: Path  # OpenCompass config dir (datasets/*.py)
    registry: Path  # seval registry CSV naming both tools' tasks
    choice_n: int
    gen_n: int


def _examples(seed: int = 7) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    choice, gen = [], []
    for i in range(12):
        right, wrong = rng.sample(_WORDS, 2)
        label = rng.randrange(2)
        options = [right, wrong] if label == 0 else [wrong, right]
        choice.append({"question": f"item {i} is {right} . item {i} is", "A": options[0], "B": options[1],
                       "choices": options, "label": label, "answer": "AB"[label]})
    for _ in range(10):
        a, b = rng.randrange(10), rng.randrange(10)
        answer = str((a + b) % 10)
        gen.append({"question": f"{a} plus {b} is", "answer": answer, "answers": [answer]})
    return choice, gen


def _train_text(choice: list[dict], gen: list[dict]) -> list[str]:
    lines = [f"{c['question']} {c['A' if c['label'] == 0 else 'B']}" for c in choice]
    lines += [f"{g['question']} {g['answer']}" for g in gen[::2]]  # half the sums: not all right
    lines += [f"{a} plus {b} is {(a + b) % 10}" for a in range(10) for b in range(0, 10, 3)]
    return lines


def build_model(folder: Path, texts: list[str], *, steps: int = 80) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    torch.manual_seed(0)
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(texts * 4, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                  unk_token="<|endoftext|>", pad_token="<|endoftext|>")
    config = GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=48, n_layer=2, n_head=2,
                        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    model = GPT2LMHeadModel(config)
    batch = tok([t + "\n" for t in texts], return_tensors="pt", padding=True)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(**batch, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _lm_eval_tasks(folder: Path, choice_file: Path, gen_file: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{CHOICE_TASK}.yaml").write_text(
        f"task: {CHOICE_TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {json.dumps(str(choice_file))}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: label\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
        "metadata:\n  version: 1.0\n", encoding="utf-8")
    (folder / f"{GEN_TASK}.yaml").write_text(
        f"task: {GEN_TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {json.dumps(str(gen_file))}\ntest_split: test\noutput_type: generate_until\n"
        'doc_to_text: "{{question}}"\ndoc_to_target: "{{answer}}"\n'
        'generation_kwargs:\n  until: ["\\n", "."]\n  max_gen_toks: 4\n  do_sample: false\n'
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
        "    ignore_case: true\n    ignore_punctuation: true\n"
        "filter_list:\n  - name: strip\n    filter:\n      - function: regex\n"
        '        regex_pattern: "(\\\\d)"\n      - function: take_first\n'
        "metadata:\n  version: 1.0\n", encoding="utf-8")


_OC_HEADER = '''from opencompass.datasets import CustomDataset
from opencompass.openicl.icl_evaluator import AccEvaluator, EMEvaluator
from opencompass.openicl.icl_inferencer import GenInferencer, PPLInferencer
from opencompass.openicl.icl_prompt_template import PromptTemplate
from opencompass.openicl.icl_retriever import ZeroRetriever
'''


def _opencompass_configs(folder: Path, choice_file: Path, gen_file: Path) -> None:
    datasets = folder / "datasets"
    datasets.mkdir(parents=True, exist_ok=True)
    (datasets / f"{OC_CHOICE}.py").write_text(_OC_HEADER + f'''
acme_tiny_mc_datasets = [dict(
    abbr="{CHOICE_TASK}", type=CustomDataset, path={str(choice_file)!r},
    reader_cfg=dict(input_columns=["question", "A", "B"], output_column="answer"),
    infer_cfg=dict(
        prompt_template=dict(type=PromptTemplate, template={{
            "A": "{{question}} {{A}}", "B": "{{question}} {{B}}"}}),
        retriever=dict(type=ZeroRetriever), inferencer=dict(type=PPLInferencer)),
    eval_cfg=dict(evaluator=dict(type=AccEvaluator)))]
''', encoding="utf-8")
    (datasets / f"{OC_GEN}.py").write_text(_OC_HEADER + f'''
acme_tiny_gen_datasets = [dict(
    abbr="{GEN_TASK}", type=CustomDataset, path={str(gen_file)!r},
    reader_cfg=dict(input_columns=["question"], output_column="answers"),
    infer_cfg=dict(
        prompt_template=dict(type=PromptTemplate, template="{{question}}"),
        retriever=dict(type=ZeroRetriever), inferencer=dict(type=GenInferencer, max_out_len=4,
                                                         stopping_criteria=["\\n", "."])),
    eval_cfg=dict(evaluator=dict(type=EMEvaluator)))]
''', encoding="utf-8")


def build_world(base: Path) -> HarnessWorld:
    """Model, data, both tools' task definitions, and a seval registry file naming them."""
    choice, gen = _examples()
    data = base / "data"
    data.mkdir(parents=True, exist_ok=True)
    choice_file, gen_file = data / "tiny_mc.jsonl", data / "tiny_gen.jsonl"
    choice_file.write_text("".join(json.dumps(c) + "\n" for c in choice), encoding="utf-8")
    gen_file.write_text("".join(json.dumps(g) + "\n" for g in gen), encoding="utf-8")
    model = build_model(base / "tiny-hf", _train_text(choice, gen))
    _lm_eval_tasks(base / "lm_eval_tasks", choice_file, gen_file)
    _opencompass_configs(base / "oc_configs", choice_file, gen_file)
    registry = base / "my_datasets.csv"
    registry.write_text(
        "name,num_examples,mode,metric,cpu_heavy,oc_cost_units,lm_eval_task,opencompass_config,groups\n"
        f"{CHOICE_TASK},{len(choice)},ppl,acc,no,{2 * len(choice)},{CHOICE_TASK},{OC_CHOICE},mine\n"
        f"{GEN_TASK},{len(gen)},gen,exact match,no,{4 * len(gen)},{GEN_TASK},{OC_GEN},mine\n",
        encoding="utf-8")
    return HarnessWorld(model, base / "lm_eval_tasks", base / "oc_configs", registry, len(choice), len(gen))
