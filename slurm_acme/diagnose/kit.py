"""Everything a diagnosis needs, assembled from ``acme.toml`` and the store.

The rule book is the shipped one, site files layered on top, then the
rules the LLM agent learned (from the store). Retrieval searches the
labelled cases in the store, seeded from the shipped corpus on first use.
Without a store, the shipped corpus is the case base and nothing is learned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurm_acme.diagnose.corpus import LabelledCase, load_corpus
from slurm_acme.diagnose.llm import LLMAgent, LLMSettings
from slurm_acme.diagnose.retrieval import build_index, default_threshold, resolve_kind
from slurm_acme.diagnose.rules import Rule, RuleBook, parse_rule

if TYPE_CHECKING:
    from slurm_acme.config import DiagnosisConfig
    from slurm_acme.store import Store


@dataclass
class DiagnosisKit:
    rulebook: RuleBook
    index: Any  # CaseIndex (TF-IDF) or EmbeddingIndex
    llm: LLMAgent | None
    threshold: float


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
    """Rule book, case index and (if enabled) the LLM agent for ``cfg``."""
    rulebook = RuleBook.load(cfg.rules)
    kind = resolve_kind(cfg.retrieval)
    if store is not None:
        known = {r.id for r in rulebook.rules}
        rulebook = rulebook.with_rules([r for r in learned_rules(store) if r.id not in known])
        cases = seed_cases(store)
        index = store_index(store, cases, kind)
    else:
        cases = load_corpus()
        index = build_index(cases, kind=kind)
    llm: LLMAgent | None = None
    settings = LLMSettings.from_config(cfg.llm) if use_llm is not False else None
    if use_llm and settings is None and cfg.llm.endpoint:
        settings = LLMSettings.from_config(cfg.llm.model_copy(update={"enabled": True}))
    if settings is not None:
        on_learned = None
        if store is not None:
            from slurm_acme.store import failures as db

            def on_learned(rule: Rule, text: str) -> None:
                db.save_rule(store, rule.to_dict(), case_text=text, source=f"llm:{settings.model}")
                confirm(store, text, rule.category, rule.origin, kind=kind, source="llm")

        llm = LLMAgent(settings=settings, corpus=cases, on_rule_learned=on_learned)
    threshold = cfg.retrieval_threshold if cfg.retrieval_threshold is not None else default_threshold(kind)
    return DiagnosisKit(rulebook=rulebook, index=index, llm=llm, threshold=threshold)


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
    from slurm_acme.store import failures as db

    text = text[-MAX_CASE_CHARS:]
    case_id = db.add_case(store, text, category, origin, source)
    if resolve_kind(kind) == "embedding":
        from slurm_acme.diagnose.embedding import MODEL_NAME, encode

        db.save_vectors(store, MODEL_NAME, {case_id: encode([text])[0]})
    return case_id
