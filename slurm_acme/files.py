"""Files and folders slurm-acme creates are private unless a group is configured.

A store holds every user's jobs and a run folder holds a user's logs, so they
are created 0600 / 0700 (owner only), or 0640 / 2750 (group-readable, the
group inherited by what is created inside) when ``files.group`` names a Unix
group in acme.toml. Modes are set explicitly with chmod, whatever the umask.

Creation is recorded, so a command that fails half-way can remove exactly what
it made (:func:`remove_created`) and nothing that was there before.
"""

from __future__ import annotations

import grp
import os
import shutil
from pathlib import Path

from slurm_acme.errors import ConfigError


def _gid(group: str | None) -> int | None:
    if not group:
        return None
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ConfigError(f"files.group: no Unix group {group!r}") from None


def dir_mode(group: str | None) -> int:
    return 0o2750 if group else 0o700


def file_mode(group: str | None) -> int:
    return 0o640 if group else 0o600


def _apply(path: Path, mode: int, gid: int | None) -> None:
    if gid is not None:
        os.chown(path, -1, gid)
    os.chmod(path, mode)


#: Mode for a missing parent several users write into (a node-local scratch root such
#: as evaluate.local_dir): like /tmp, anyone may add a folder, nobody may remove another's.
SHARED_ROOT_MODE = 0o1777
#: Mode for a missing parent of a private folder that may be shared (``mkdir -p``'s).
PLAIN_PARENT_MODE = 0o755


def make_private_dirs(path: str | os.PathLike[str], group: str | None = None, *,
                      parents_mode: int | None = None) -> list[Path]:
    """Create ``path`` and any missing parents, each private (or group-readable).

    With ``parents_mode`` only ``path`` itself is private and the missing
    parents get that mode (:data:`PLAIN_PARENT_MODE`, or :data:`SHARED_ROOT_MODE`
    for a root other users also write into). Returns the folders it created,
    outermost first; folders that existed keep their mode.
    """
    gid = _gid(group)
    target = Path(path).expanduser()
    missing: list[Path] = []
    probe = target
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    created: list[Path] = []
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours to remove
        created.append(folder)
        if parents_mode is not None and folder != target:
            os.chmod(folder, parents_mode)
        else:
            _apply(folder, dir_mode(group), gid)
    return created


def create_private_file(path: str | os.PathLike[str], group: str | None = None) -> bool:
    """Create an empty file with the private mode if it does not exist; True if created."""
    gid = _gid(group)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    _apply(Path(path), file_mode(group), gid)
    return True


def remove_created(created: list[Path]) -> None:
    """Undo :func:`make_private_dirs`: remove what it made, innermost first."""
    for folder in reversed(created):
        shutil.rmtree(folder, ignore_errors=True)
