"""Reading a shard's examples from a dataset's JSONL file (the registry's ``path``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurm_acme.errors import InputError


def read_examples(path: str | Path, start: int, stop: int) -> list[dict[str, Any]]:
    """Examples ``[start, stop)`` (0-based line numbers) of a JSONL file."""
    out: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i >= stop:
                    break
                if i >= start and line.strip():
                    out.append(json.loads(line))
    except OSError as exc:
        raise InputError(f"{path}: cannot read examples: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: line {i + 1} is not JSON: {exc.msg}") from None
    return out
