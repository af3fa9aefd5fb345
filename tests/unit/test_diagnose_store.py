"""Diagnoses, labelled cases and learned rules in the store (SQLite and Postgres)."""

from __future__ import annotations

from slurm_acme.config import DiagnosisConfig
from slurm_acme.diagnose import diagnose
from slurm_acme.diagnose.corpus import load_corpus
from slurm_acme.diagnose.kit import learned_rules, load_kit, seed_cases
from slurm_acme.store import failures as db


def test_record_and_list_a_diagnosis(store):
    verdict = diagnose(["node2: 1: RuntimeError: NCCL error in: x.cpp:1, unhandled system error, NCCL version 2.14.3"])
    row_id = db.record_failure(store, verdict.to_dict(), job_id="77", attempt=2, log_path="/logs/77.out", ts=100.0)
    [record] = db.list_failures(store, job_id="77")
    assert record.id == row_id
    assert (record.category, record.action, record.node, record.attempt) == ("NetworkError", "requeue_exclude_node", "node2", 2)
    assert record.evidence == verdict.evidence
    assert db.failures_by_category(store) == [("NetworkError", "infrastructure", 1)]


def test_seeding_cases_is_idempotent_and_dedups_by_text(store):
    first = seed_cases(store)
    second = seed_cases(store)
    assert len(first) == len(second) == len({c.text for c in load_corpus()})
    assert db.add_cases(store, [("same text", "KeyError", "script", "t"), ("same text", "KeyError", "script", "t")]) == 1
    assert db.count_cases(store) == len(first) + 1


def test_learned_rules_round_trip_and_join_the_book(store):
    db.save_rule(store, {"id": "learned-X-1", "pattern": "beegfs quorum lost", "category": "StorageError",
                         "origin": "infrastructure", "action": "requeue", "keywords": ["beegfs quorum"]})
    [rule] = learned_rules(store)
    assert (rule.id, rule.keywords) == ("learned-X-1", ("beegfs quorum",))
    kit = load_kit(DiagnosisConfig(), store)
    assert kit.rulebook.rules[-1].id == "learned-X-1"
    verdict = diagnose(["client: beegfs quorum lost on fs1"], rulebook=kit.rulebook, cases=kit.index)
    assert (verdict.source, verdict.rule_id) == ("rule", "learned-X-1")


def test_one_record_reads_rows_of_both_writers(store):
    """The CLI's rows (JSON list) and the supervisor's (given as a list or as
    newline text, as rows written before the writers were merged hold it)."""
    from sqlalchemy import insert

    from slurm_acme.store import runs as run_store
    from slurm_acme.store.schema.failures import failures

    cli_id = db.record_failure(store, {"category": "KeyError", "origin": "script", "action": "stop",
                                       "evidence": ["KeyError: 'x'"]}, job_id="5", ts=1.0)
    sup_id = run_store.record_failure(
        store, cluster="c", job_id="5", run_id="r", attempt=0, ts=2.0, category="NetworkError",
        origin="infrastructure", action="requeue", node="n1", rule_id="r1", confidence=0.9,
        evidence=["a", "b"], source="rule", gpus=8, time_to_failure_s=3.0, log_path="/l")
    with store.engine.begin() as conn:
        old_id = conn.execute(insert(failures).values(
            ts=3.0, job_id="5", category="ECCError", origin="infrastructure",
            evidence="first line\nsecond line")).inserted_primary_key[0]
    records = {r.id: r for r in db.list_failures(store, job_id="5")}
    assert records[cli_id].evidence == ("KeyError: 'x'",)
    assert records[sup_id].evidence == ("a", "b") and records[sup_id].gpus == 8
    assert records[old_id].evidence == ("first line", "second line")
    assert run_store.get_failures(store, [sup_id, old_id]) == {sup_id: records[sup_id], old_id: records[old_id]}
