"""Where a report goes: stdout, ``--out FILE`` and ``--plots DIR``.

Destinations are checked *before* the (possibly long) computation, so an
unwritable path fails fast with a one-line error.
"""

from __future__ import annotations

import os
from pathlib import Path

from slurm_acme.errors import InputError


def check_out_file(path: str) -> Path:
    """``--out`` must be a file we can create or overwrite."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise InputError(f"--out {path!r} is a directory, not a file")
    if not parent.is_dir():
        raise InputError(f"--out {path!r}: folder {str(parent)!r} does not exist")
    if (out.exists() and not os.access(out, os.W_OK)) or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--out {path!r} is not writable")
    return out


def check_plots_dir(path: str) -> Path:
    """``--plots`` is created if missing; it must end up a writable folder."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--plots {path!r}: cannot create folder: {exc.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"--plots {path!r} is not writable")
    return folder


def write_text(out: Path, text: str) -> None:
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--out {str(out)!r}: cannot write: {exc.strerror}") from None


def write_plots(folder: Path, pngs: dict[str, bytes]) -> list[Path]:
    written = []
    for name, png in pngs.items():
        target = folder / f"{name}.png"
        try:
            target.write_bytes(png)
        except OSError as exc:
            raise InputError(f"--plots {str(folder)!r}: cannot write {target.name}: {exc.strerror}") from None
        written.append(target)
    return written
