"""Well-known failure messages beyond the corpus, one per mechanism.

Written from the messages PyTorch, NCCL, the NVIDIA driver, Slurm and the
kernel print, not from the corpus: a guard against rules that only know the
excerpts they were written from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_acme.diagnose import diagnose

MESSAGES = [json.loads(line) for line in
            (Path(__file__).resolve().parent.parent / "fixtures" / "diagnose" / "known_messages.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("case", MESSAGES, ids=lambda c: c["category"])
def test_known_message(case):
    verdict = diagnose(case["log"].splitlines(), cases=[])
    assert (verdict.category, verdict.origin) == (case["category"], case["origin"]), verdict.evidence
