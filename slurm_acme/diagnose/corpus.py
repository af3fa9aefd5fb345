"""Labelled failure cases: the corpus rules are tested on and retrieval learns from.

A case is a real error excerpt with its ``category`` and ``origin`` (see
``slurm_acme/data/failure_corpus.jsonl``, from public issue threads). The
corpus is data, never answers: rules must earn their accuracy on it, and
``sacme rules test`` reports where they don't.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from slurm_acme.diagnose.model import ORIGINS
from slurm_acme.errors import InputError

#: How a case may be used: rules are written from ``tune`` cases; ``holdout``
#: cases are only ever scored (see :func:`slurm_acme.diagnose.evaluation.holdout`).
SPLITS = ("tune", "holdout")


@dataclass(frozen=True)
class LabelledCase:
    id: str
    category: str
    origin: str
    text: str
    source: str = ""
    #: ``tune`` (rules may be written from it) or ``holdout`` (kept for measuring only).
    split: str = "tune"
    #: The node the log implicates, when it names one (for culprit checks).
    node: str | None = None

    @property
    def source_url(self) -> str | None:
        """The public thread the excerpt comes from (``owner/repo#N`` is a GitHub issue or PR)."""
        owner_repo, _, number = self.source.partition("#")
        if owner_repo.count("/") == 1 and number.isdigit():
            return f"https://github.com/{owner_repo}/issues/{number}"
        return self.source or None

    @property
    def digest(self) -> str:
        """Content address: the same excerpt is stored once."""
        return hashlib.sha256(self.text.encode("utf-8", errors="replace")).hexdigest()


def shipped_corpus_path() -> Path:
    return Path(str(resources.files("slurm_acme") / "data" / "failure_corpus.jsonl"))


def load_corpus(path: str | Path | None = None) -> list[LabelledCase]:
    """Read a JSONL corpus (``id``, ``category``, ``origin``, ``log``); default: shipped."""
    path = Path(path) if path is not None else shipped_corpus_path()
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: corpus file not found") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read corpus: {exc.strerror}") from None
    cases: list[LabelledCase] = []
    with handle:
        try:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                cases.append(_parse_case(line, f"{path}:{number}"))
        except UnicodeDecodeError:
            raise InputError(f"{path}: corpus is not UTF-8 text") from None
    if not cases:
        raise InputError(f"{path}: corpus has no cases")
    return cases


def _parse_case(line: str, where: str) -> LabelledCase:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object")
    for key in ("category", "origin", "log"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise InputError(f"{where}: missing field {key!r}")
    if data["origin"] not in ORIGINS:
        raise InputError(f"{where}: origin {data['origin']!r} is not one of {', '.join(ORIGINS)}")
    split = str(data.get("split") or "tune")
    if split not in SPLITS:
        raise InputError(f"{where}: split {split!r} is not one of {', '.join(SPLITS)}")
    return LabelledCase(
        id=str(data.get("id") or where), category=data["category"], origin=data["origin"],
        text=data["log"], source=str(data.get("source") or ""), split=split,
        node=str(data["node"]) if data.get("node") else None,
    )
