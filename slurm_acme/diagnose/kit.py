"""Everything a diagnosis needs, assembled from ``acme.toml`` and the store.

The rule book is the shipped one, site files layered on top, then the
rules the LLM agent learned (from the store). Retrieval searches the
labelled cases in the store, seeded from the shipped corpus on first use.
Without a store, the shipped corpus is the case base and nothing is learned.

Only the rule book is read up front: most logs are answered by a rule, so the
case index (numpy, the store's cases, maybe a sentence-transformer) is built
on first use, and the LLM agent's HTTP client only when it is enabled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurm_acme.diagnose.corpus import LabelledCase, load_corpus
from slurm_acme.diagnose.rules import Rule, RuleBook, parse_rule

if TYPE_CHECKING:
    from slurm_acme.config import DiagnosisConfig
    from slurm_acme.diagnose.llm import LLMAgent
    from slurm_acme.diagnose.model import Diagnosis
    from slurm_acme.diagnose.streaming import StreamingDiagnoser
    from slurm_acme.store import Store


@dataclass
class DiagnosisKit:
    """What :func:`slurm_acme.diagnose.api.conclude` needs; ``index`` and
    ``threshold`` are worked out when first asked for."""

    rulebook: RuleBook
    llm: LLMAgent | None
    build_index: Callable[[], Any]
    build_threshold: Callable[[], float]

    @functools.cached_property
    def index(self) -> Any:
        """CaseIndex (TF-IDF) or EmbeddingIndex."""
        return self.build_index()

    @functools.cached_property
    def threshold(self) -> float:
        return self.build_threshold()

    def conclude(self, diagnoser: StreamingDiagnoser) -> Diagnosis:
        """:func:`~slurm_acme.diagnose.api.conclude` with this kit; the index is
        built only when no rule answers."""
        from slurm_acme.diagnose.api import conclude

        verdict = diagnoser.rule_result()
        if not verdict.is_unknown or diagnoser.lines_seen == 0:
            return verdict
        return conclude(diagnoser, cases=self.index, llm=self.llm, threshold=self.threshold)


def seed_cases(store: Store) -> list[LabelledCase]:
    """Make sure the shipped corpus is in ``failure_cases``; return all stored cases."""
    from slurm_acme.store import failures as db

    corpus = load_corpus()
    if db.count_cases(store) < len(corpus):
        db.add_cases(store, [(c.text, c.category, c.origin, (c.source or "corpus")[:64]) for c in corpus])
    return [
        LabelledCase(id=f"case-{r.id}", category=r.category, origin=r.origin, text=r.text, source=r.source or "")
        for r in db.load_cases(store)
    ]


def store_index(store: Store, cases: list[LabelledCase], kind: str) -> Any:
    """The retrieval index of the store's cases; new case vectors are saved to the store."""
    if kind != "embedding":
        from slurm_acme.diagnose.retrieval import build_index

        return build_index(cases, kind="tfidf")
    from slurm_acme.diagnose.embedding import MODEL_NAME, EmbeddingIndex
    from slurm_acme.store import failures as db

    stored = {f"case-{case_id}": vector for case_id, vector in db.load_vectors(store, MODEL_NAME).items()}
    index = EmbeddingIndex(cases, stored)
    fresh = {int(c.id.removeprefix("case-")): index.matrix[row] for row, c in enumerate(cases) if c.id not in stored}
    db.save_vectors(store, MODEL_NAME, fresh)
    return index


def learned_rules(store: Store) -> list[Rule]:
    from slurm_acme.store import failures as db

    return [parse_rule(data, "store:failure_rules") for data in db.load_rules(store)]


def load_kit(cfg: DiagnosisConfig, store: Store | None, *, use_llm: bool | None = None) -> DiagnosisKit:
    """Rule book, case index (built on first use) and (if enabled) the LLM agent for ``cfg``."""
    rulebook = RuleBook.load(cfg.rules)
    if store is not None:
        known = {r.id for r in rulebook.rules}
        rulebook = rulebook.with_rules([r for r in learned_rules(store) if r.id not in known])

    @functools.cache
    def cases() -> list[LabelledCase]:
        return seed_cases(store) if store is not None else load_corpus()

    @functools.cache
    def kind() -> str:
        from slurm_acme.diagnose.retrieval import resolve_kind

        return resolve_kind(cfg.retrieval)

    def index() -> Any:
        from slurm_acme.diagnose.retrieval import build_index

        return store_index(store, cases(), kind()) if store is not None else build_index(cases(), kind=kind())

    def threshold() -> float:
        from slurm_acme.diagnose.retrieval import default_threshold

        return cfg.retrieval_threshold if cfg.retrieval_threshold is not None else default_threshold(kind())

    llm: LLMAgent | None = None
    if use_llm is not False and (cfg.llm.enabled or (use_llm and cfg.llm.endpoint)):
        llm = _llm_agent(cfg, store, cases(), kind, use_llm=use_llm)
    return DiagnosisKit(rulebook=rulebook, llm=llm, build_index=index, build_threshold=threshold)


def _llm_agent(cfg: DiagnosisConfig, store: Store | None, cases: list[LabelledCase],
               kind: Callable[[], str], *, use_llm: bool | None) -> LLMAgent | None:
    from slurm_acme.diagnose.llm import LLMAgent, LLMSettings

    settings = LLMSettings.from_config(cfg.llm)
    if use_llm and settings is None and cfg.llm.endpoint:
        settings = LLMSettings.from_config(cfg.llm.with_changes(enabled=True))
    if settings is None:
        return None
    on_learned = None
    if store is not None:
        from slurm_acme.store import failures as db

        def on_learned(rule: Rule, text: str) -> None:
            db.save_rule(store, rule.to_dict(), case_text=text, source=f"llm:{settings.model}")
            confirm(store, text, rule.category, rule.origin, kind=kind(), source="llm")

    return LLMAgent(settings=settings, corpus=cases, on_rule_learned=on_learned)


#: Characters of a confirmed failure's compressed log kept as its case.
MAX_CASE_CHARS = 8000


def origin_of(category: str, rulebook: RuleBook) -> str | None:
    """The origin the rule book gives ``category`` (None for a category it does not know)."""
    return next((r.origin for r in rulebook.rules if r.category == category), None)


def confirm(store: Store, text: str, category: str, origin: str, *, kind: str, source: str = "label") -> int:
    """Add a confirmed diagnosis to the store's cases and its vector to the index.

    The next similar failure is then answered by retrieval, without the LLM.
    Returns the case id.
    """
    from slurm_acme.diagnose.retrieval import resolve_kind
    from slurm_acme.store import failures as db

    text = text[-MAX_CASE_CHARS:]
    case_id = db.add_case(store, text, category, origin, source)
    if resolve_kind(kind) == "embedding":
        from slurm_acme.diagnose.embedding import MODEL_NAME, encode

        db.save_vectors(store, MODEL_NAME, {case_id: encode([text])[0]})
    return case_id
