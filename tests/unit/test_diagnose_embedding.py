"""Embedding retrieval with the packaged all-MiniLM-L6-v2: offline, in the store, learning."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
from click.testing import CliRunner

from slurm_acme.diagnose import embedding
from slurm_acme.diagnose.corpus import load_corpus
from slurm_acme.diagnose.retrieval import resolve_kind

pytestmark = pytest.mark.skipif(
    not embedding.embedding_available() and os.environ.get("CI") != "true",
    reason="the [embed] extra is not installed in this venv (CI and make test install it)",
)


@pytest.fixture(scope="module", autouse=True)
def no_network():
    """The model must come from the package: any connection attempt fails the test."""
    original = socket.socket.connect

    def refuse(self, address):  # type: ignore[no-untyped-def]
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"network access to {address} while embedding")
        return original(self, address)

    socket.socket.connect = refuse  # type: ignore[method-assign]
    yield
    socket.socket.connect = original  # type: ignore[method-assign]


def test_the_extra_is_installed_where_tests_are_meant_to_run():
    assert embedding.embedding_available()
    assert resolve_kind("auto") == "embedding"


def test_packaged_model_embeds_offline_into_unit_vectors_that_mean_something():
    oom, other_oom, key = embedding.encode([
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "RuntimeError: CUDA error: out of memory while allocating the activation buffer",
        "KeyError: 'input_ids'",
    ])
    assert oom.shape == (embedding.DIMENSIONS,)
    assert abs(float(np.linalg.norm(oom)) - 1.0) < 1e-4
    assert float(oom @ other_oom) > float(oom @ key)


def test_shipped_corpus_vectors_are_current():
    cases = load_corpus()
    shipped = embedding.shipped_vectors()
    assert {c.digest for c in cases} <= set(shipped), "run: python -m slurm_acme.diagnose.embedding"
    fresh = embedding.encode([c.text for c in cases[:3]])
    for case, vector in zip(cases[:3], fresh, strict=True):
        assert float(shipped[case.digest] @ vector) > 0.99


def test_leave_one_out_calibrated_threshold_is_the_shipped_default_and_beats_tfidf():
    from slurm_acme.diagnose.evaluation import retrieval_loo

    cases = load_corpus()
    mixed = retrieval_loo(cases, kind="embedding")
    tfidf = retrieval_loo(cases, kind="tfidf")
    assert abs(mixed.threshold - embedding.DEFAULT_THRESHOLD) <= 0.03
    assert mixed.precision >= 0.9
    assert mixed.accuracy >= tfidf.accuracy


def test_retrieval_names_a_paraphrase_no_rule_knows():
    from slurm_acme.diagnose import diagnose

    verdict = diagnose(["worker 3 aborted: the device ran out of memory while allocating 4096 MiB for activations"])
    assert verdict.source == "retrieval"
    assert verdict.category == "OutOfMemoryError"


def test_store_keeps_the_case_vectors_and_reuses_them(store):
    from slurm_acme.config import DiagnosisConfig
    from slurm_acme.diagnose.kit import load_kit
    from slurm_acme.store import failures as db

    first = load_kit(DiagnosisConfig(retrieval="embedding"), store)
    indexed = first.index.cases  # the index (and the vectors it saves) is built on first use
    stored = db.load_vectors(store, embedding.MODEL_NAME)
    assert len(stored) == db.count_cases(store) == len(indexed)
    again = load_kit(DiagnosisConfig(retrieval="embedding"), store)
    assert again.index.computed == {}
    assert np.allclose(again.index.matrix, first.index.matrix)


def test_a_labelled_failure_answers_the_next_similar_one_without_the_llm(tmp_path, store_url):
    from slurm_acme.cli.main import sacme

    first = tmp_path / "first.log"
    first.write_text("[rank2]: beegfs-client: metadata quorum lost on storage target 12, node shut down I/O\n")
    second = tmp_path / "second.log"
    second.write_text("[rank7]: beegfs-client: metadata quorum lost on storage target 31, node shut down I/O\n")
    runner = CliRunner()
    before = runner.invoke(sacme, ["--db", store_url, "diagnose", str(second), "--json"], catch_exceptions=False)
    assert '"category": "BeegfsQuorumLost"' not in before.output
    labelled = runner.invoke(sacme, ["--db", store_url, "diagnose", str(first), "--label", "BeegfsQuorumLost",
                                     "--origin", "infrastructure", "--json"], catch_exceptions=False)
    assert labelled.exit_code == 0 and '"source": "label"' in labelled.output
    after = runner.invoke(sacme, ["--db", store_url, "diagnose", str(second), "--json"], catch_exceptions=False)
    assert '"category": "BeegfsQuorumLost"' in after.output and '"source": "retrieval"' in after.output


def test_label_of_an_unknown_category_needs_an_origin(tmp_path, store_url):
    from slurm_acme.cli.main import sacme

    log = tmp_path / "x.log"
    log.write_text("something odd\n")
    from slurm_acme.errors import InputError

    result = CliRunner().invoke(sacme, ["--db", store_url, "diagnose", str(log), "--label", "Oddity"])
    assert isinstance(result.exception, InputError)
    assert "give --origin" in str(result.exception)
