"""Child process of the ``process`` persister: torch-free, reads JSON lines on stdin.

Each request names a shared-memory arena, a header and a target path; the reply
is one JSON line with the written size and checksum, or the error.
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


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:  # type: ignore[no-untyped-def]
    fs = LocalFS()
    shm: shared_memory.SharedMemory | None = None
    for line in stdin:
        req = json.loads(line)
        try:
            if req["shm"] is not None and (shm is None or shm.name != req["shm"].lstrip("/")):
                if shm is not None:
                    shm.close()
                shm = _attach(req["shm"])
            data = shm.buf[:req["size"]] if (shm is not None and req["size"]) else b""
            path = Path(req["path"])
            written = fs.write_atomic(path, [base64.b64decode(req["header"]), data])
            del data
            on_disk = checksum_file(path)
            if on_disk != written:
                raise OSError(f"{path} did not verify after write: {on_disk} != {written}")
            reply = {"ok": True, "bytes": written.bytes, "checksum": written.checksum}
        except OSError as exc:
            reply = {"ok": False, "errno": exc.errno, "error": str(exc)}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()
    if shm is not None:
        shm.close()


if __name__ == "__main__":
    serve()
