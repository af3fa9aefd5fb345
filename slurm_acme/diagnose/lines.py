"""What every log line carries besides its message: rank, host and a dedup key.

Multi-node training output arrives interleaved from many ranks, each line
prefixed by whoever relayed it: ``srun -l`` (``3: ``), torch (``[rank3]:``),
torchrun ``--tee`` (``[default3]:``) and the in-job supervisor (``node2: ``).
These helpers peel those prefixes off so rules see the message and the
diagnosis knows which rank and host spoke.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Digits all become ``0``: lines differing only in numbers (steps, losses,
#: ranks, pids, timestamps) share one key, computed with ``bytes.translate``
#: at memory speed. The precise template masking runs once per key, not per line.
DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
STR_DIGITS_TO_ZERO = str.maketrans("123456789", "000000000")

_HOST = r"[A-Za-z][A-Za-z0-9_.-]*[0-9][A-Za-z0-9_.-]*"
_PREFIXES = (
    re.compile(rf"^(?P<node>{_HOST}): (?=\S)"),
    re.compile(rf"^\[(?P<node>{_HOST})\] "),
    re.compile(r"^\s*(?P<rank>[0-9]{1,6}): "),
    re.compile(r"^\[(?:rank|default)(?P<rank>[0-9]{1,6})\]:\s?"),
    re.compile(r"^\[[0-9]+\] (?=\[rank)"),
)
_NOT_HOSTS = re.compile(r"(?i)(error|exception|warning|info|debug)$")


@dataclass(frozen=True)
class Origin:
    """Who printed a line, as far as its prefixes tell."""

    rank: int | None
    node: str | None
    body: str


def split_prefixes(line: str) -> Origin:
    """Strip relay prefixes (node, srun task, torch rank) off ``line``."""
    rank: int | None = None
    node: str | None = None
    body = line
    for _ in range(4):
        for pattern in _PREFIXES:
            match = pattern.match(body)
            if match is None:
                continue
            found = match.groupdict()
            if found.get("node"):
                if _NOT_HOSTS.search(found["node"]) or node is not None:
                    continue
                node = found["node"]
            if found.get("rank") is not None and rank is None:
                rank = int(found["rank"])
            body = body[match.end():]
            break
        else:
            break
    return Origin(rank=rank, node=node, body=body)


def decode(raw: bytes) -> str:
    """Bytes of a log line as text; invalid UTF-8 becomes U+FFFD, NULs vanish."""
    return raw.decode("utf-8", errors="replace").replace("\x00", "").rstrip("\r")
