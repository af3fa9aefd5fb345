"""``--format csv``: the whole report as long-format ``section,key,value`` rows,
the shape spreadsheets and ``pandas.pivot`` like."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

from slurm_acme.report.model import SECTIONS, Report


def _item_name(index: int, item: Any) -> str:
    """A stable, readable key for one element of a list section."""
    if isinstance(item, dict):
        if "key" in item:
            return str(item["key"])
        if "month" in item:
            return str(item["month"])
        if "cluster" in item:
            return str(item["cluster"])
        if "category" in item:
            return f"{item['origin']}/{item['category']}"
        if "origin" in item:
            return str(item["origin"])
        if "le_s" in item:
            return f"le_{int(item['le_s'])}s"
        if "gpus" in item:
            return f"le_{int(item['gpus'])}gpus"
    return str(index)


#: Fields that name a list item (they become part of its key, not value rows).
_IDENTIFYING = ("key", "month", "cluster", "origin", "category", "le_s", "gpus")


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``{"a": {"b": 1}}`` -> ``("a.b", 1)``; identifying fields of list items
    become part of the key instead of a value row."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from flatten(inner, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            name = _item_name(index, item)
            if isinstance(item, dict):
                item = {k: v for k, v in item.items() if k not in _IDENTIFYING}
            yield from flatten(item, f"{prefix}.{name}" if prefix else name)
    else:
        yield prefix, value


def render_csv(report: Report) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["section", "key", "value"])
    data = report.to_json()
    for section in SECTIONS:
        if data[section] is None:
            writer.writerow([section, "available", "false"])
            continue
        for key, value in flatten(data[section]):
            writer.writerow([section, key, "" if value is None else value])
    return buffer.getvalue()
