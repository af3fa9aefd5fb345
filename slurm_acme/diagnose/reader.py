"""Reading log files of any size and content, in bounded memory.

Logs are read as bytes in fixed-size chunks and split on newlines; a line
longer than :data:`MAX_LINE_BYTES` is cut (a binary file without newlines
still streams). Invalid UTF-8 never stops a diagnosis: it is decoded with
replacement characters only for the few lines anyone looks at.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from slurm_acme.diagnose.lines import DIGITS_TO_ZERO
from slurm_acme.errors import InputError

CHUNK_BYTES = 2 << 20
MAX_LINE_BYTES = 64 << 10


def open_log(path: str | os.PathLike[str]):  # type: ignore[no-untyped-def]
    """Open a log for binary reading (``-`` is stdin); a one-line :class:`InputError` if we can't."""
    if str(path) == "-":
        return contextlib.nullcontext(sys.stdin.buffer)
    path = Path(path)
    try:
        if path.is_dir():
            raise InputError(f"{path}: is a directory, not a log file")
        return path.open("rb")
    except FileNotFoundError:
        raise InputError(f"{path}: log file not found") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None


def iter_batches(handle, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[list[bytes], list[bytes]]]:  # type: ignore[no-untyped-def]
    """(lines, keys) per chunk; keys are the lines with digits zeroed."""
    rest = b""
    while True:
        try:
            chunk = handle.read(chunk_bytes)
        except OSError as exc:
            raise InputError(f"{getattr(handle, 'name', 'log')}: read failed: {exc.strerror}") from None
        if not chunk:
            break
        data = rest + chunk if rest else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) <= MAX_LINE_BYTES:
                rest = data
                continue
            cut = MAX_LINE_BYTES
            data = data[:cut] + b"\n" + data[cut:]
        rest = data[cut + 1:]
        body = data[:cut]
        if b"\r" in body:
            body = body.replace(b"\r\n", b"\n")
        lines = body.split(b"\n")
        keys = body.translate(DIGITS_TO_ZERO).split(b"\n")
        yield lines, keys
        if len(rest) > MAX_LINE_BYTES:
            rest = rest[:MAX_LINE_BYTES]
    if rest:
        yield [rest], [rest.translate(DIGITS_TO_ZERO)]
