"""What ``sacme status`` needs of a run's stored spec, read without validating it again.

The runs table keeps the spec ``sacme submit`` validated, as
:meth:`slurm_acme.ft.spec.TrainSpec.to_json` wrote it (every default filled
in). Status needs four facts of it: where the checkpoints are, which files are
checkpoints, and how many nodes train and are held. Reading them from the JSON
spares the command pydantic and the spec's models (most of its start-up);
``tests/unit/test_contracts.py`` round-trips ``TrainSpec.to_json`` through
:func:`read_stored_spec`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StoredSpec:
    nodes: int
    #: Nodes the job holds: the training nodes and the spares.
    allocated_nodes: int
    checkpoint_dir: str
    checkpoint_globs: tuple[str, ...]


def read_stored_spec(text: str) -> StoredSpec | None:
    """The facts of a stored spec; None when ``text`` is not one (a row written by an
    older version, a hand-made row)."""
    try:
        data: Any = json.loads(text)
        nodes, ckpt = data["nodes"], data["checkpoint"]
        spares = (data.get("fault_tolerance") or {}).get("spares") or 0
        folder, globs = ckpt["dir"], ckpt["glob"]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not (_count(nodes) and nodes >= 1 and _count(spares) and isinstance(folder, str)
            and isinstance(globs, list) and all(isinstance(g, str) for g in globs)):
        return None
    return StoredSpec(nodes=nodes, allocated_nodes=nodes + spares, checkpoint_dir=folder,
                      checkpoint_globs=tuple(globs))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
