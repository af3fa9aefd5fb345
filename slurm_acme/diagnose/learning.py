"""The continuous-learning gate: when may a proposed regex become a rule?

Only when it is safe: it compiles, it matches the failure it was proposed
for, the engine would see that line (the prefilter passes), and it matches
no labelled case of another category. A rule that would mislabel what we
already know is rejected, however plausible it looks.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_acme.diagnose.corpus import LabelledCase
from slurm_acme.diagnose.model import ACTIONS, ORIGINS
from slurm_acme.diagnose.rules import Rule, RuleBook


@dataclass(frozen=True)
class Proposal:
    """What the LLM agent answered."""

    category: str
    origin: str
    action: str
    regex: str | None
    confidence: float = 0.5
    reason: str = ""


@dataclass(frozen=True)
class Verdict:
    """Accepted rule, or why not."""

    rule: Rule | None
    reason: str

    @property
    def accepted(self) -> bool:
        return self.rule is not None


def _matches(pattern: re.Pattern[str], text: str) -> str | None:
    return next((line for line in text.splitlines() if pattern.search(line)), None)


def _literal_keyword(regex: str, line: str) -> str | None:
    """The longest digit-free literal run of ``regex`` found in ``line`` (>= 4 chars)."""
    pieces = re.split(r"\\.|[.^$*+?{}\[\]|()]", regex)
    found = [p for p in pieces if len(p) >= 4 and not re.search(r"[0-9]", p) and p in line]
    return max(found, key=len) if found else None


def validate_proposal(
    proposal: Proposal, *, case_text: str, corpus: Sequence[LabelledCase], rulebook: RuleBook
) -> Verdict:
    """Decide whether ``proposal.regex`` may join the rule book."""
    if not proposal.regex:
        return Verdict(None, "no regex proposed")
    if proposal.origin not in ORIGINS or proposal.origin == "unknown":
        return Verdict(None, f"origin {proposal.origin!r} is not one of infrastructure, framework, script")
    if proposal.action not in ACTIONS:
        return Verdict(None, f"action {proposal.action!r} is not one of {', '.join(ACTIONS)}")
    if not proposal.category or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", proposal.category):
        return Verdict(None, f"category {proposal.category!r} is not a plain name")
    try:
        compiled = re.compile(proposal.regex)
    except re.error as exc:
        return Verdict(None, f"regex does not compile: {exc}")
    line = _matches(compiled, case_text)
    if line is None:
        return Verdict(None, "regex does not match the failure it was proposed for")
    keywords: tuple[str, ...] = ()
    if not rulebook.passes_prefilter(line):
        keyword = _literal_keyword(proposal.regex, line)
        if keyword is None:
            return Verdict(None, "the matched line has no prefilter keyword and the regex no literal to add")
        keywords = (keyword,)
    for case in corpus:
        if _matches(compiled, case.text) and (case.category, case.origin) != (proposal.category, proposal.origin):
            return Verdict(None, f"regex would mislabel corpus case {case.id} ({case.category}) as {proposal.category}")
    digest = hashlib.sha256(proposal.regex.encode()).hexdigest()[:10]
    rule = Rule(
        id=f"learned-{proposal.category}-{digest}", pattern=proposal.regex, category=proposal.category,
        origin=proposal.origin, action=proposal.action, confidence=min(0.9, max(0.1, proposal.confidence)),
        note="learned from the LLM agent", keywords=keywords,
    )
    return Verdict(rule, "matches its case and mislabels no labelled case")
