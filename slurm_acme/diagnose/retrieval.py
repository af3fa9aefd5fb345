"""Retrieval fallback: TF-IDF nearest labelled cases, with an honest threshold.

When no rule fires, the failure may still look like one seen before. The
query (the end of the compressed log) is compared with every labelled case
by cosine similarity of TF-IDF vectors (numpy; no model weights to ship),
both reduced to their salient lines (errors, warnings, signals).
The neighbours vote by similarity; if the best similarity is below the
threshold the answer is ``unknown``, not a guess.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from slurm_acme.diagnose.corpus import LabelledCase, load_corpus
from slurm_acme.diagnose.model import UNKNOWN_ACTION, Diagnosis, unknown_diagnosis

if TYPE_CHECKING:
    from slurm_acme.diagnose.rules import RuleBook
    from slurm_acme.diagnose.streaming import StreamingDiagnoser

#: Cosine similarity below which retrieval says "unknown".
DEFAULT_THRESHOLD = 0.3
#: Neighbours that vote.
NEIGHBOURS = 3
#: A neighbour must share at least this many distinct words with the query
#: (one shared rare word is a coincidence, not a resemblance).
MIN_SHARED_TERMS = 2
#: Compressed lines (from the end) that form the query.
QUERY_LINES = 60

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+")
#: Words every traceback or sentence has; they make unrelated logs look alike.
STOPWORDS = frozenset([
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in", "is", "it",
    "of", "on", "or", "that", "the", "this", "to", "was", "with", "not", "no", "file", "line", "in",
    "module", "most", "recent", "call", "last", "traceback", "py", "python", "home", "usr", "lib",
    "local", "site", "packages", "dist", "opt", "conda", "envs", "anaconda", "miniconda", "bin",
    "self", "return", "def", "main", "train", "run", "self", "none", "true", "false",
])
_DEFAULT_ACTION = {"infrastructure": "requeue", "framework": "stop", "script": "stop"}


#: Lines that carry the failure; a case or query is compared on these alone
#: (progress and stack frames differ between any two logs).
SALIENT = re.compile(
    r"rror|ERROR|Exception|[Ff]ail|FAIL|nan|NaN|[Kk]illed|Xid|NCCL|WARN|[Tt]imeout|[Tt]imed out|Errno|"
    r"[Aa]bort|[Ff]ault|refused|lost|Assertion|exitcode|[Ss]ignal|OOM|oom|CANCELLED|reempt|OVERFLOW|verflow|mismatch"
)


def salient(text: str) -> str:
    """The lines of ``text`` that look like failure evidence (all of it if none do)."""
    lines = [line for line in text.splitlines() if SALIENT.search(line)]
    return "\n".join(lines) if lines else text


def tokens(text: str) -> list[str]:
    """Words, lower-cased, with CamelCase parts added (OutOfMemoryError -> out, memory, ...)."""
    out: list[str] = []
    for word in _WORD.findall(text):
        word = re.sub(r"[0-9]+", "0", word)
        if word.lower() in STOPWORDS:
            continue
        out.append(word.lower())
        parts = _CAMEL.findall(word)
        if len(parts) > 1:
            out.extend(p.lower() for p in parts if len(p) > 1 and p.lower() not in STOPWORDS)
    return out


class CaseIndex:
    """TF-IDF vectors of labelled cases, searchable by cosine similarity."""

    kind = "tfidf"

    def __init__(self, cases: Sequence[LabelledCase]) -> None:
        self.cases = list(cases)
        counts = [Counter(tokens(salient(c.text))) for c in self.cases]
        df: Counter[str] = Counter()
        for count in counts:
            df.update(count.keys())
        self.vocab = {term: i for i, term in enumerate(sorted(df))}
        n = len(self.cases)
        self.idf = np.array([math.log((1 + n) / (1 + df[t])) + 1.0 for t in sorted(df)], dtype=np.float32)
        self.matrix = np.zeros((n, len(self.vocab)), dtype=np.float32)
        for row, count in enumerate(counts):
            self.matrix[row] = self._vector(count)

    def _vector(self, count: Counter[str]) -> np.ndarray:
        vec = np.zeros(len(self.vocab), dtype=np.float32)
        for term, tf in count.items():
            col = self.vocab.get(term)
            if col is not None:
                vec[col] = (1.0 + math.log(tf)) * self.idf[col]
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm else vec

    def nearest(
        self, text: str, k: int = NEIGHBOURS, *, exclude: Iterable[str] = (), min_shared: int = 0
    ) -> list[tuple[LabelledCase, float]]:
        """The ``k`` most similar cases (skipping ids in ``exclude``), best first."""
        if not self.cases:
            return []
        query = self._vector(Counter(tokens(salient(text))))
        sims = self.matrix @ query
        skip = set(exclude)
        order = np.argsort(-sims, kind="stable")
        out: list[tuple[LabelledCase, float]] = []
        for row in order:
            if self.cases[row].id in skip:
                continue
            if min_shared and np.count_nonzero(self.matrix[row] * query) < min_shared:
                continue
            out.append((self.cases[row], float(sims[row])))
            if len(out) >= k:
                break
        return out

    def propose(
        self,
        text: str,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        exclude: Iterable[str] = (),
        rulebook: RuleBook | None = None,
    ) -> Diagnosis:
        """Similarity-weighted vote of the nearest cases; ``unknown`` below threshold."""
        neighbours = self.nearest(text, NEIGHBOURS, exclude=exclude, min_shared=MIN_SHARED_TERMS)
        if not neighbours or neighbours[0][1] < threshold:
            return unknown_diagnosis()
        votes: defaultdict[str, float] = defaultdict(float)
        for case, sim in neighbours:
            votes[case.category] += sim
        category = max(votes, key=votes.__getitem__)  # ties: the nearest case's category
        best = next((case, sim) for case, sim in neighbours if case.category == category)
        if best[1] < threshold:
            return unknown_diagnosis()
        return Diagnosis(
            category=category, origin=best[0].origin,
            action=action_for(category, best[0].origin, rulebook), node=None, rule_id=None,
            confidence=round(best[1], 3), evidence=(f"nearest case {best[0].id} (similarity {best[1]:.2f})",),
            source="retrieval",
        )


def action_for(category: str, origin: str, rulebook: RuleBook | None = None) -> str:
    """The action the rule book takes for this category, else the origin's default."""
    if rulebook is None:
        from slurm_acme.diagnose.api import default_rulebook

        rulebook = default_rulebook()
    for rule in rulebook.rules:
        if rule.category == category and rule.origin == origin:
            return rule.action
    return _DEFAULT_ACTION.get(origin, UNKNOWN_ACTION)


#: ``auto``: embeddings when the ``[embed]`` extra is installed, else TF-IDF.
RETRIEVAL_KINDS = ("auto", "embedding", "tfidf")


def resolve_kind(kind: str = "auto") -> str:
    """``embedding`` or ``tfidf`` for a configured kind (``auto`` picks by what is installed)."""
    from slurm_acme.diagnose.embedding import embedding_available

    if kind not in RETRIEVAL_KINDS:
        raise ValueError(f"retrieval kind {kind!r} is not one of {', '.join(RETRIEVAL_KINDS)}")
    if kind == "auto":
        return "embedding" if embedding_available() else "tfidf"
    return kind


def default_threshold(kind: str) -> float:
    """The leave-one-out calibrated threshold of a retrieval kind."""
    from slurm_acme.diagnose import embedding

    return embedding.DEFAULT_THRESHOLD if kind == "embedding" else DEFAULT_THRESHOLD


def build_index(cases: Sequence[LabelledCase], *, kind: str = "auto", vectors=None):  # type: ignore[no-untyped-def]
    """A retrieval index over ``cases``: embeddings (``vectors`` reused) or TF-IDF."""
    if resolve_kind(kind) == "embedding":
        from slurm_acme.diagnose.embedding import EmbeddingIndex

        return EmbeddingIndex(cases, vectors)
    return CaseIndex(cases)


@functools.lru_cache(maxsize=2)
def shipped_index(kind: str = "auto"):  # type: ignore[no-untyped-def]
    return build_index(load_corpus(), kind=kind)


def as_index(cases):  # type: ignore[no-untyped-def]
    """An index for ``cases``: an index as is, labelled cases indexed, None for the shipped corpus."""
    if cases is None:
        return shipped_index()
    if hasattr(cases, "propose"):
        return cases
    return build_index(list(cases))


def query_text(diagnoser: StreamingDiagnoser) -> str:
    """What retrieval and the LLM read: recognised lines, then the end of the compressed log."""
    entries = [text for _, text in diagnoser.compressor.entries()][-QUERY_LINES:]
    return "\n".join([*diagnoser.candidate_lines(), *entries])
