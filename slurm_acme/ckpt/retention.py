"""Keep the newest K healthy checkpoints; delete older ones and stale partial saves.

Never deletes the newest healthy checkpoint, nor anything newer than the oldest
checkpoint it keeps (a newer partial directory may be a save in progress).
"""

from __future__ import annotations

import logging
from pathlib import Path

from slurm_acme.ckpt.fsio import LocalFS
from slurm_acme.ckpt.manifest import MANIFEST_NAME, files_present, read_manifest, step_dirs

log = logging.getLogger(__name__)


def prune(ckpt_dir: str | Path, keep: int, fs: LocalFS | None = None) -> list[Path]:
    """Delete what retention allows; return the deleted step directories."""
    if keep < 1:
        raise ValueError(f"keep={keep}: at least the newest healthy checkpoint must be kept")
    fs = fs or LocalFS()
    dirs = step_dirs(ckpt_dir)
    healthy = []
    for step, path in dirs:
        manifest = read_manifest(path)
        if manifest is not None and files_present(path, manifest) is None:
            healthy.append((step, path))
    kept = healthy[-keep:]
    if not kept:
        return []
    cutoff = kept[0][0]
    kept_paths = {p for _, p in kept}
    deleted = []
    for step, path in dirs:
        if step < cutoff and path not in kept_paths:
            fs.remove_tree(path, first=MANIFEST_NAME)
            deleted.append(path)
            log.info("retention: deleted checkpoint %s", path)
    return deleted
