"""Who may see and act on whose jobs, runs and evaluations.

Root and members of ``report.admin_group`` see everyone's; anyone else only
their own, by every command (report, status, logs, seval status/results/cancel).
The identity is the process's real credentials, never the environment, and the
admin group comes only from the trusted system config
(:func:`slurm_acme.config.system_config`): a user's own ``--config`` cannot
make her an admin.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
from dataclasses import dataclass

from slurm_acme.errors import AccessDenied

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Viewer:
    name: str
    uid: int
    groups: frozenset[str]


def current_viewer() -> Viewer:
    """The Unix identity running the command (from the kernel, not ``$USER``)."""
    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    groups = set()
    for gid in {os.getgid(), *os.getgroups()}:
        try:
            groups.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return Viewer(name=name, uid=uid, groups=frozenset(groups))


def admin_group() -> str:
    """The admin group, from the trusted system config only."""
    from slurm_acme.config import system_config

    return system_config().report.admin_group


def is_admin(viewer: Viewer, group: str | None = None) -> bool:
    return viewer.uid == 0 or (group if group is not None else admin_group()) in viewer.groups


def warn_ignored_grants(config) -> None:  # type: ignore[no-untyped-def]
    """Say once that a user config's admin settings do nothing (so nobody relies on them)."""
    from slurm_acme.config import SYSTEM_CONFIG, ignored_grants

    for setting in ignored_grants(config):
        log.warning("%s in %s is ignored: it is only read from %s (root-owned)",
                    setting, config.source, SYSTEM_CONFIG)


def visible_user(viewer: Viewer, requested: str | None, group: str | None = None) -> str | None:
    """The ``user`` filter a listing must apply for ``viewer``.

    Admins get what they asked for (``None`` = everyone); anyone else is
    narrowed to their own, and asking for someone else's is refused.
    """
    group = group if group is not None else admin_group()
    if is_admin(viewer, group):
        return requested
    if requested is not None and requested != viewer.name:
        raise AccessDenied(f"--user {requested!r}: only members of admin group {group!r} "
                           f"may see other users' jobs")
    return viewer.name


def check_owner(viewer: Viewer, owner: str | None, what: str, group: str | None = None) -> None:
    """Refuse, in one line, to show or act on ``what`` unless ``viewer`` owns it or is an admin.

    A record with no owner recorded is treated as someone else's.
    """
    if owner == viewer.name and owner is not None:
        return
    group = group if group is not None else admin_group()
    if is_admin(viewer, group):
        return
    raise AccessDenied(f"{what} is not yours: only its owner or members of admin group "
                       f"{group!r} may see or change it")
