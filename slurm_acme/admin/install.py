"""``sacme admin install`` / ``uninstall``: lay the node files down, and take them away.

Install is a plan first (:func:`plan_install`: every file with its mode and
text), printed by ``--dry-run`` and executed by :func:`apply`. The hooks and
the collector wrapper get this installation's interpreter and paths written in,
so nothing depends on a source tree. Files are root-owned; executables 0755.
``acme.toml`` is written only when absent. A manifest records what was written
(with hashes) and which folders were made, so uninstall removes exactly that and
a file an admin edited since is kept and named.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from slurm_acme import __version__
from slurm_acme.admin.layout import (
    COLLECTD_SOURCE,
    CONFIG_EXAMPLE,
    CONFIG_TEMPLATE,
    HOOK_SOURCE,
    RECONCILE_SOURCE,
    RECONCILE_TIMER_SOURCE,
    SNIPPET_SOURCE,
    UNIT_SOURCE,
    Layout,
    node_file,
)
from slurm_acme.errors import InputError

EXEC_MODE = 0o755
DATA_MODE = 0o644
DIR_MODE = 0o755


@dataclass(frozen=True)
class PlannedFile:
    path: Path
    mode: int
    text: str
    #: Written only when the path does not exist yet (the site's acme.toml).
    only_if_absent: bool = False

    @property
    def digest(self) -> str:
        return _digest(self.text.encode())


@dataclass(frozen=True)
class InstallPlan:
    layout: Layout
    files: tuple[PlannedFile, ...]
    python: str

    def folders(self) -> list[Path]:
        """Every folder the files need, outermost first, up to (not including) the prefix."""
        out: list[Path] = []
        for f in self.files:
            for parent in reversed(f.path.parents):
                if parent != self.layout.prefix and self.layout.prefix in parent.parents and parent not in out:
                    out.append(parent)
        return out


@dataclass
class Outcome:
    """What one install or uninstall did (or would do), one line per path."""

    lines: list[str] = field(default_factory=list)

    def add(self, action: str, path: Path, mode: int | None = None) -> None:
        self.lines.append(f"{action:<10} {f'{mode:04o}' if mode is not None else '':<5} {path}")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _set_line(text: str, name: str, value: str, source: str) -> str:
    """Replace the one line ``name=`` of a shell template with ``name=<quoted value>``."""
    empty = f"{name}=\n"
    if text.count(empty) != 1:
        raise RuntimeError(f"package file {source} has no single line {name}=")  # a broken wheel
    return text.replace(empty, f"{name}={shlex.quote(value)}\n")


def _fill(text: str, values: dict[str, str], source: str) -> str:
    for key, value in values.items():
        if f"@{key}@" not in text:
            raise RuntimeError(f"package file {source} has no @{key}@")
        text = text.replace(f"@{key}@", value)
    return text


def plan_install(prefix: Path, python: str | None = None) -> InstallPlan:
    """Every file install writes under ``prefix``, rendered for this interpreter."""
    if not prefix.is_absolute():
        raise InputError(f"--prefix must be an absolute path (got {str(prefix)!r})")
    lay = Layout(prefix)
    py = python or sys.executable
    hook = _set_line(node_file(HOOK_SOURCE), "installed_conf", lay.baked_config, HOOK_SOURCE)
    hook = _set_line(hook, "installed_collectd", str(lay.collectd), HOOK_SOURCE)
    collectd = _set_line(node_file(COLLECTD_SOURCE), "installed_python", py, COLLECTD_SOURCE)
    env = (f"Environment=ACME_CONF={lay.baked_config}" if lay.baked_config
           else "# ACME_CONF unset: the config is found in slurm-acme's order (/etc/acme/acme.toml).")
    unit = _fill(node_file(UNIT_SOURCE), {"ENVIRONMENT": env, "COLLECTD": str(lay.collectd)}, UNIT_SOURCE)
    reconcile = _fill(node_file(RECONCILE_SOURCE), {"ENVIRONMENT": env, "PYTHON": py}, RECONCILE_SOURCE)
    snippet = _fill(node_file(SNIPPET_SOURCE), {"PROLOG": str(lay.prolog), "EPILOG": str(lay.epilog)},
                    SNIPPET_SOURCE)
    files = (
        PlannedFile(lay.prolog, EXEC_MODE, hook),
        PlannedFile(lay.epilog, EXEC_MODE, hook),
        PlannedFile(lay.collectd, EXEC_MODE, collectd),
        PlannedFile(lay.unit, DATA_MODE, unit),
        PlannedFile(lay.reconcile_unit, DATA_MODE, reconcile),
        PlannedFile(lay.reconcile_timer, DATA_MODE, node_file(RECONCILE_TIMER_SOURCE)),
        PlannedFile(lay.snippet, DATA_MODE, snippet),
        PlannedFile(lay.example, DATA_MODE, node_file(CONFIG_EXAMPLE)),
        PlannedFile(lay.config, DATA_MODE, node_file(CONFIG_TEMPLATE), only_if_absent=True),
    )
    return InstallPlan(lay, files, py)


def _read_manifest(lay: Layout) -> dict:
    try:
        data = json.loads(lay.manifest.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InputError(f"{lay.manifest}: unreadable install manifest ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise InputError(f"{lay.manifest}: not an install manifest of slurm-acme")
    return data


def _same(path: Path, text: str, mode: int) -> bool:
    try:
        st = path.lstat()
        return (path.is_file() and not path.is_symlink() and (st.st_mode & 0o7777) == mode
                and st.st_uid == 0 and st.st_gid == 0 and path.read_bytes() == text.encode())
    except OSError:
        return False


def _write(path: Path, text: str, mode: int) -> None:
    """Atomically: a temporary file beside it, owned and moded, then renamed over."""
    tmp = path.with_name(f".{path.name}.acme-tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chown(tmp, 0, 0)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def require_root() -> None:
    if os.geteuid() != 0:
        raise InputError("sacme admin install/uninstall must run as root: the hooks run as root "
                         "and must be root-owned (use --dry-run to see the plan)")


def apply(plan: InstallPlan, *, dry_run: bool = False) -> Outcome:
    """Write the plan (or, with ``dry_run``, only say what would be written)."""
    lay = plan.layout
    out = Outcome()
    if not lay.prefix.is_dir():
        raise InputError(f"--prefix {lay.prefix} is not a folder")
    if not dry_run:
        require_root()
    manifest = _read_manifest(lay)
    made = list(manifest.get("folders", []))
    for folder in plan.folders():
        if not folder.exists():
            out.add("mkdir", folder, DIR_MODE)
            if not dry_run:
                folder.mkdir(mode=DIR_MODE)
                os.chown(folder, 0, 0)
                os.chmod(folder, DIR_MODE)
                made.append(str(folder))
        elif not folder.is_dir():
            raise InputError(f"{folder} exists and is not a folder")
    files = dict(manifest.get("files", {}))
    for f in plan.files:
        if f.only_if_absent and (f.path.exists() or f.path.is_symlink()):
            out.add("kept", f.path)  # the site's own (or install's earlier copy, maybe edited)
            continue
        if _same(f.path, f.text, f.mode):
            out.add("unchanged", f.path, f.mode)
        else:
            out.add("update" if f.path.exists() else "write", f.path, f.mode)
            if not dry_run:
                _write(f.path, f.text, f.mode)
        files[str(f.path)] = f.digest
    record = {"version": __version__, "python": plan.python, "files": files,
              "folders": list(dict.fromkeys(made))}
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    if _same(lay.manifest, text, DATA_MODE):
        out.add("unchanged", lay.manifest, DATA_MODE)
    else:
        out.add("update" if lay.manifest.exists() else "write", lay.manifest, DATA_MODE)
        if not dry_run:
            _write(lay.manifest, text, DATA_MODE)
    return out


def uninstall(prefix: Path, *, dry_run: bool = False) -> Outcome:
    """Remove what install wrote under ``prefix`` (its manifest says what), nothing else."""
    lay = Layout(prefix)
    manifest = _read_manifest(lay)
    if not manifest:
        raise InputError(f"nothing of slurm-acme is installed under {prefix} (no {lay.manifest})")
    if not dry_run:
        require_root()
    out = Outcome()
    for name, digest in sorted(manifest["files"].items()):
        path = Path(name)
        try:
            current = _digest(path.read_bytes())
        except FileNotFoundError:
            out.add("gone", path)
            continue
        if current != digest:
            out.add("kept", path)  # edited since install wrote it: the admin's now
            out.lines[-1] += " (changed since install; remove it by hand)"
            continue
        out.add("remove", path)
        if not dry_run:
            path.unlink()
    out.add("remove", lay.manifest)
    if not dry_run:
        lay.manifest.unlink()
    for name in sorted(manifest.get("folders", []), key=lambda p: -len(Path(p).parts)):
        folder = Path(name)
        if folder.is_dir() and not any(p for p in folder.iterdir() if not _removed(p, out, dry_run)):
            out.add("rmdir", folder)
            if not dry_run:
                folder.rmdir()
    return out


def _removed(path: Path, out: Outcome, dry_run: bool) -> bool:
    """In a dry run, whether ``path`` is one the run said it would remove (else: it is gone)."""
    return dry_run and any(line.endswith(f" {path}") and line.split()[0] in ("remove", "rmdir")
                           for line in out.lines)
