"""``sacme admin check``: is this node set up right? One row per check, each failure with its fix.

What it looks at, and why each matters:
- the hooks slurm.conf names: a missing or non-executable one drains the node
  at the next job; a slow one holds every job's start. Each is run once, timed,
  in its ``check`` mode (it resolves its config and spool as a job's run does,
  writes ``hook.check`` instead of a mark, and starts nothing);
- the hooks' spool folder is the collector's (the one config search order);
- ``PrologFlags`` includes ``Alloc``: otherwise the prolog runs at the first
  step, and GPUs are attributed late or never;
- the collector runs, and its spool is flushing to the store;
- which samplers found hardware (a GPU node with no GPU sampler records nothing);
- the store answers at the current schema;
- the clock agrees with the controller's (samples are joined to Slurm's job times).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_acme.admin.hookrun import timed_check_run
from slurm_acme.errors import AcmeError

if TYPE_CHECKING:
    from slurm_acme.cli.context import AppContext
    from slurm_acme.slurm import Slurm
    from slurm_acme.telemetry.settings import CollectorSettings

#: A hook slower than this fails the check (they take a few milliseconds).
HOOK_BUDGET_MS = 500.0
#: A clock further than this from the controller's fails the check (sdiag has 1 s resolution).
CLOCK_TOLERANCE_S = 2.0
#: Samplers that see GPUs.
GPU_SAMPLERS = ("nvml", "dcgm", "synthetic")


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    @property
    def status(self) -> str:
        return "ok" if self.ok else "fail"

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "status": self.status}


def run_checks(app: AppContext, *, node: str | None = None) -> list[CheckResult]:
    """Every check, in order; one that cannot run is a failure that says why."""
    from slurm_acme.slurm import Slurm
    from slurm_acme.telemetry.settings import CollectorSettings

    config = app.config
    settings = CollectorSettings.from_config(config, node=node, store_url=app.store_url)
    slurm = Slurm(timeout=min(config.slurm.command_timeout_s, 30.0))
    results: list[CheckResult] = []
    try:
        slurm_config = slurm.show_config()
    except AcmeError as exc:
        results.append(CheckResult("slurm", False, f"scontrol show config: {exc}",
                                   "make slurmctld reachable from this node (SLURM_CONF, munge)"))
        slurm_config = None
    if slurm_config is not None:
        for kind in ("Prolog", "Epilog"):
            results.append(check_hook(kind, slurm_config.get(kind, ""), settings))
        results.append(check_prolog_flags(slurm_config.get("PrologFlags", "")))
    results.append(check_collector(settings))
    results.append(check_spool(settings))
    results.append(check_samplers(settings, slurm))
    results.append(check_store(app.store_url))
    results.append(check_clock(slurm))
    return results


def _install_fix(what: str) -> str:
    return f"{what}; `sacme admin install` lays the hooks out (see its slurm.conf lines)"


def check_hook(kind: str, configured: str, settings: CollectorSettings) -> CheckResult:
    """The hook slurm.conf names: there, executable, fast, and agreeing on the spool."""
    name = kind.lower()
    paths = [p for p in configured.split(",") if p]
    ours = [p for p in paths if Path(p).name.startswith("acme-")]
    if not ours:
        shown = configured or "nothing"
        return CheckResult(name, False, f"slurm.conf {kind}= names {shown}, no slurm-acme hook",
                           _install_fix(f"set {kind}=/usr/local/libexec/slurm-acme/acme-{name} in slurm.conf"))
    path = Path(ours[0])
    if not path.is_file():
        return CheckResult(name, False,
                           f"{path} (slurm.conf {kind}) does not exist: every job here would drain the node",
                           _install_fix("install it on this node"))
    if not os.access(path, os.X_OK):
        return CheckResult(name, False, f"{path} is not executable: every job here would drain the node",
                           f"chmod 0755 {path} (or rerun `sacme admin install`)")
    elapsed_ms, out = timed_check_run(path, settings.node)
    if out is None:
        return CheckResult(name, False, f"{path} did not finish in 10 s", "find what blocks it (a hung filesystem?)")
    if "error" in out:
        return CheckResult(name, False, f"{path}: {out['error']}", "fix the hook's spool folder (telemetry.spool_dir)")
    if elapsed_ms > HOOK_BUDGET_MS:
        return CheckResult(name, False, f"{path} took {elapsed_ms:.0f} ms (budget {HOOK_BUDGET_MS:.0f} ms)",
                           "a slow spool filesystem? telemetry.spool_dir must be on local disk")
    spool = out.get("spool", "")
    if Path(spool) != settings.spool_dir:
        return CheckResult(name, False, f"{path} writes marks under {spool}, the collector reads "
                           f"{settings.spool_dir} (config {out.get('conf') or 'none'})",
                           "give both the same acme.toml ($ACME_CONF, beside slurm.conf, or /etc/acme/acme.toml)")
    collectd = out.get("collectd", "")
    if not os.access(collectd, os.X_OK):
        return CheckResult(name, False, f"{path} would start {collectd}, which is not executable",
                           "rerun `sacme admin install`")
    return CheckResult(name, True, f"{path}: {elapsed_ms:.0f} ms, spool {spool}")


def check_prolog_flags(flags: str) -> CheckResult:
    names = {f.strip().lower() for f in flags.split(",") if f.strip()}
    if "alloc" in names:
        return CheckResult("prolog_flags", True, f"PrologFlags={flags}")
    return CheckResult("prolog_flags", False, f"PrologFlags={flags or '(none)'} lacks Alloc: the prolog runs "
                       "at a job's first step, not at allocation",
                       "add Alloc to PrologFlags in slurm.conf (keep the site's other flags), then "
                       "`scontrol reconfigure`")


def _collector_pid(settings: CollectorSettings) -> int | None:
    try:
        pid = int(settings.pidfile.read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    return pid if b"collectd" in cmdline else None


def check_collector(settings: CollectorSettings) -> CheckResult:
    pid = _collector_pid(settings)
    if pid is None:
        return CheckResult("collector", False, f"no collector runs for node {settings.node} "
                           f"(no live pid in {settings.pidfile})",
                           "systemctl start acme-collectd (or the next job's prolog starts it; "
                           "its log is collectd.log beside the pid file)")
    return CheckResult("collector", True, f"pid {pid}, node {settings.node}")


def check_spool(settings: CollectorSettings) -> CheckResult:
    """Samples arrive, and none waits longer than a few flush intervals."""
    from slurm_acme.store import open_store
    from slurm_acme.store import telemetry as tstore

    db = settings.node_dir / "spool.db"
    if not db.exists():
        return CheckResult("spool", False, f"{db} does not exist: no collector has sampled here",
                           "start the collector (see above)")
    spool = open_store(settings.spool_url, migrate=False, readonly=True)
    try:
        backlog = tstore.spool_backlog(spool)
    finally:
        spool.dispose()
    t = settings.telemetry
    now = time.time()
    if backlog.newest_ts is None or now - backlog.newest_ts > max(3 * t.interval_s, 60):
        age = "never" if backlog.newest_ts is None else f"{now - backlog.newest_ts:.0f} s ago"
        return CheckResult("spool", False, f"the newest sample in {db} is {age}",
                           "the collector is not sampling: read collectd.log beside the spool")
    late = max(3 * t.flush_interval_s, 60)
    if backlog.oldest_unflushed_ts is not None and now - backlog.oldest_unflushed_ts > late:
        return CheckResult("spool", False, f"{backlog.unflushed_rows} samples wait, the oldest for "
                           f"{now - backlog.oldest_unflushed_ts:.0f} s (flush every {t.flush_interval_s:g} s)",
                           "the store is not taking them: see the store row, and collectd.log")
    return CheckResult("spool", True, f"sampling and flushing ({backlog.unflushed_rows} samples not yet flushed)")


def check_samplers(settings: CollectorSettings, slurm: Slurm) -> CheckResult:
    """Which samplers find hardware; a node Slurm gives GPUs must have a GPU sampler that works."""
    from slurm_acme.telemetry.samplers import build_samplers

    found, skipped = [], []
    for sampler in build_samplers(settings):
        try:
            reason = sampler.probe()
        except Exception as exc:  # a probe's own bug must not hide the other rows
            reason = f"probe failed: {exc}"
        finally:
            try:
                sampler.close()
            except Exception:  # closing a failed probe: nothing more to say
                pass
        (found.append(sampler.name) if reason is None else skipped.append(f"{sampler.name} ({reason})"))
    detail = f"found: {', '.join(found) or 'none'}" + (f"; skipped: {'; '.join(skipped)}" if skipped else "")
    try:
        nodes = slurm.show_nodes([settings.node])
        gres = nodes[0].get("Gres") if nodes else ""
    except AcmeError:
        gres = ""
    if "gpu" in gres and not any(name in found for name in GPU_SAMPLERS):
        return CheckResult("samplers", False,
                           f"Slurm gives {settings.node} {gres}, but no GPU sampler works; {detail}",
                           "pip install 'slurm-acme[nvml]' in this installation's environment, "
                           "or start nv-hostengine for DCGM")
    return CheckResult("samplers", bool(found), detail, "" if found else "check telemetry.samplers in acme.toml")


def check_store(url: str) -> CheckResult:
    from slurm_acme.store import open_store
    from slurm_acme.store.migrate import LATEST, schema_version

    try:
        store = open_store(url, migrate=False, readonly=True)
    except AcmeError as exc:
        return CheckResult("store", False, str(exc), "set store.url in acme.toml to a store this node reaches")
    shown = store.shown_url
    try:
        version = schema_version(store)
    except AcmeError as exc:
        return CheckResult("store", False, f"{shown}: {exc}", "sacme db upgrade")
    finally:
        store.dispose()
    if version != LATEST:
        return CheckResult("store", False, f"{shown} is at schema {version}, this slurm-acme needs {LATEST}",
                           "sacme db upgrade" if version < LATEST else "upgrade slurm-acme on this node")
    return CheckResult("store", True, f"{shown}, schema {version}")


def check_clock(slurm: Slurm) -> CheckResult:
    before = time.time()
    try:
        controller = slurm.controller_time()
    except AcmeError as exc:
        return CheckResult("clock", False, f"cannot read the controller's time: {exc}",
                           "make slurmctld reachable (sdiag)")
    after = time.time()
    offset = controller - (before + after) / 2
    if abs(offset) > CLOCK_TOLERANCE_S + (after - before) / 2:
        return CheckResult("clock", False, f"{offset:+.1f} s from the controller",
                           "run NTP/chrony on this node and the controller")
    return CheckResult("clock", True, f"{offset:+.1f} s from the controller (sdiag, 1 s resolution)")
