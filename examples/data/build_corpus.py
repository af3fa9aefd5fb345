"""Rebuild corpus.txt: the docstrings of a fixed list of Python standard-library modules.

The text is Python's own documentation (PSF License 2.0, see Python's LICENSE.txt):
free to redistribute, present on every machine with Python, and plain English
prose with some code, which suits a character-level model. Run with the same
Python version to reproduce the shipped file byte for byte.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

MODULES = [
    "abc", "argparse", "base64", "bisect", "calendar", "collections", "contextlib", "copy",
    "csv", "dataclasses", "datetime", "decimal", "difflib", "enum", "fractions", "functools",
    "heapq", "http.client", "inspect", "io", "itertools", "json", "logging", "mailbox",
    "operator", "os", "pathlib", "pickle", "pprint", "queue", "random", "re", "sched",
    "secrets", "shlex", "shutil", "socket", "sqlite3", "statistics", "string", "subprocess",
    "tarfile", "tempfile", "textwrap", "threading", "timeit", "typing", "unittest", "urllib.parse",
    "uuid", "warnings", "weakref", "zipfile",
]
LIMIT_BYTES = 1_500_000


def docstrings(module_name: str) -> list[str]:
    mod = importlib.import_module(module_name)
    out = [inspect.getdoc(mod) or ""]
    for name, obj in sorted(vars(mod).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
            continue
        doc = inspect.getdoc(obj)
        if doc:
            out.append(f"{name}\n{doc}")
    return [d for d in out if d.strip()]


def main() -> None:
    parts = []
    for name in MODULES:
        parts.extend(docstrings(name))
    text = "\n\n".join(parts)
    text = "".join(ch for ch in text if ch == "\n" or 32 <= ord(ch) < 127)
    text = text.encode()[:LIMIT_BYTES].decode(errors="ignore")
    out = Path(__file__).with_name("corpus.txt")
    out.write_text(text + "\n")
    print(f"wrote {out} ({len(text)} chars) with Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
