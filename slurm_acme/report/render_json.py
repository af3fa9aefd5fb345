"""``--format json``: one object whose top-level keys are the section names."""

from __future__ import annotations

import json

from slurm_acme.report.model import Report


def render_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n"
