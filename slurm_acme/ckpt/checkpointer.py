"""AsyncCheckpointer: snapshot to host memory, persist as DCP in the background, commit a manifest.

The paper's recipe (s6.1): the training loop stalls only for a copy of its
state into host memory (:mod:`arena`); a background thread writes the copy as a
standard ``torch.distributed.checkpoint`` directory (:mod:`dcp_io`), checksums
each file, and only then is the checkpoint committed: ``manifest.json``, written
atomically by rank 0 after every rank's files are on disk (:mod:`manifest`).
``resume()`` walks committed checkpoints newest first and loads the first one
that verifies.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from torch.distributed.checkpoint.api import CheckpointException

from slurm_acme import exitcodes
from slurm_acme.ckpt import collective, dcp_io
from slurm_acme.ckpt.arena import HostArena
from slurm_acme.ckpt.fsio import LocalFS
from slurm_acme.ckpt.legacy import load_legacy
from slurm_acme.ckpt.manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardRecord,
    read_manifest,
    step_dir_name,
    step_dirs,
    step_of,
)
from slurm_acme.ckpt.retention import prune
from slurm_acme.ckpt.shardfile import CorruptShard
from slurm_acme.ckpt.snapshot import DictShapes, Staged, stage
from slurm_acme.contracts import (
    ENV_CKPT_ASYNC,
    ENV_CKPT_DIR,
    ENV_CKPT_INTERVAL,
    ENV_CKPT_KEEP,
    ENV_RESUME_FROM,
    MetricEvent,
)

log = logging.getLogger(__name__)

POLICIES = ("wait", "skip")
#: The on-disk format: standard DCP. ("acme", the former native format, is still read.)
FORMATS = ("dcp",)
EventSink = Callable[..., None]


class CheckpointMismatch(ValueError):
    """A checkpoint exists but cannot be loaded into this job (its template or world size)."""


@dataclass(frozen=True)
class SaveReport:
    """What ``save()`` did: ``started`` a persist, or ``skipped`` because one was in flight.

    `stall_s` is how long the training thread was blocked (the copy into host memory,
    plus `waited_s` for a previous persist under policy ``wait``); `bytes` is the size
    of the host copy.
    """

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
    """A loaded checkpoint: its step and directory, the job's state and this rank's own.

    `rank_state` is what this rank passed as ``save(..., rank_state=)``, or None when
    the checkpoint has none for this rank (it was written at a smaller world size).
    """

    step: int
    path: str
    state: Any
    rank_state: Any = None


def _noop(event: str, step: int, **fields: Any) -> None:
    pass


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def describe(exc: BaseException) -> str:
    """One line per failing rank, without DCP's tracebacks."""
    if isinstance(exc, CheckpointException):
        return "; ".join(f"rank {r}: {type(e).__name__}: {e}"
                         for r, (e, _) in sorted(exc.failures.items()))
    return f"{type(exc).__name__}: {exc}"


class AsyncCheckpointer:
    """Asynchronous, verified checkpoints of a (possibly distributed) training state,
    written as standard ``torch.distributed.checkpoint`` directories.

    Usage::

        ckpt = AsyncCheckpointer()                       # $ACME_CKPT_DIR, keep $ACME_CKPT_KEEP
        resumed = ckpt.resume()                          # None when there is nothing yet
        ...
        if ckpt.due(step):                               # every $ACME_CKPT_INTERVAL steps
            ckpt.save(step, {"model": model.state_dict(), "optim": opt.state_dict()},
                      rank_state={"rng": torch.get_rng_state()})
        ckpt.close()                                     # waits for the last persist

    Each step directory ``<ckpt_dir>/step_NNNNNNNN`` is a DCP checkpoint that
    ``torch.distributed.checkpoint.load`` reads without slurm-acme. Replicated values
    (DDP) are written once; DTensor shards (FSDP2, TP) by their owners, and DCP
    reshards them at load.

    Args:
        ckpt_dir: where step directories go (default ``$ACME_CKPT_DIR``; all ranks must
            see the same directory).
        keep: committed checkpoints to keep; older ones are deleted after each commit
            (default ``$ACME_CKPT_KEEP``, else 3).
        interval: steps between checkpoints, for :meth:`due` (default
            ``$ACME_CKPT_INTERVAL``, else 100).
        policy: what ``save`` does while the previous save is still persisting:
            ``wait`` for it (the wait counts as stall) or ``skip`` this one (all ranks
            skip together).
        format: the on-disk format; ``"dcp"`` is the only one written. Checkpoints of
            the earlier native ``"acme"`` format are still read by :meth:`resume`.
        fs: the filesystem door (tests pass one that injects ENOSPC, EIO, crashes).
        on_event: ``on_event(event, step, **fields)`` for ``checkpoint``,
            ``checkpoint_error``, ``checkpoint_skipped``, ``checkpoint_waited`` and
            ``checkpoint_corrupt``; persist outcomes arrive from the background thread.
            Pass ``MetricsWriter.write`` to put them in the supervisor's metrics file.
        commit_timeout_s: how long a rank waits for the others to finish their files.
        copy_threads: threads for the host copy (default: up to 4 of this process's CPUs).
        pin_memory: page-lock the host copy (default: when CUDA is available).
        background: persist in the background (default ``$ACME_CKPT_ASYNC`` != "0", i.e.
            train.yaml's ``checkpoint.async``); False makes ``save`` wait for the commit.
    """

    def __init__(self, ckpt_dir: str | os.PathLike | None = None, *, keep: int | None = None,
                 interval: int | None = None, policy: str = "wait", format: str = "dcp",
                 fs: LocalFS | None = None, on_event: EventSink | None = None,
                 commit_timeout_s: float = 300.0, copy_threads: int | None = None,
                 pin_memory: bool | None = None, background: bool | None = None) -> None:
        if ckpt_dir is None:
            ckpt_dir = os.environ.get(ENV_CKPT_DIR, "")
            if not ckpt_dir:
                raise ValueError(f"no checkpoint directory: pass ckpt_dir or set {ENV_CKPT_DIR}")
        keep = _env_int(ENV_CKPT_KEEP, 3) if keep is None else keep
        interval = _env_int(ENV_CKPT_INTERVAL, 100) if interval is None else interval
        if background is None:
            background = os.environ.get(ENV_CKPT_ASYNC, "1").strip() != "0"
        if policy not in POLICIES:
            raise ValueError(f"policy={policy!r}; expected one of {POLICIES}")
        if format not in FORMATS:
            raise ValueError(f"format={format!r}; expected one of {FORMATS} (checkpoints of "
                             "the former 'acme' format are still read by resume())")
        if keep < 1:
            raise ValueError(f"keep={keep}: must keep at least 1 checkpoint")
        if interval < 1:
            raise ValueError(f"interval={interval}: must be at least 1 step")
        self.ckpt_dir = Path(ckpt_dir)
        self.keep, self.interval, self.policy, self.format = keep, interval, policy, format
        self.background = background
        self.fs = fs or LocalFS()
        self.arena = HostArena(pin=pin_memory, threads=copy_threads)
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
        """Whether a persist is still running in the background."""
        return self._inflight is not None and self._inflight.is_alive()

    def due(self, step: int) -> bool:
        """Whether `step` is a checkpoint step (a multiple of `interval`)."""
        return step % self.interval == 0

    def save(self, step: int, state: Mapping[str, Any], rank_state: Any = None) -> SaveReport:
        """Copy `state` into host memory and persist it in the background; returns after
        the copy. Every rank calls it with the same step.

        `state` is the job's state as DCP saves it: a dict of state dicts, tensors,
        DTensors and plain values (modules and optimizers may be passed as they are;
        their ``state_dict()`` is taken). A value that several ranks hold under the same
        key is written once, so per-rank values (RNG state, data position) go in
        `rank_state`, saved under ``rank_state.<rank>``.
        """
        t0 = time.perf_counter()
        busy = self.busy
        if self.policy == "skip" and self.world_size > 1:
            busy = bool(collective.all_reduce_max([int(busy)])[0])  # all ranks skip together
        waited = 0.0
        if busy and self.policy == "skip":
            log.warning("checkpoint step %d skipped: a save is still in flight", step)
            self.on_event(MetricEvent.CHECKPOINT_SKIPPED, step)
            return SaveReport(step, "skipped", 0.0, time.perf_counter() - t0, 0)
        if busy:
            self.wait()
            waited = time.perf_counter() - t0
            log.warning("checkpoint step %d waited %.3fs for the previous save", step, waited)
            self.on_event(MetricEvent.CHECKPOINT_WAITED, step, waited_s=round(waited, 4))
        else:
            self.wait()  # reap a finished thread
        staged = stage(dcp_io.with_rank_state(dict(state), self.rank, rank_state), self.arena)
        self._inflight = threading.Thread(target=self._persist, args=(step, staged),
                                          name=f"acme-ckpt-{step}", daemon=True)
        self._inflight.start()
        if not self.background:
            self.wait()  # train.yaml's checkpoint.async: false; the persist counts as stall
        return SaveReport(step, "started", waited, time.perf_counter() - t0, staged.nbytes)

    def save_and_requeue(self, step: int, state: Mapping[str, Any], rank_state: Any = None
                         ) -> NoReturn:
        """The answer to the checkpoint-now signal: save `step`, wait until it is committed,
        report a ``requeue`` event and exit ``TRAIN_CHECKPOINTED_REQUEUE`` (76), which the
        supervisor requeues without counting a restart."""
        report = self.save(step, state, rank_state)
        result = self.wait()
        self.close()
        ok = result is not None and result.committed
        log.warning("checkpoint-now signal: step %d %s; exiting for a requeue", step,
                    "committed" if ok else "NOT committed")
        self.on_event(MetricEvent.REQUEUE, step, checkpointed=ok, stall_s=round(report.stall_s, 4))
        raise SystemExit(exitcodes.TRAIN_CHECKPOINTED_REQUEUE)

    def prepare(self, state: Mapping[str, Any], rank_state: Any = None) -> None:
        """Allocate the host memory for `state` now (e.g. before the training loop), so
        the first save's stall is only the copy, not faulting in a fresh buffer."""
        self.wait()
        stage(dcp_io.with_rank_state(dict(state), self.rank, rank_state), self.arena)

    def wait(self) -> PersistResult | None:
        """Block until the in-flight persist (if any) has finished; return its result."""
        thread, self._inflight = self._inflight, None
        if thread is None:
            return None
        thread.join()
        return self.results[-1] if self.results else None

    def close(self) -> None:
        """Wait for the last persist and free the host memory."""
        self.wait()
        self.arena.release()

    def _persist(self, step: int, staged: Staged) -> None:
        """Worker-thread entry: a bug inside still leaves a failed result for `wait()`."""
        t0 = time.perf_counter()
        try:
            self._persist_and_commit(step, staged, t0)
        except BaseException as exc:
            self.results.append(PersistResult(step, False, False, time.perf_counter() - t0, 0,
                                              f"persist worker crashed: {exc!r}"))
            raise

    def _persist_and_commit(self, step: int, staged: Staged, t0: float) -> None:
        step_path = self.ckpt_dir / step_dir_name(step)
        records: list[ShardRecord] = []
        error: str | None = None
        try:
            if self.rank == 0 and (step_path / MANIFEST_NAME).exists():
                self.fs.remove(step_path / MANIFEST_NAME)  # re-saving a step: uncommit first
            records = dcp_io.save(step_path, staged.state, rank=self.rank,
                                  world_size=self.world_size, group=self._group, fs=self.fs)
        except (OSError, RuntimeError, ValueError, CheckpointException) as exc:
            error = f"rank {self.rank}: {describe(exc)}"
        mine = (records, staged.shapes.as_json()) if error is None else error
        gathered = self._gather(mine)
        committed = False
        if gathered is None:
            error = error or "commit barrier failed: another rank did not finish its files"
        elif self.rank == 0:
            failures = [g for g in gathered if isinstance(g, str)]
            if failures:
                error = error or "; ".join(failures)
            else:
                try:
                    self._commit(step, step_path, gathered)
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
            self.on_event(MetricEvent.CHECKPOINT_ERROR, step, error=error)
        elif committed:
            self.on_event(MetricEvent.CHECKPOINT, step, path=str(step_path), bytes=total,
                          persist_s=round(result.persist_s, 4))

    def _gather(self, mine: Any) -> list | None:
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

    def _commit(self, step: int, step_path: Path, gathered: list) -> None:
        records = [r for recs, _ in gathered for r in recs]
        shapes = DictShapes()
        for _, rank_shapes in gathered:
            shapes.merge(DictShapes.from_json(rank_shapes))
        listed = {r.file for r in records}
        for stray in step_path.iterdir():  # left by an earlier attempt at this step
            if stray.is_file() and stray.name not in listed and stray.name != MANIFEST_NAME:
                self.fs.remove(stray)
        manifest = Manifest(step=step, format=self.format, world_size=self.world_size,
                            created_ts=time.time(), shards=tuple(records),
                            extra={"dicts": shapes.as_json()})
        self.fs.write_atomic(step_path / MANIFEST_NAME, [manifest.to_json().encode()])
        prune(self.ckpt_dir, self.keep, self.fs)

    # ---- resuming -----------------------------------------------------------------------

    def resume(self, resume_from: str | None = None, max_step: int | None = None, *,
               into: dict | None = None) -> Resumed | None:
        """Load the newest committed checkpoint that verifies (all ranks agree on which).

        `resume_from` (default: ``$ACME_RESUME_FROM``, which the supervisor sets) names
        a step directory to try first; if it is partial or corrupt, older checkpoints
        are tried, never newer ones. `max_step` ignores newer checkpoints. Returns None
        when there is nothing to resume from.

        Without `into`, the state is rebuilt from the checkpoint (tensors on the CPU,
        the saved structure and key types), at any world size. With `into` (a dict
        shaped like the saved state, e.g. ``{"model": model.state_dict()}``), tensors
        are loaded in place, as ``dcp.load`` does; this is how DTensor (FSDP2) state is
        resharded to the current job. Raises CheckpointMismatch when `into` does not
        fit the checkpoint.
        """
        self.wait()
        if resume_from is None:
            resume_from = os.environ.get(ENV_RESUME_FROM, "")
        for path in self._candidates(resume_from, max_step):
            manifest = read_manifest(path)
            ok, loaded = 0, None
            if manifest is None:
                self._corrupt(path, "no manifest (partial save)")
            else:
                try:
                    loaded = self._load(path, manifest, into)
                    ok = 1
                except (CorruptShard, OSError) as exc:
                    self._corrupt(path, str(exc))
            if collective.all_reduce_min([ok])[0]:
                return Resumed(manifest.step, str(path), *loaded)  # type: ignore[union-attr,misc]
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
        self.on_event(MetricEvent.CHECKPOINT_CORRUPT, step_of(path) or -1, path=str(path),
                      reason=reason)

    def _load(self, path: Path, manifest: Manifest, into: dict | None) -> tuple[Any, Any]:
        if manifest.version == 1:
            if manifest.world_size != self.world_size:
                raise CheckpointMismatch(
                    f"checkpoint {path} (format {manifest.format!r} of an earlier slurm-acme) "
                    f"was written by {manifest.world_size} ranks; this job has "
                    f"{self.world_size}")
            return load_legacy(path, manifest, self.rank), None
        try:
            return dcp_io.load(path, manifest.shards, self.rank, into,
                               DictShapes.from_json(manifest.extra.get("dicts")))
        except CorruptShard:
            raise
        except (Exception, CheckpointException) as exc:
            raise CheckpointMismatch(f"checkpoint {path} does not fit: {describe(exc)}"
                                     ) from None
