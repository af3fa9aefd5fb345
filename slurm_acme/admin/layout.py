"""Where ``sacme admin install`` puts each file, and the slurm.conf lines that name them.

One owner for the installed paths: install, uninstall, check and the docs'
examples all derive them from a :class:`Layout` of a prefix (``/`` on a node; a
folder for staging, a shared filesystem or a test, holding the same tree).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

#: Package data folder holding the node files (hooks, wrapper, unit, configs).
NODE_DATA = "data/node"
#: The one hook file, installed as both the prolog and the epilog.
HOOK_SOURCE = "acme-hook"
COLLECTD_SOURCE = "acme-collectd"
UNIT_SOURCE = "acme-collectd.service"
SNIPPET_SOURCE = "slurm-acme.conf"
RECONCILE_SOURCE = "acme-nodes-reconcile.service"
RECONCILE_TIMER_SOURCE = "acme-nodes-reconcile.timer"
CONFIG_TEMPLATE = "acme.toml.template"
CONFIG_EXAMPLE = "acme.toml.example"
#: Node files every wheel and sdist must carry (a test builds both and looks).
NODE_FILES = (HOOK_SOURCE, COLLECTD_SOURCE, UNIT_SOURCE, SNIPPET_SOURCE, CONFIG_TEMPLATE,
              CONFIG_EXAMPLE, "gres-gpu.conf", RECONCILE_SOURCE, RECONCILE_TIMER_SOURCE)


def node_file(name: str) -> str:
    """The text of one shipped node file."""
    return resources.files("slurm_acme").joinpath(NODE_DATA, name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Layout:
    """The installed tree under ``prefix``."""

    prefix: Path

    def at(self, absolute: str) -> Path:
        """``absolute`` (a path on the node) under the prefix."""
        return self.prefix / absolute.lstrip("/")

    @property
    def is_root(self) -> bool:
        return self.prefix == Path("/")

    @property
    def libexec(self) -> Path:
        return self.at("/usr/local/libexec/slurm-acme")

    @property
    def prolog(self) -> Path:
        return self.libexec / "acme-prolog"

    @property
    def epilog(self) -> Path:
        return self.libexec / "acme-epilog"

    @property
    def collectd(self) -> Path:
        return self.libexec / "acme-collectd"

    @property
    def manifest(self) -> Path:
        """What install wrote (files with their hashes, folders it made): uninstall's list."""
        return self.libexec / "install.json"

    @property
    def etc(self) -> Path:
        return self.at("/etc/acme")

    @property
    def config(self) -> Path:
        return self.etc / "acme.toml"

    @property
    def example(self) -> Path:
        return self.etc / CONFIG_EXAMPLE

    @property
    def snippet(self) -> Path:
        return self.etc / SNIPPET_SOURCE

    @property
    def unit(self) -> Path:
        return self.at("/etc/systemd/system/acme-collectd.service")

    @property
    def reconcile_unit(self) -> Path:
        """``sacme nodes reconcile`` as a oneshot service (the drain policy)."""
        return self.at(f"/etc/systemd/system/{RECONCILE_SOURCE}")

    @property
    def reconcile_timer(self) -> Path:
        return self.at(f"/etc/systemd/system/{RECONCILE_TIMER_SOURCE}")

    @property
    def baked_config(self) -> str:
        """The config the installed hooks and unit name explicitly ('' under ``/``).

        Under ``/`` they follow the normal search order (which ends at
        /etc/acme/acme.toml); under another prefix, that prefix's acme.toml is
        what ``$ACME_CONF`` would say, so it takes $ACME_CONF's place.
        """
        return "" if self.is_root else str(self.config)

    def slurm_conf_lines(self) -> list[str]:
        """The slurm.conf lines the hooks need (printed by install, checked by check)."""
        return [f"Prolog={self.prolog}", f"Epilog={self.epilog}", "PrologFlags=Alloc",
                "AccountingStoreFlags=job_comment"]
