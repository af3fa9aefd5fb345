"""Background persisters: write one snapshot (header + arena bytes) durably and verify it.

Two interchangeable backends, chosen by measurement (see bench/ckpt.py):

* ``thread``: the checkpointer's worker thread writes the arena itself. The hot
  loops (``os.write`` of 64 MiB chunks, ``zlib.crc32``) release the GIL, so the
  training thread keeps running, and the arena can be pinned CUDA host memory.
* ``process``: a long-lived, torch-free child process writes from an arena in
  POSIX shared memory; the worker thread only waits on a pipe.

Both re-read the file after fsync and compare its checksum with the one computed
while writing; only then is the shard reported as written.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Protocol

from slurm_acme.ckpt.arena import HostArena
from slurm_acme.ckpt.fsio import LocalFS, Written, checksum_file


class PersistError(OSError):
    """A shard could not be written or did not verify; carries errno when known."""


class Persister(Protocol):
    name: str

    def persist(self, path: Path, header: bytes, arena: HostArena) -> Written: ...

    def attach(self, arena: HostArena) -> None: ...

    def close(self) -> None: ...


def verify_written(path: Path, written: Written) -> Written:
    on_disk = checksum_file(path)
    if on_disk != written:
        raise PersistError(f"{path} did not verify after write: on disk {on_disk.bytes} bytes "
                           f"{on_disk.checksum}, written {written.bytes} bytes {written.checksum}")
    return written


class ThreadPersister:
    name = "thread"
    shared_arena = False

    def __init__(self, fs: LocalFS | None = None) -> None:
        self.fs = fs or LocalFS()

    def persist(self, path: Path, header: bytes, arena: HostArena) -> Written:
        return verify_written(path, self.fs.write_atomic(path, [header, arena.data()]))

    def attach(self, arena: HostArena) -> None:
        pass

    def close(self) -> None:
        pass



def _ignore_time_limit_signal() -> None:
    """Runs in the forked writer before exec: SIG_IGN survives exec, so the
    time-limit USR2 that slurmstepd sends to every process of the step can
    never kill the writer, not even while it starts up."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)

class ProcessPersister:
    """Delegates each write to `python -m slurm_acme.ckpt.persist_worker` (JSON lines).

    The arena's shared-memory name is unlinked as soon as the child has mapped it, so
    nothing is left in /dev/shm when Slurm SIGKILLs the whole process tree (the
    multiprocessing resource tracker dies with it and cannot clean up).
    """

    name = "process"
    shared_arena = True

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._mapped: str | None = None  # the arena segment the current child has mapped

    def _child(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._mapped = None
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "slurm_acme.ckpt.persist_worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                preexec_fn=_ignore_time_limit_signal)
        return self._proc

    def _call(self, request: dict) -> dict:
        with self._lock:
            proc = self._child()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except OSError as exc:
                raise PersistError(f"persist worker died: {exc}") from exc
        if not line:
            raise PersistError(f"persist worker exited with {proc.wait()}")
        return json.loads(line)

    def attach(self, arena: HostArena) -> None:
        """Have the child map a (new) arena, then remove its name from /dev/shm."""
        if arena.shm_name is None or arena.shm_name == self._mapped:
            return
        reply = self._call({"op": "attach", "shm": arena.shm_name})
        if not reply["ok"]:
            raise PersistError(reply.get("errno") or 0, reply["error"])
        self._mapped = arena.shm_name
        arena.unlink_name()

    def persist(self, path: Path, header: bytes, arena: HostArena) -> Written:
        if arena.shm_name is None and arena.size:
            raise PersistError("process persister needs a shared-memory arena")
        if arena.size and self._child() is not None and self._mapped != arena.shm_name:
            if arena.name_unlinked:  # a restarted child cannot map it: re-allocate next save
                arena.invalidate()
                raise PersistError("persist worker restarted and lost the arena mapping; "
                                   "the next save allocates a new one")
            self.attach(arena)
        reply = self._call({"op": "persist", "path": str(path),
                            "header": base64.b64encode(header).decode(), "size": arena.size})
        if not reply["ok"]:
            raise PersistError(reply.get("errno") or 0, reply["error"])
        return Written(bytes=reply["bytes"], checksum=reply["checksum"])

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        self._mapped = None


#: Measured (bench/ckpt.py, persist_interference): a training-like loop slows down less
#: while a child process persists than while a thread in the training process does.
DEFAULT_PERSIST = "process"


def make_persister(kind: str, fs: LocalFS | None = None) -> Persister:
    """`auto` is the measured default (process), or thread when a custom `fs` is given."""
    if kind == "auto":
        kind = "thread" if fs is not None else DEFAULT_PERSIST
    if kind == "thread":
        return ThreadPersister(fs)
    if kind == "process":
        if fs is not None:
            raise ValueError("a custom filesystem is only supported with persist='thread'")
        return ProcessPersister()
    raise ValueError(f"persist={kind!r}; expected 'auto', 'thread' or 'process'")
