"""Who may see whose jobs: root and the admin group see everyone, others
only themselves (``report.admin_group`` in acme.toml)."""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass

from slurm_acme.errors import InputError


@dataclass(frozen=True)
class Viewer:
    name: str
    uid: int
    groups: frozenset[str]


def current_viewer() -> Viewer:
    """The Unix identity running the report (never from the environment,
    which a user controls)."""
    uid = os.getuid()
    name = pwd.getpwuid(uid).pw_name
    groups = set()
    for gid in {os.getgid(), *os.getgroups()}:
        try:
            groups.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return Viewer(name=name, uid=uid, groups=frozenset(groups))


def is_admin(viewer: Viewer, admin_group: str) -> bool:
    return viewer.uid == 0 or admin_group in viewer.groups


def visible_user(viewer: Viewer, admin_group: str, requested: str | None) -> str | None:
    """The ``user`` filter the report must apply for ``viewer``.

    Admins get what they asked for (``None`` = everyone); anyone else is
    narrowed to their own jobs, and asking for someone else's is an error.
    """
    if is_admin(viewer, admin_group):
        return requested
    if requested is not None and requested != viewer.name:
        raise InputError(
            f"--user {requested!r}: only members of admin group {admin_group!r} "
            f"may report on other users' jobs"
        )
    return viewer.name
