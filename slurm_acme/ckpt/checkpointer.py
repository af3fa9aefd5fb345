"""AsyncCheckpointer: snapshot to host memory, persist in the background, commit a manifest.

The paper's recipe (s6.1): the training loop stalls only for a copy of its
state into host buffers; a background worker writes the copy durably, verifies
it, and only then is the checkpoint committed (a manifest written atomically
by rank 0 after every rank's shard is on disk). ``resume()`` walks committed
checkpoints newest first and loads the first one that verifies.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_acme.ckpt import collective
from slurm_acme.ckpt.arena import HostArena, shm_free_bytes
from slurm_acme.ckpt.fsio import LocalFS
from slurm_acme.ckpt.manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardRecord,
    read_manifest,
    step_dir_name,
    step_dirs,
    step_of,
)
from slurm_acme.ckpt.persist import PersistError, make_persister
from slurm_acme.ckpt.retention import prune
from slurm_acme.ckpt.shardfile import CorruptShard, encode_header, read_shard
from slurm_acme.ckpt.tree import flatten, unflatten

log = logging.getLogger(__name__)

POLICIES = ("wait", "skip")
FORMATS = ("acme", "dcp")
EventSink = Callable[..., None]


class CheckpointMismatch(ValueError):
    """A checkpoint exists but cannot be loaded by this job (e.g. another world size)."""


@dataclass(frozen=True)
class SaveReport:
    """What ``save()`` did: started a persist, or skipped because one was in flight."""

    step: int
    action: str
    waited_s: float
    stall_s: float
    bytes: int


@dataclass(frozen=True)
class PersistResult:
    """The outcome of one background persist, as this rank saw it."""

    step: int
    ok: bool
    committed: bool
    persist_s: float
    bytes: int
    error: str | None


@dataclass(frozen=True)
class Resumed:
    step: int
    path: str
    state: Any


def shard_name(rank: int) -> str:
    return f"rank{rank:05d}.acme"


def _noop(event: str, step: int, **fields: Any) -> None:
    pass


class AsyncCheckpointer:
    """Asynchronous, atomic, verified checkpoints of a (possibly distributed) training state.

    `state` passed to :meth:`save` is any tree of dicts/lists/tuples of tensors, numpy
    arrays and plain values; :meth:`resume` returns the same tree (tensors on CPU).
    `on_event(event, step, **fields)` is called for checkpoint, checkpoint_error,
    checkpoint_skipped, checkpoint_waited and checkpoint_corrupt (from the worker
    thread for persist outcomes).
    """

    def __init__(self, ckpt_dir: str | os.PathLike, *, keep: int = 3, policy: str = "wait",
                 format: str = "acme", persist: str = "auto", fs: LocalFS | None = None,
                 on_event: EventSink | None = None, commit_timeout_s: float = 300.0) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy={policy!r}; expected one of {POLICIES}")
        if format not in FORMATS:
            raise ValueError(f"format={format!r}; expected one of {FORMATS}")
        if keep < 1:
            raise ValueError(f"keep={keep}: must keep at least 1 checkpoint")
        self.ckpt_dir = Path(ckpt_dir)
        self.keep = keep
        self.policy = policy
        self.format = format
        self.fs = fs or LocalFS()
        self.persister = make_persister(persist, fs)
        self.arena = HostArena(shared=getattr(self.persister, "shared_arena", False))
        self.on_event = on_event or _noop
        if collective.is_distributed():
            import torch.distributed as dist

            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        else:
            self.rank, self.world_size = 0, 1
        self._group = collective.new_side_group(commit_timeout_s)
        self._inflight: threading.Thread | None = None
        self.results: list[PersistResult] = []
        if self.rank == 0:
            self.fs.makedirs(self.ckpt_dir)

    # ---- saving -------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._inflight is not None and self._inflight.is_alive()

    def save(self, step: int, state: Any) -> SaveReport:
        """Snapshot `state` and persist it in the background; returns after the copy."""
        t0 = time.perf_counter()
        busy = self.busy
        if self.policy == "skip" and self.world_size > 1:
            busy = bool(collective.all_reduce_max([int(busy)])[0])  # all ranks skip together
        waited = 0.0
        if busy and self.policy == "skip":
            log.warning("checkpoint step %d skipped: a save is still in flight", step)
            self.on_event("checkpoint_skipped", step)
            return SaveReport(step, "skipped", 0.0, time.perf_counter() - t0, 0)
        if busy:
            self.wait()
            waited = time.perf_counter() - t0
            log.warning("checkpoint step %d waited %.3fs for the previous save", step, waited)
            self.on_event("checkpoint_waited", step, waited_s=round(waited, 4))
        else:
            self.wait()  # reap a finished thread
        skeleton, tensors = flatten(state)
        self._ensure_shm_room(tensors)
        slots = self.arena.snapshot(tensors)
        self.persister.attach(self.arena)
        header = encode_header(skeleton, [s.as_json() for s in slots], self.arena.size)
        self._inflight = threading.Thread(target=self._persist, args=(step, header),
                                          name=f"acme-ckpt-{step}", daemon=True)
        self._inflight.start()
        return SaveReport(step, "started", waited, time.perf_counter() - t0,
                          len(header) + self.arena.size)

    def prepare(self, state: Any) -> None:
        """Allocate the host arena for `state` now (e.g. before the training loop), so
        the first save's stall is only the copy, not page-faulting a fresh buffer."""
        self.wait()
        _, tensors = flatten(state)
        self._ensure_shm_room(tensors)
        self.arena.reserve(tensors)
        self.persister.attach(self.arena)

    def _ensure_shm_room(self, tensors: list) -> None:
        """A process persister needs the arena in /dev/shm; if that tmpfs is too small
        (containers often give it 64 MB), persist from a thread instead of crashing."""
        need = self.arena.needs_bytes(tensors)
        if not self.arena.shared or not need:
            return
        free = shm_free_bytes() + self.arena.size
        if free >= need * 1.05:
            return
        log.warning("/dev/shm has %d bytes free, the checkpoint arena needs %d: persisting "
                    "from a thread instead of a process", free, need)
        self.persister.close()
        self.arena.release()
        self.persister = make_persister("thread", self.fs)
        self.arena = HostArena(shared=False)

    def wait(self) -> PersistResult | None:
        """Block until the in-flight persist (if any) has finished; return its result."""
        thread, self._inflight = self._inflight, None
        if thread is None:
            return None
        thread.join()
        return self.results[-1] if self.results else None

    def close(self) -> None:
        self.wait()
        self.persister.close()
        self.arena.release()

    def _persist(self, step: int, header: bytes) -> None:
        """Worker-thread entry: a bug inside still leaves a failed result for `wait()`."""
        t0 = time.perf_counter()
        try:
            self._persist_and_commit(step, header, t0)
        except BaseException as exc:
            self.results.append(PersistResult(step, False, False, time.perf_counter() - t0, 0,
                                              f"persist worker crashed: {exc!r}"))
            raise

    def _persist_and_commit(self, step: int, header: bytes, t0: float) -> None:
        step_path = self.ckpt_dir / step_dir_name(step)
        records: list[ShardRecord] = []
        error: str | None = None
        try:
            if self.rank == 0 and (step_path / MANIFEST_NAME).exists():
                self.fs.remove(step_path / MANIFEST_NAME)  # re-saving a step: uncommit first
            self.fs.makedirs(step_path)
            if self.format == "acme":
                written = self.persister.persist(step_path / shard_name(self.rank), header,
                                                 self.arena)
                records = [ShardRecord(self.rank, shard_name(self.rank), written.bytes,
                                       written.checksum)]
            else:
                from slurm_acme.ckpt.dcp_format import save_dcp

                records = save_dcp(step_path, header, self.arena, self.rank, self.world_size,
                                   self._group)
        except (OSError, PersistError, RuntimeError, ValueError) as exc:
            error = f"rank {self.rank}: {type(exc).__name__}: {exc}"
        gathered = self._gather(records if error is None else error)
        committed = False
        if gathered is None:
            error = error or "commit barrier failed: another rank did not finish its shard"
        elif self.rank == 0:
            failures = [g for g in gathered if isinstance(g, str)]
            if failures:
                error = error or "; ".join(failures)
            else:
                try:
                    self._commit(step, step_path, [r for g in gathered for r in g])
                    committed = True
                except OSError as exc:
                    error = f"manifest commit failed: {exc}"
        if gathered is not None and self.world_size > 1:
            committed, error = self._share_outcome(committed, error)
        total = sum(r.bytes for r in records)
        result = PersistResult(step, error is None, committed, time.perf_counter() - t0, total,
                               error)
        self.results.append(result)
        if error is not None:
            log.error("checkpoint step %d failed: %s", step, error)
            self.on_event("checkpoint_error", step, error=error)
        elif committed:
            self.on_event("checkpoint", step, path=str(step_path), bytes=total,
                          persist_s=round(result.persist_s, 4))

    def _gather(self, mine: list[ShardRecord] | str) -> list | None:
        if self.world_size == 1:
            return [mine]
        import torch.distributed as dist

        out: list = [None] * self.world_size
        try:
            dist.all_gather_object(out, mine, group=self._group)
        except RuntimeError as exc:
            log.error("checkpoint commit barrier failed: %s", exc)
            return None
        return out

    def _share_outcome(self, committed: bool, error: str | None) -> tuple[bool, str | None]:
        """Rank 0 tells every rank whether it committed, so `wait()` on any rank returns
        only after the manifest is (or is known not to be) on disk."""
        import torch.distributed as dist

        box = [(committed, error)]
        try:
            dist.broadcast_object_list(box, src=0, group=self._group)
        except RuntimeError as exc:
            return False, error or f"commit outcome not received from rank 0: {exc}"
        return box[0][0], error or box[0][1]

    def _commit(self, step: int, step_path: Path, records: list[ShardRecord]) -> None:
        manifest = Manifest(step=step, format=self.format, world_size=self.world_size,
                            created_ts=time.time(), shards=tuple(records))
        self.fs.write_atomic(step_path / MANIFEST_NAME, [manifest.to_json().encode()])
        prune(self.ckpt_dir, self.keep, self.fs)

    # ---- resuming -----------------------------------------------------------------------

    def resume(self, resume_from: str | None = None, max_step: int | None = None
               ) -> Resumed | None:
        """Load the newest committed checkpoint that verifies (all ranks agree on which).

        `resume_from` (default: env ACME_RESUME_FROM) names a step directory to try
        first; if it is partial or corrupt, older checkpoints are tried. Returns None
        when there is nothing to resume from.
        """
        self.wait()
        if resume_from is None:
            resume_from = os.environ.get("ACME_RESUME_FROM", "")
        for path in self._candidates(resume_from, max_step):
            manifest = read_manifest(path)
            ok, state = 0, None
            if manifest is None:
                self._corrupt(path, "no manifest (partial save)")
            elif manifest.world_size != self.world_size:
                raise CheckpointMismatch(
                    f"checkpoint {path} was written by {manifest.world_size} ranks; this job "
                    f"has {self.world_size}")
            else:
                try:
                    state = self._load(path, manifest)
                    ok = 1
                except (CorruptShard, OSError, ValueError, KeyError) as exc:
                    self._corrupt(path, str(exc))
            if collective.all_reduce_min([ok])[0]:
                return Resumed(step=manifest.step, path=str(path), state=state)  # type: ignore[union-attr]
        return None

    def _candidates(self, resume_from: str, max_step: int | None) -> list[Path]:
        found = [p for s, p in reversed(step_dirs(self.ckpt_dir))
                 if max_step is None or s <= max_step]
        if not resume_from:
            return found
        first = Path(resume_from)
        if not first.is_absolute() and not first.exists():
            first = self.ckpt_dir / first
        manifest = read_manifest(first)
        limit = manifest.step if manifest is not None else step_of(first)
        rest = [p for p in found if p.resolve() != first.resolve()
                and (limit is None or (step_of(p) or 0) < limit)]
        return [first, *rest]

    def _corrupt(self, path: Path, reason: str) -> None:
        log.warning("skipping checkpoint %s: %s", path, reason)
        self.on_event("checkpoint_corrupt", step_of(path) or -1, path=str(path), reason=reason)

    def _load(self, path: Path, manifest: Manifest) -> Any:
        if manifest.format == "dcp":
            from slurm_acme.ckpt.dcp_format import load_dcp

            skeleton, tensors = load_dcp(path, manifest, self.rank)
            return unflatten(skeleton, tensors)
        mine = [s for s in manifest.shards if s.rank == self.rank]
        if len(mine) != 1:
            raise CorruptShard(f"{path}: manifest has no shard for rank {self.rank}")
        shard = read_shard(path / mine[0].file, mine[0].bytes, mine[0].checksum)
        return unflatten(shard.skeleton, shard.tensors)
