"""The helpers the shipped lm-eval YAMLs call, against OpenCompass's rules for the same data.

Hand-written rows in each dataset's published schema; nothing downloaded, no lm-eval run.
"""

from __future__ import annotations

import importlib.util

import pytest

from slurm_acme.evaluate.registry import shipped_lm_eval_tasks


@pytest.fixture(scope="module")
def utils():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("acme_lm_eval_utils", shipped_lm_eval_tasks() / "utils.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tnews_labels_are_opencompass_s_chinese_names_in_its_order(utils):
    assert utils.TNEWS_CHOICES[0] == "农业新闻" and len(set(utils.TNEWS_CHOICES)) == 15
    assert utils.TNEWS_CHOICES[utils.tnews_target({"label_desc": "news_stock"})] == "股票市场类别新闻"


def test_chid_and_csl_candidates_are_whole_texts(utils):
    doc = {"content": "他做事#idiom#。", "candidates": ["一丝不苟", "马马虎虎"], "answer": 0}
    assert utils.chid_choices(doc) == ["以下句子是否通顺？\n他做事一丝不苟。\n这个句子是通顺的。",
                                       "以下句子是否通顺？\n他做事马马虎虎。\n这个句子是通顺的。"]
    assert utils.csl_choices({"abst": "摘要", "keyword": ["a", "b"]}) == ["摘要：摘要", "摘要：摘要\n关键词：a，b"]
    ocnli = utils.fewclue_ocnli_choices({"sentence1": "甲", "sentence2": "乙"})
    assert len(ocnli) == 3 and utils.fewclue_ocnli_target({"label": "neutral"}) == 2


def test_cmrc_and_lcsts_post_processing_follow_opencompass(utils):
    assert utils.cmrc_answer([["我想答案是北京", "上海"]], None) == [["北京", "上海"]]
    assert utils.lcsts_postprocess("1. 今天天气很好。\n第二行") == "今天天气很好"
    scores = utils.jieba_rouge({"summary": "今天天气很好"}, ["今天天气很好"])
    assert scores == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}
    assert utils.jieba_rouge({"summary": "今天天气很好"}, ["明天下雨"])["rouge1"] == 0.0


def test_theoremqa_answers_are_compared_by_kind(utils):
    def score(answer: object, kind: str, text: str) -> float:
        return utils.theoremqa_score({"Answer": answer, "Answer_type": kind}, [text])["acc"]

    assert score("833.33", "float", "so ... The answer is 833.3") == 1.0  # within 4%
    assert score("833.33", "float", "The answer is 900") == 0.0
    assert score("True", "bool", "The answer is True.") == 1.0
    assert score("(b)", "option", "The answer is (b)") == 1.0
    assert score("3", "integer", "no final line") == 0.0
