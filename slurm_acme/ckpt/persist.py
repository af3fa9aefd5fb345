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

    def close(self) -> None:
        pass


class ProcessPersister:
    """Delegates each write to `python -m slurm_acme.ckpt.persist_worker` (JSON lines)."""

    name = "process"
    shared_arena = True

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _child(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "slurm_acme.ckpt.persist_worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        return self._proc

    def persist(self, path: Path, header: bytes, arena: HostArena) -> Written:
        if arena.shm_name is None and arena.size:
            raise PersistError("process persister needs a shared-memory arena")
        request = {"path": str(path), "header": base64.b64encode(header).decode(),
                   "shm": arena.shm_name, "size": arena.size}
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
        reply = json.loads(line)
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
