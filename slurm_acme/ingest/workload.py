"""Which of the paper's workload types a job is.

First the job says so itself (``--comment acme:type=Pretrain``, which
``sacme submit`` and ``seval`` set), then the site's name rules from
``acme.toml`` (regex on the job name, first match wins), else ``Other``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from slurm_acme.report.model import WORKLOAD_TYPES

_CANONICAL = {t.lower(): t for t in WORKLOAD_TYPES}
_COMMENT = re.compile(r"(?:^|[\s,;])acme:type=([A-Za-z]+)")


class NameRule(Protocol):
    """A job-name rule as classify reads it (config.NameRule is one). Read-only
    members, so a rule whose ``type`` is the narrower WorkloadType still fits."""

    @property
    def pattern(self) -> str: ...

    @property
    def type(self) -> str: ...


def type_from_comment(comment: str | None) -> str | None:
    """``acme:type=X`` anywhere in the comment, if X is a known type (any case)."""
    match = _COMMENT.search(comment or "")
    return _CANONICAL.get(match.group(1).lower()) if match else None


def classify(comment: str | None, name: str | None, rules: Sequence[NameRule]) -> str:
    """The workload type of one job."""
    tagged = type_from_comment(comment)
    if tagged:
        return tagged
    for rule in rules:
        if re.search(rule.pattern, name or ""):
            return rule.type
    return "Other"
