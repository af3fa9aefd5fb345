"""The node collector: sample every interval, attribute GPUs to jobs, spool, flush.

One loop, one thread. Each tick is one SQLite transaction in the node-local
spool, so ``kill -9`` loses at most the tick in progress. Marks are polled
every second; a job's end triggers its summary share and an early flush.
A central store that is down only delays flushing: the spool keeps the rows.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from slurm_acme.errors import AcmeError, StoreError
from slurm_acme.files import make_private_dirs
from slurm_acme.slurm import Slurm
from slurm_acme.store import Store, open_store
from slurm_acme.store import nodes as ledger
from slurm_acme.store import telemetry as tstore
from slurm_acme.telemetry import marks as markfiles
from slurm_acme.telemetry.exporter import MetricsServer
from slurm_acme.telemetry.hwevents import HardwareWatch
from slurm_acme.telemetry.records import GPU_FIELDS, NODE_FIELDS, Reading
from slurm_acme.telemetry.samplers import Sampler, build_samplers
from slurm_acme.telemetry.settings import CollectorSettings
from slurm_acme.telemetry.summary import node_share

log = logging.getLogger("acme.collectd")
MARK_POLL_S = 1.0
#: How often a collector runs one step of raw-sample retention after a flush.
PRUNE_EVERY_S = 600.0
NVIDIA_DRIVER = "/proc/driver/nvidia"


class Collector:
    def __init__(self, settings: CollectorSettings, *, samplers: list[Sampler] | None = None,
                 open_central: Callable[[str], Store] = open_store,
                 gpu_resolver: Callable[[str, str], tuple[int, ...] | None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.open_central = open_central
        self.resolve_gpus = gpu_resolver or self._ask_slurm
        self.samplers = samplers if samplers is not None else build_samplers(settings)
        self.active: list[Sampler] = []
        self.spool: Store | None = None
        self.central: Store | None = None
        self.said: set[str] = set()
        self.uuids: dict[int, str] = {}
        self.flush_due = False
        #: Hardware events were spooled: after the next flush, apply the drain policy to this node.
        self.drain_due = False
        self.hardware = HardwareWatch(settings.cluster, settings.node)
        self.next_flush = 0.0
        self.next_prune = 0.0
        self.stop_event = threading.Event()
        t = settings.telemetry
        self.metrics: MetricsServer | None = (MetricsServer(t.metrics_address, t.metrics_port)
                                              if t.metrics_port else None)

    # -------------------------------------------------------------- lifecycle

    def start(self) -> None:
        s = self.settings
        make_private_dirs(s.marks_dir)  # spools are root-only
        self.spool = open_store(s.spool_url)
        for sampler in self.samplers:
            reason = sampler.probe()
            if reason is None:
                self.active.append(sampler)
                log.info("%s: sampler %s on", s.node, sampler.name)
            else:
                log.warning("%s: sampler %s skipped: %s", s.node, sampler.name, reason)
        if any(a.name == "synthetic" for a in self.active) and os.path.exists(NVIDIA_DRIVER):
            log.warning("%s: SYNTHETIC GPU data is on but this node has an NVIDIA driver (%s); "
                        "set telemetry.synthetic_gpus = 0 to measure the real GPUs",
                        s.node, NVIDIA_DRIVER)
        self.next_flush = self.clock()
        if self.metrics is not None:
            try:
                port = self.metrics.start()
                log.info("%s: /metrics on %s:%d", s.node, s.telemetry.metrics_address, port)
            except OSError as exc:  # the port is taken: sample anyway, say so once
                log.warning("%s: cannot serve /metrics on port %d: %s", s.node, s.telemetry.metrics_port, exc)
                self.metrics = None

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        for sampler in self.active:
            sampler.close()
        for store in (self.spool, self.central):
            if store is not None:
                store.dispose()

    def run(self) -> None:
        """Tick every interval until :meth:`stop`; marks are polled every second."""
        next_tick = self.clock()
        while not self.stop_event.is_set():
            now = self.clock()
            try:
                self.process_marks()
                if now >= next_tick:
                    self.tick(now)
            except (StoreError, OSError) as exc:  # a full or locked spool: retry, keep going
                self.say_once(f"spool:{type(exc).__name__}", "%s: spool problem (will retry): %s",
                              self.settings.node, exc)
            if now >= next_tick:
                next_tick += self.settings.telemetry.interval_s
                if next_tick < now:  # fell behind (suspended, slow sensor): skip, don't burst
                    next_tick = now + self.settings.telemetry.interval_s
            self.maybe_flush(self.clock())
            wait = min(MARK_POLL_S, max(0.0, next_tick - self.clock()))
            self.stop_event.wait(wait)
        self.process_marks()
        self.maybe_flush(self.clock(), force=True)

    def stop(self) -> None:
        self.stop_event.set()

    def say_once(self, key: str, message: str, *args: Any) -> None:
        """Warn the first time a problem appears, not every tick."""
        if key not in self.said:
            self.said.add(key)
            log.warning(message, *args)

    # -------------------------------------------------------------- sampling

    def running(self) -> tuple[dict[int, str], set[str]]:
        """GPU index -> job id for GPUs held now, and every job running on this node."""
        assert self.spool is not None
        busy: dict[int, str] = {}
        jobs = tstore.open_jobs(self.spool, self.settings.cluster, self.settings.node)
        for job in jobs:
            for token in (job.get("gpu_indices") or "").split(","):
                if token.isdigit():
                    busy[int(token)] = job["job_id"]
        return busy, {j["job_id"] for j in jobs}

    def tick(self, now: float) -> None:
        assert self.spool is not None
        s = self.settings
        busy, jobs = self.running()
        reading = Reading()
        for sampler in self.active:
            try:
                reading.merge(sampler.sample(busy))
            except Exception as exc:
                reading.flags.append(f"{sampler.name}_failed")
                self.say_once(f"crash:{sampler.name}", "%s: sampler %s failed: %r",
                              s.node, sampler.name, exc)
        for flag in reading.flags:
            self.say_once(f"flag:{flag}", "%s: sensor problem: %s", s.node, flag)
        node_row = {"cluster": s.cluster, "node": s.node, "ts": now,
                    "job_ids": ",".join(sorted(jobs)) or None,
                    **{f: reading.node.get(f) for f in NODE_FIELDS},
                    "flags": ",".join(sorted(set(reading.flags))) or None}
        gpu_rows = []
        for index, fields in sorted(reading.gpus.items()):
            if fields.get("gpu_uuid"):
                self.uuids[index] = fields["gpu_uuid"]
            gpu_rows.append({"cluster": s.cluster, "node": s.node, "ts": now, "gpu_index": index,
                             "gpu_uuid": fields.get("gpu_uuid"), "job_id": busy.get(index),
                             **{f: fields.get(f) for f in GPU_FIELDS},
                             "source": fields.get("source") or "dcgm",
                             "flags": ",".join(fields.get("flags") or []) or None})
        tstore.insert_tick(self.spool, node_row, gpu_rows)
        events = self.hardware.events(reading, busy, now)
        if events:
            ledger.record_events(self.spool, events)
            for e in events:
                log.warning("%s: hardware event: %s", s.node, e.evidence[0])
            self.flush_due = self.drain_due = True
        if self.metrics is not None:
            self.metrics.update(gpu_rows, node_row)

    # -------------------------------------------------------------- marks

    def process_marks(self) -> int:
        """Turn waiting mark files into job rows; a mark is deleted only once recorded."""
        done = 0
        for path in markfiles.pending_marks(self.settings.marks_dir):
            try:
                mark = markfiles.read_mark(path)
            except (markfiles.BadMark, OSError) as exc:
                if markfiles.age(path, time.time()) < markfiles.GRACE_S:
                    continue  # possibly still being written by its hook
                self.say_once(f"badmark:{path.name}", "%s: bad mark %s set aside: %s",
                              self.settings.node, path.name, exc)
                try:
                    markfiles.set_aside(path)
                except OSError:
                    pass
                continue
            if mark.kind == "start":
                self.record_start(mark)
            else:
                self.record_end(mark)
            path.unlink(missing_ok=True)
            done += 1
        return done

    def _ask_slurm(self, job_id: str, node: str) -> tuple[int, ...] | None:
        try:
            return Slurm(timeout=self.settings.slurm_timeout_s).job_gpus_on_node(job_id, node)
        except AcmeError as exc:
            self.say_once(f"slurm:{type(exc).__name__}", "%s: cannot ask Slurm for GPU indices: %s",
                          self.settings.node, exc)
            return None

    def gpu_indices(self, mark: markfiles.Mark) -> tuple[int, ...] | None:
        indices = mark.gpu_indices
        if mark.gpu_uuids:
            by_uuid = {u: i for i, u in self.uuids.items()}
            indices = tuple(sorted({*(indices or ()), *(by_uuid[u] for u in mark.gpu_uuids
                                                          if u in by_uuid)}))
        if indices is None and self.has_gpus():
            indices = self.resolve_gpus(mark.job_id, mark.node)
        return indices

    def has_gpus(self) -> bool:
        return any(s.name in {"nvml", "synthetic"} for s in self.active)

    def record_start(self, mark: markfiles.Mark) -> None:
        assert self.spool is not None
        s = self.settings
        indices = self.gpu_indices(mark)
        tstore.record_start(self.spool, {
            "cluster": s.cluster, "job_id": mark.job_id, "node": s.node, "user": mark.user,
            "start_ts": mark.ts,
            "gpu_indices": ",".join(map(str, indices)) if indices is not None else None,
            "gpu_uuids": ",".join(self.uuids[i] for i in indices or () if i in self.uuids) or None,
            "flags": None if indices is not None or not self.has_gpus() else "gpus_unknown"})

    def record_end(self, mark: markfiles.Mark) -> None:
        assert self.spool is not None
        s = self.settings
        row = tstore.job_node(self.spool, s.cluster, mark.job_id, s.node)
        start = row["start_ts"] if row else None
        agg = tstore.node_share(self.spool, s.cluster, s.node, mark.job_id,
                                start if start is not None else mark.ts, mark.ts)
        share = node_share(agg, start=start, end=mark.ts, interval_s=s.telemetry.interval_s,
                           has_gpus=bool(row and row.get("gpu_indices")))
        earlier = (row or {}).get("flags") or ""
        share["flags"] = ",".join(f for f in (*earlier.split(","), *share["flags"].split(",")) if f)
        key = {"cluster": s.cluster, "job_id": mark.job_id, "node": s.node}
        extra = {} if row else {"user": mark.user}
        tstore.record_end(self.spool, key, mark.ts, mark.exit_code, {**share, **extra})
        self.flush_due = True

    # -------------------------------------------------------------- flushing

    def maybe_flush(self, now: float, *, force: bool = False) -> tstore.FlushResult | None:
        if not (force or self.flush_due or now >= self.next_flush):
            return None
        self.next_flush = now + self.settings.telemetry.flush_interval_s
        self.flush_due = False
        result = self.flush()
        if result is not None:
            keep = self.settings.telemetry.spool_keep_hours * 3600
            assert self.spool is not None
            tstore.prune_flushed(self.spool, now - keep)
        return result

    def retention(self, now: float) -> None:
        """After a flush, at most every ``PRUNE_EVERY_S``: one bounded step of
        raw-sample retention in the central store (a day partition dropped on
        Postgres, one batch per table on SQLite). Its failure costs a warning."""
        if now < self.next_prune or self.central is None:
            return
        self.next_prune = now + PRUNE_EVERY_S
        t = self.settings.telemetry
        try:
            tstore.prune_raw(self.central, now - t.raw_retention_days * 86400,
                             batch=t.prune_batch, max_batches=1)
        except AcmeError as exc:
            self.say_once("prune", "%s: raw-sample retention failed (will retry): %s", self.settings.node, exc)

    def apply_drain_policy(self) -> None:
        """Drain this node when its ledger calls for it: only a root-run collector
        (Slurm operator rights), only with the system config's ``nodes.drain`` on,
        and under the cluster-wide share cap. A refusal costs a warning."""
        policy = self.settings.nodes
        if not policy.drain or os.geteuid() != 0 or self.central is None:
            return
        from slurm_acme.nodes.reconcile import reconcile

        s = self.settings
        try:
            result = reconcile(self.central, Slurm(timeout=s.slurm_timeout_s), policy, s.cluster,
                               dry_run=False, only=[s.node])
        except AcmeError as exc:
            self.say_once("drain", "%s: cannot apply the drain policy: %s", s.node, exc)
            return
        for verdict in result.plan.held:
            log.warning("%s: not drained, the share cap (%d) is reached: %s", s.node, result.plan.cap,
                        verdict.reason(policy))
        for node, error in result.refused:
            log.warning("%s: Slurm refused to drain %s: %s", s.node, node, error)

    def flush(self) -> tstore.FlushResult | None:
        """Push the spool to the central store; None (and rows kept) when it is down."""
        assert self.spool is not None
        s = self.settings
        if not s.store_url:
            return None
        try:
            if self.central is None:
                self.central = self.open_central(s.store_url)
            result = tstore.flush(self.spool, self.central, batch=s.telemetry.flush_batch,
                                  min_coverage=s.telemetry.min_coverage)
        except (AcmeError, OSError) as exc:
            self.say_once("store-down", "%s: central store unavailable, spooling locally: %s",
                          s.node, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            if self.central is not None:
                self.central.dispose()
                self.central = None
            return None
        self.retention(self.clock())
        if self.drain_due:
            self.drain_due = False
            self.apply_drain_policy()
        # Hold no connection between flushes: hundreds of nodes must not pin
        # hundreds of idle Postgres backends (the engine reconnects on use).
        self.central.dispose()
        if "store-down" in self.said:
            self.said.discard("store-down")
            log.warning("%s: central store is back; flushed %s", s.node, result)
        return result
