"""Everything a diagnosis needs, assembled from ``acme.toml`` and the store.

The rule book is the shipped one, site files layered on top, then the
rules the LLM agent learned (from the store). Retrieval searches the
labelled cases in the store, seeded from the shipped corpus on first use.
Without a store, the shipped corpus is the case base and nothing is learned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurm_acme.diagnose.corpus import LabelledCase, load_corpus
from slurm_acme.diagnose.llm import LLMAgent, LLMSettings
from slurm_acme.diagnose.retrieval import CaseIndex
from slurm_acme.diagnose.rules import Rule, RuleBook, parse_rule

if TYPE_CHECKING:
    from slurm_acme.config import DiagnosisConfig
    from slurm_acme.store import Store


@dataclass
class DiagnosisKit:
    rulebook: RuleBook
    index: CaseIndex
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


def learned_rules(store: Store) -> list[Rule]:
    from slurm_acme.store import failures as db

    return [parse_rule(data, "store:failure_rules") for data in db.load_rules(store)]


def load_kit(cfg: DiagnosisConfig, store: Store | None, *, use_llm: bool | None = None) -> DiagnosisKit:
    """Rule book, case index and (if enabled) the LLM agent for ``cfg``."""
    rulebook = RuleBook.load(cfg.rules)
    if store is not None:
        known = {r.id for r in rulebook.rules}
        rulebook = rulebook.with_rules([r for r in learned_rules(store) if r.id not in known])
        cases = seed_cases(store)
    else:
        cases = load_corpus()
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
                db.add_cases(store, [(text, rule.category, rule.origin, "llm")])

        llm = LLMAgent(settings=settings, corpus=cases, on_rule_learned=on_learned)
    return DiagnosisKit(rulebook=rulebook, index=CaseIndex(cases), llm=llm, threshold=cfg.retrieval_threshold)
