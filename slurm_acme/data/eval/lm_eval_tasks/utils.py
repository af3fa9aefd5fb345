"""Helpers the shipped lm-eval task YAMLs call with ``!function utils.NAME``.

Each follows what OpenCompass's loader, post-processor or evaluator for the same
dataset does (named in each docstring), so lm-eval sees the same examples and
scores answers the same way. Imports of heavy libraries happen inside the
functions: lm-eval imports this module whenever it loads a task's config.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

# FewCLUE tnews label_desc -> the Chinese label OpenCompass's TNewsDataset prompts with.
TNEWS_LABELS = {
    "news_agriculture": "农业新闻", "news_travel": "旅游新闻", "news_game": "游戏新闻",
    "news_tech": "科技类别公司新闻", "news_sports": "体育类别新闻", "news_edu": "初升高教育新闻",
    "news_entertainment": "娱乐圈新闻", "news_finance": "投资资讯", "news_military": "军事类别常识",
    "news_car": "车辆新闻", "news_house": "楼市新闻", "news_world": "环球不含中国类别新闻",
    "news_culture": "书籍文化历史类别新闻", "news_story": "故事类别新闻", "news_stock": "股票市场类别新闻",
}
TNEWS_CHOICES = list(TNEWS_LABELS.values())
NLI_LABELS = ("contradiction", "entailment", "neutral")


def _keep_labels(docs, labels: Sequence[str]):  # type: ignore[no-untyped-def]
    """Drop examples whose label is not one of ``labels`` (FewCLUE/OCNLI mark
    annotator disagreement with '-'), as OpenCompass's loaders do."""
    return docs.filter(lambda d: str(d["label"]) in labels)


# ---------------------------------------------------------------- FewCLUE

def fewclue_nli_docs(docs):  # type: ignore[no-untyped-def]
    return _keep_labels(docs, NLI_LABELS)


def fewclue_ocnli_choices(doc) -> list[str]:  # type: ignore[no-untyped-def]
    """OpenCompass FewCLUE_ocnli_fc_ppl_c08300: one whole text per label."""
    s1, s2 = doc["sentence1"], doc["sentence2"]
    return [f"阅读文章：{s1}\n根据上文，回答如下问题： {s2}？\n答：错",
            f"阅读文章：{s1}\n根据上文，回答如下问题： {s2}？\n答：对",
            f"如果{s1}为真，那么{s2}也为真吗?可能"]


def fewclue_ocnli_target(doc) -> int:  # type: ignore[no-untyped-def]
    return NLI_LABELS.index(doc["label"])


def tnews_docs(docs):  # type: ignore[no-untyped-def]
    return docs.filter(lambda d: d["label_desc"] in TNEWS_LABELS)


def tnews_target(doc) -> int:  # type: ignore[no-untyped-def]
    return TNEWS_CHOICES.index(TNEWS_LABELS[doc["label_desc"]])


def chid_choices(doc) -> list[str]:  # type: ignore[no-untyped-def]
    """OpenCompass CHIDDataset: the passage with each candidate idiom in the blank."""
    return [f"以下句子是否通顺？\n{doc['content'].replace('#idiom#', c)}\n这个句子是通顺的。"
            for c in doc["candidates"]]


def csl_choices(doc) -> list[str]:  # type: ignore[no-untyped-def]
    """OpenCompass FewCLUE_csl_ppl_841b62: the abstract alone (label 0) or with its keywords (1)."""
    return [f"摘要：{doc['abst']}", f"摘要：{doc['abst']}\n关键词：{'，'.join(doc['keyword'])}"]


# ------------------------------------------------------------------ CLUE

def clue_nli_docs(docs):  # type: ignore[no-untyped-def]
    """clue/clue cmnli and ocnli mark unlabelled rows with -1."""
    return docs.filter(lambda d: d["label"] >= 0)


def cmrc_answer(resps, docs):  # type: ignore[no-untyped-def]
    """OpenCompass cmrc_postprocess / drcd_postprocess: the text after '答案是', if any."""
    out = []
    for group in resps:
        kept = []
        for text in group:
            if "答案是" in text:
                text = text.split("答案是", 1)[1]
            kept.append(text.strip())
        out.append(kept)
    return out


# ------------------------------------------------------------------ LCSTS

def _ngrams(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def _f1(overlap: int, pred: int, ref: int) -> float:
    if not overlap or not pred or not ref:
        return 0.0
    p, r = overlap / pred, overlap / ref
    return 2 * p * r / (p + r)


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def jieba_rouge(doc, results) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """OpenCompass JiebaRougeEvaluator: ROUGE-1/2/L F1 over jieba tokens (OpenCompass
    writes percent; lm-eval's 0..1 scale is kept, as for its other metrics)."""
    import jieba

    pred = [t for t in jieba.cut(lcsts_postprocess(results[0])) if t.strip()]
    ref = [t for t in jieba.cut(doc["summary"]) if t.strip()]
    out = {}
    for n in (1, 2):
        p, r = _ngrams(pred, n), _ngrams(ref, n)
        out[f"rouge{n}"] = _f1(sum((p & r).values()), sum(p.values()), sum(r.values()))
    out["rougeL"] = _f1(_lcs(pred, ref), len(pred), len(ref))
    return out


def lcsts_postprocess(text: str) -> str:
    """OpenCompass lcsts_postprocess, verbatim in effect (its stray-token removal included)."""
    text = text.strip().split("\n")[0].replace("\u0441\u0432\u043e\u0435\u0439", "").strip()
    text = text.replace("1. ", "") if text.startswith("1. ") else text
    text = text.replace("- ", "") if text.startswith("- ") else text
    return text.strip("“，。！”")


# -------------------------------------------------------------- TheoremQA

_ANSWER = re.compile(r"answer is[:\s]*\$?([^\n$]*)", re.IGNORECASE)


def _number(text: str) -> float | None:
    text = text.strip().rstrip(".").replace(",", "")
    match = re.search(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", text)
    return float(match.group(0)) if match else None


def theoremqa_score(doc, results) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """OpenCompass TheoremQAEvaluatorV3, simplified: the text after 'The answer is',
    compared by kind (bool, option letter, number within 4% relative, or exact)."""
    found = _ANSWER.findall(results[0])
    pred = found[-1].strip() if found else results[0].strip().split("\n")[-1]
    gold = str(doc["Answer"]).strip()
    kind = str(doc.get("Answer_type", "")).lower()
    if kind == "bool":
        ok = pred.lower().startswith(gold.lower())
    elif kind == "option":
        ok = pred.strip("() ").upper().startswith(gold.strip("() ").upper())
    else:
        p, g = _number(pred), _number(gold)
        ok = p is not None and g is not None and math.isclose(p, g, rel_tol=0.04, abs_tol=1e-9)
        ok = ok or pred.replace(" ", "") == gold.replace(" ", "")
    return {"acc": float(ok)}


# ---------------------------------------------------------- sanitized MBPP

def pass_at_1(references, predictions) -> float:  # type: ignore[no-untyped-def]
    """lm-eval's own MBPP metric (Hugging Face ``code_eval``), loaded only when scoring."""
    from lm_eval.tasks.mbpp.utils import pass_at_1 as lm_eval_pass_at_1

    return float(lm_eval_pass_at_1(references, predictions))
