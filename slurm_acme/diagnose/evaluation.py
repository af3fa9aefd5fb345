"""How good are the rules? Accuracy on a labelled corpus, measured honestly.

Three numbers per corpus: the rules alone; rules then retrieval where each
case is held out of its own retrieval index (leave-one-out, so a case can't
find itself); and retrieval alone, leave-one-out (what the fallback is worth
on logs no rule knows).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from slurm_acme.diagnose.api import feed_lines
from slurm_acme.diagnose.corpus import LabelledCase
from slurm_acme.diagnose.model import Diagnosis
from slurm_acme.diagnose.retrieval import DEFAULT_THRESHOLD, CaseIndex, query_text
from slurm_acme.diagnose.rules import RuleBook
from slurm_acme.diagnose.streaming import StreamingDiagnoser


@dataclass
class Score:
    """Accuracy of one method over a corpus."""

    total: int = 0
    category_ok: int = 0
    origin_ok: int = 0
    unknown: int = 0
    per_category: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    confusions: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, case: LabelledCase, verdict: Diagnosis) -> None:
        self.total += 1
        hit = verdict.category == case.category
        self.category_ok += hit
        self.origin_ok += verdict.origin == case.origin
        self.unknown += verdict.is_unknown
        self.per_category[case.category][0] += hit
        self.per_category[case.category][1] += 1
        if not hit:
            self.confusions[(case.category, verdict.category)] += 1

    @property
    def category_accuracy(self) -> float:
        return self.category_ok / self.total if self.total else 0.0

    @property
    def origin_accuracy(self) -> float:
        return self.origin_ok / self.total if self.total else 0.0

    def to_dict(self) -> dict:
        return {
            "cases": self.total,
            "category_accuracy": round(self.category_accuracy, 4),
            "origin_accuracy": round(self.origin_accuracy, 4),
            "unknown": self.unknown,
            "per_category": {k: {"correct": v[0], "cases": v[1]} for k, v in sorted(self.per_category.items())},
            "confusions": [
                {"label": label, "predicted": predicted, "count": n}
                for (label, predicted), n in self.confusions.most_common()
            ],
        }


@dataclass
class CorpusReport:
    rules: Score
    rules_then_retrieval: Score
    retrieval_only: Score
    mistakes: list[tuple[LabelledCase, Diagnosis]]
    #: (rule id, case id) where a rule matches a line no prefilter keyword
    #: admits: the rule would never fire; its file needs a ``prefilter`` entry.
    prefilter_misses: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "rules": self.rules.to_dict(),
            "rules_then_retrieval_loo": self.rules_then_retrieval.to_dict(),
            "retrieval_only_loo": self.retrieval_only.to_dict(),
            "prefilter_misses": [{"rule": r, "case": c} for r, c in self.prefilter_misses],
        }


def prefilter_misses(cases: Sequence[LabelledCase], rulebook: RuleBook) -> list[tuple[str, str]]:
    """Rules that match corpus lines the prefilter would never let them see."""
    misses: dict[tuple[str, str], None] = {}
    for case in cases:
        for line in case.text.splitlines():
            found = rulebook.match(line)
            if found and not rulebook.passes_prefilter(line):
                misses[(found[1].id, case.id)] = None
    return list(misses)


def evaluate(
    cases: Sequence[LabelledCase],
    rulebook: RuleBook,
    *,
    index: CaseIndex | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> CorpusReport:
    """Score the rule book (and retrieval, leave-one-out) on labelled ``cases``."""
    index = index if index is not None else CaseIndex(cases)
    rules, combined, retrieval = Score(), Score(), Score()
    mistakes: list[tuple[LabelledCase, Diagnosis]] = []
    for case in cases:
        diagnoser = StreamingDiagnoser(rulebook)
        feed_lines(diagnoser, case.text.splitlines())
        by_rules = diagnoser.rule_result()
        text = query_text(diagnoser)
        by_retrieval = index.propose(text, threshold=threshold, exclude=(case.id,), rulebook=rulebook)
        rules.add(case, by_rules)
        retrieval.add(case, by_retrieval)
        final = by_rules if not by_rules.is_unknown else by_retrieval
        combined.add(case, final)
        if final.category != case.category:
            mistakes.append((case, final))
    return CorpusReport(rules=rules, rules_then_retrieval=combined, retrieval_only=retrieval, mistakes=mistakes,
                        prefilter_misses=prefilter_misses(cases, rulebook))


@dataclass
class HoldoutReport:
    """Accuracy on the cases no rule was written from, retrieval seeing only the tune split."""

    tune_cases: int
    score: Score
    #: (case id, node) where the diagnosis would exclude a node the log does not implicate.
    wrong_nodes: list[tuple[str, str]] = field(default_factory=list)
    mistakes: list[tuple[LabelledCase, Diagnosis]] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = self.score.to_dict()
        return {
            "tune_cases": self.tune_cases,
            "holdout_cases": data["cases"],
            "category_accuracy": data["category_accuracy"],
            "origin_accuracy": data["origin_accuracy"],
            "unknown_rate": round(self.score.unknown / self.score.total, 4) if self.score.total else 0.0,
            "wrong_node_exclusions": [{"case": c, "node": n} for c, n in self.wrong_nodes],
            "confusions": data["confusions"],
        }


def wrong_exclusion(case: LabelledCase, verdict: Diagnosis) -> str | None:
    """The node ``verdict`` would exclude although ``case`` does not implicate it."""
    if verdict.action == "requeue_exclude_node" and verdict.node and verdict.node != case.node:
        return verdict.node
    return None


def holdout(
    cases: Sequence[LabelledCase],
    rulebook: RuleBook,
    *,
    index: CaseIndex | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> HoldoutReport:
    """Score rules then retrieval on the ``holdout`` cases; the index holds ``tune`` cases only."""
    tune = [c for c in cases if c.split == "tune"]
    index = index if index is not None else CaseIndex(tune)
    score = Score()
    report = HoldoutReport(tune_cases=len(tune), score=score)
    for case in (c for c in cases if c.split == "holdout"):
        diagnoser = StreamingDiagnoser(rulebook)
        feed_lines(diagnoser, case.text.splitlines())
        verdict = diagnoser.rule_result()
        if verdict.is_unknown:
            verdict = index.propose(query_text(diagnoser), threshold=threshold, rulebook=rulebook)
        score.add(case, verdict)
        node = wrong_exclusion(case, verdict)
        if node is not None:
            report.wrong_nodes.append((case.id, node))
        if verdict.category != case.category or verdict.origin != case.origin:
            report.mistakes.append((case, verdict))
    return report


@dataclass
class RetrievalLOO:
    """Leave-one-out retrieval on a corpus at a calibrated threshold."""

    kind: str
    threshold: float
    cases: int
    answered: int
    correct: int
    #: (similarity of the best neighbour of the voted category, vote right?) per case.
    points: list[tuple[float, bool]] = field(default_factory=list, repr=False)

    @property
    def accuracy(self) -> float:
        """Right answers over all cases (an ``unknown`` counts as not right)."""
        return self.correct / self.cases if self.cases else 0.0

    @property
    def precision(self) -> float:
        return self.correct / self.answered if self.answered else 0.0

    def to_dict(self) -> dict:
        return {"kind": self.kind, "threshold": round(self.threshold, 3), "cases": self.cases,
                "answered": self.answered, "accuracy": round(self.accuracy, 4),
                "precision": round(self.precision, 4)}


def calibrate_threshold(points: Sequence[tuple[float, bool]], min_precision: float = 0.9) -> float:
    """The lowest threshold whose answers are right at least ``min_precision`` of the time.

    Lower thresholds answer more failures; the calibration keeps "don't know"
    for the ones where the nearest cases have been wrong too often.
    """
    best = 1.0
    for threshold in sorted({round(s, 3) for s, _ in points}, reverse=True):
        answered = [ok for s, ok in points if s >= threshold]
        if answered and sum(answered) / len(answered) >= min_precision:
            best = threshold
    return best


def retrieval_loo(cases: Sequence[LabelledCase], *, kind: str = "tfidf", threshold: float | None = None,
                  min_precision: float = 0.9) -> RetrievalLOO:
    """Each case against an index of all the others; threshold calibrated unless given."""
    from slurm_acme.diagnose.retrieval import build_index

    index = build_index(cases, kind=kind)
    mixed = index.case_similarities() if kind == "embedding" else None
    points: list[tuple[float, bool]] = []
    for row, case in enumerate(cases):
        if mixed is not None:
            neighbours = index.ranked(mixed[row], exclude=(case.id,))
        else:
            neighbours = index.nearest(case.text, exclude=(case.id,), min_shared=2)
        verdict = _vote_all(neighbours)
        points.append((verdict[1], verdict[0] == case.category) if verdict else (0.0, False))
    chosen = calibrate_threshold(points, min_precision) if threshold is None else threshold
    answered = [ok for s, ok in points if s >= chosen]
    return RetrievalLOO(kind=kind, threshold=chosen, cases=len(cases), answered=len(answered),
                        correct=sum(answered), points=points)


def _vote_all(neighbours: Sequence[tuple[LabelledCase, float]]) -> tuple[str, float] | None:
    """The similarity-weighted vote of ``neighbours`` and its best supporter's similarity."""
    if not neighbours:
        return None
    votes: dict[str, float] = {}
    for case, sim in neighbours:
        votes[case.category] = votes.get(case.category, 0.0) + sim
    category = max(votes, key=lambda name: votes[name])
    return category, max(sim for case, sim in neighbours if case.category == category)
