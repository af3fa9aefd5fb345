"""Optional LLM agent: an OpenAI-compatible endpoint for what rules can't name.

Off unless ``[diagnosis.llm] enabled = true`` in ``acme.toml``. It receives
the compressed log and the nearest labelled cases and must answer JSON with
``category``, ``origin``, ``action`` and a ``regex``. The answer is used for
this failure; the regex joins the rule book only through
:func:`~slurm_acme.diagnose.learning.validate_proposal`.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from slurm_acme.diagnose.corpus import LabelledCase
from slurm_acme.diagnose.learning import Proposal, Verdict, validate_proposal
from slurm_acme.diagnose.model import ACTIONS, Diagnosis
from slurm_acme.diagnose.rules import Rule, RuleBook

#: Characters of compressed log sent to the model.
MAX_PROMPT_LOG_CHARS = 12_000
#: Characters of each neighbouring case sent.
MAX_CASE_CHARS = 1_200

SYSTEM_PROMPT = (
    "You diagnose failed distributed training jobs from their logs. Answer with ONE JSON object: "
    '{"category": <CamelCase failure category, reuse a category of the similar cases when it fits>, '
    '"origin": "infrastructure" | "framework" | "script", '
    f'"action": {" | ".join(repr(a).replace(chr(39), chr(34)) for a in ACTIONS)}, '
    '"regex": <a Python regex matching the one log line that identifies this failure, '
    'general enough for other logs of the same failure, specific enough for nothing else>, '
    '"confidence": <0..1>, "reason": <one sentence>}. '
    "infrastructure = hardware, network, storage, scheduler; framework = memory, numerics, checkpoints, "
    "data loading; script = bugs in the user's program. requeue_exclude_node when one host is at fault."
)


@dataclass(frozen=True)
class LLMSettings:
    endpoint: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0

    @classmethod
    def from_config(cls, cfg) -> LLMSettings | None:  # type: ignore[no-untyped-def]
        """From ``DiagnosisConfig.llm``; None when disabled or unset."""
        if not cfg.enabled or not cfg.endpoint:
            return None
        return cls(endpoint=cfg.endpoint, model=cfg.model, api_key=os.environ.get(cfg.api_key_env) or None,
                   timeout_s=cfg.timeout_s)


def build_messages(log_text: str, neighbours: Sequence[tuple[LabelledCase, float]]) -> list[dict[str, str]]:
    cases = "\n\n".join(
        f"--- similar case (category={case.category}, origin={case.origin}, similarity={sim:.2f}) ---\n"
        f"{case.text[-MAX_CASE_CHARS:]}"
        for case, sim in neighbours
    )
    user = (f"Compressed log of the failed job:\n{log_text[-MAX_PROMPT_LOG_CHARS:]}\n\n"
            f"Nearest labelled cases:\n{cases or '(none)'}")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_answer(content: str) -> Proposal | None:
    """The model's JSON answer (tolerating ``` fences), or None if unusable."""
    text = content.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        data = json.loads(text[start:end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("category", "origin", "action")):
        return None
    try:
        confidence = float(data.get("confidence", 0.5))
    except (TypeError, ValueError):
        confidence = 0.5
    regex = data.get("regex")
    return Proposal(
        category=data["category"], origin=data["origin"], action=data["action"],
        regex=regex if isinstance(regex, str) and regex else None,
        confidence=confidence, reason=str(data.get("reason", "")),
    )


@dataclass
class LLMAgent:
    """Asks the endpoint, validates its rule, remembers what it learned."""

    settings: LLMSettings
    corpus: Sequence[LabelledCase]
    on_rule_learned: Callable[[Rule, str], None] | None = None
    learned: list[Rule] = field(default_factory=list)
    last_verdict: Verdict | None = None
    last_error: str | None = None

    def ask(self, log_text: str, neighbours: Sequence[tuple[LabelledCase, float]]) -> Proposal | None:
        """One chat-completion call; None (with :attr:`last_error`) on any failure."""
        body = json.dumps({
            "model": self.settings.model, "temperature": 0,
            "messages": build_messages(log_text, neighbours),
        }).encode()
        headers = {"Content-Type": "application/json"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        url = self.settings.endpoint.rstrip("/") + "/chat/completions"
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_s) as response:
                payload = json.loads(response.read().decode("utf-8", errors="replace"))
            content = payload["choices"][0]["message"]["content"]
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            self.last_error = f"LLM endpoint {url}: {exc}"
            return None
        proposal = parse_answer(content if isinstance(content, str) else "")
        if proposal is None:
            self.last_error = f"LLM endpoint {url}: answer is not the JSON asked for"
        return proposal

    def diagnose(
        self, log_text: str, neighbours: Sequence[tuple[LabelledCase, float]], *, rulebook: RuleBook
    ) -> Diagnosis | None:
        """The agent's diagnosis of ``log_text``; learns its rule if it validates."""
        proposal = self.ask(log_text, neighbours)
        if proposal is None or proposal.action not in ACTIONS:
            return None
        verdict = validate_proposal(proposal, case_text=log_text, corpus=self.corpus, rulebook=rulebook)
        self.last_verdict = verdict
        evidence: tuple[str, ...] = ()
        if verdict.rule is not None:
            self.learned.append(verdict.rule)
            if self.on_rule_learned is not None:
                self.on_rule_learned(verdict.rule, log_text)
            evidence = tuple(line for line in log_text.splitlines() if verdict.rule.compiled.search(line))[:3]
        origin = proposal.origin if proposal.origin in ("infrastructure", "framework", "script") else "unknown"
        return Diagnosis(
            category=proposal.category, origin=origin, action=proposal.action, node=None,
            rule_id=verdict.rule.id if verdict.rule else None,
            confidence=round(min(1.0, max(0.0, proposal.confidence)), 3),
            evidence=evidence or (f"llm: {proposal.reason}"[:300],), source="llm",
        )
