"""Child process of the ``process`` persister: torch-free, reads JSON lines on stdin.

Requests: ``{"op": "attach", "shm": NAME}`` maps the arena (the parent then
unlinks its name), ``{"op": "persist", "path", "header", "size"}`` writes header +
arena bytes durably and verifies them. Each reply is one JSON line.
"""

from __future__ import annotations

import base64
import json
import sys
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

from slurm_acme.ckpt.fsio import LocalFS, checksum_file


def _attach(name: str) -> shared_memory.SharedMemory:
    shm = shared_memory.SharedMemory(name=name)
    # The parent owns the segment; without this the tracker would unlink it when we exit.
    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    return shm


def _persist(fs: LocalFS, shm: shared_memory.SharedMemory | None, req: dict) -> dict:
    if req["size"] and shm is None:
        raise OSError("no arena attached")
    data = shm.buf[:req["size"]] if (shm is not None and req["size"]) else b""
    path = Path(req["path"])
    try:
        written = fs.write_atomic(path, [base64.b64decode(req["header"]), data])
    finally:
        del data
    on_disk = checksum_file(path)
    if on_disk != written:
        raise OSError(f"{path} did not verify after write: {on_disk} != {written}")
    return {"ok": True, "bytes": written.bytes, "checksum": written.checksum}


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:  # type: ignore[no-untyped-def]
    fs = LocalFS()
    shm: shared_memory.SharedMemory | None = None
    for line in stdin:
        req = json.loads(line)
        try:
            if req["op"] == "attach":
                if shm is not None:
                    try:
                        shm.close()
                    except BufferError:  # a view is still alive; the mapping goes at exit
                        pass
                shm = None
                shm = _attach(req["shm"])
                reply = {"ok": True}
            else:
                reply = _persist(fs, shm, req)
        except OSError as exc:
            reply = {"ok": False, "errno": exc.errno, "error": str(exc)}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()
    if shm is not None:
        shm.close()


def _ignore_job_signals() -> None:
    """The time-limit signal is for the trainer, not for its writer.

    slurmstepd delivers ``--signal`` (USR2 here) to every process of the step;
    this child must live on to finish the checkpoint the trainer then asks for.
    """
    import signal

    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


if __name__ == "__main__":
    _ignore_job_signals()
    serve()
