"""Running one collector per node: a lock so only one runs, a pid file for the
hooks' cheap liveness check, and a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
from typing import IO

from slurm_acme.files import make_private_dirs
from slurm_acme.telemetry.collector import Collector
from slurm_acme.telemetry.settings import CollectorSettings

log = logging.getLogger("acme.collectd")


def take_lock(settings: CollectorSettings) -> IO[str] | None:
    """The node's collector lock, or None when another collector holds it.

    The hooks may start several collectors at once (64 jobs ending together);
    the lock, not the pid file, decides which one runs.
    """
    make_private_dirs(settings.node_dir)  # spools are root-only
    handle = open(settings.lockfile, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def write_pidfile(settings: CollectorSettings) -> None:
    tmp = settings.pidfile.with_suffix(".tmp")
    tmp.write_text(f"{os.getpid()}\n")
    tmp.replace(settings.pidfile)


def run_collector(settings: CollectorSettings, *, once: bool = False) -> int:
    """Run until signalled (or one tick and a flush with ``once``); 0 when another runs."""
    lock = take_lock(settings)
    if lock is None:
        settings.start_claim.unlink(missing_ok=True)  # a redundant start: the running one holds the lock
        log.info("%s: a collector already runs here (%s)", settings.node, settings.lockfile)
        return 0
    collector = Collector(settings)
    try:
        write_pidfile(settings)
        settings.start_claim.unlink(missing_ok=True)  # the next hook that finds no collector may start one
        collector.start()
        if once:
            collector.process_marks()
            collector.tick(collector.clock())
            collector.maybe_flush(collector.clock(), force=True)
            return 0
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: collector.stop())
        collector.run()
        return 0
    finally:
        collector.close()
        if not once:
            settings.pidfile.unlink(missing_ok=True)
        lock.close()
