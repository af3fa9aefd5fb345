"""TF-IDF retrieval over labelled cases, and its threshold."""

from __future__ import annotations

from slurm_acme.diagnose import diagnose
from slurm_acme.diagnose.corpus import LabelledCase
from slurm_acme.diagnose.retrieval import CaseIndex, tokens

CASES = [
    LabelledCase("bee-1", "StorageError", "infrastructure", "beegfs-client: metadata quorum lost, scratch detached"),
    LabelledCase("bee-2", "StorageError", "infrastructure", "BeeGFS metadata quorum lost on fs2; scratch detached"),
    LabelledCase("lr-1", "SchedulerBug", "script", "lr scheduler stepped before optimizer warmup finished"),
]


def test_tokens_split_camel_case_and_mask_numbers():
    assert tokens("OutOfMemoryError in step 42x") == ["outofmemoryerror", "out", "memory", "error", "step"]


def test_nearest_case_proposes_its_category_with_similarity_as_confidence():
    index = CaseIndex(CASES)
    verdict = index.propose("node7 kernel: beegfs metadata quorum lost, scratch detached", threshold=0.2)
    assert (verdict.category, verdict.origin, verdict.source) == ("StorageError", "infrastructure", "retrieval")
    assert 0.2 <= verdict.confidence <= 1.0
    assert "bee-" in verdict.evidence[0]


def test_below_threshold_is_unknown_not_a_guess():
    verdict = CaseIndex(CASES).propose("the weather is lovely today", threshold=0.2)
    assert verdict.is_unknown and verdict.source == "none"


def test_held_out_case_cannot_find_itself():
    index = CaseIndex(CASES)
    assert index.nearest(CASES[2].text, k=1)[0][0].id == "lr-1"
    assert index.nearest(CASES[2].text, k=1, exclude=["lr-1"])[0][0].id != "lr-1"


def test_diagnose_falls_back_to_retrieval_when_no_rule_fires():
    verdict = diagnose(["beegfs: metadata quorum lost; scratch detached on node3"], cases=CASES, threshold=0.2)
    assert (verdict.category, verdict.source) == ("StorageError", "retrieval")
    assert verdict.action == "requeue"


def test_retrieval_action_follows_the_rule_book_for_known_categories():
    cases = [LabelledCase("k", "KeyError", "script", "batch lookup failed for missing field tokens")]
    verdict = diagnose(["batch lookup failed for missing field tokens"], cases=cases, threshold=0.2)
    assert (verdict.category, verdict.action) == ("KeyError", "stop")


def test_streaming_result_falls_back_to_retrieval_unless_switched_off():
    from slurm_acme.diagnose import StreamingDiagnoser

    live = StreamingDiagnoser(cases=CASES, threshold=0.2)
    live.feed("beegfs: metadata quorum lost; scratch detached", rank=0, node="node1")
    assert (live.result().category, live.result().source) == ("StorageError", "retrieval")
    assert live.rule_result().is_unknown
    rules_only = StreamingDiagnoser(cases=CASES, threshold=0.2, retrieval=False)
    rules_only.feed("beegfs: metadata quorum lost; scratch detached")
    assert rules_only.result().is_unknown
