"""The background writer outlives the time-limit signal Slurm sends to every process of a step."""

from __future__ import annotations

import os
import signal
import time

from slurm_acme.ckpt.persist import ProcessPersister


def test_writer_process_ignores_usr2_from_its_first_instant() -> None:
    persister = ProcessPersister()
    try:
        child = persister._child()
        # Sent at once, while the child may still be importing: before the fix
        # this raced the child's own handler and killed it with -SIGUSR2.
        os.kill(child.pid, signal.SIGUSR2)
        time.sleep(0.5)
        assert child.poll() is None
        with open(f"/proc/{child.pid}/status") as fh:
            ignored = int(next(line for line in fh if line.startswith("SigIgn:")).split()[1], 16)
        assert ignored & (1 << (signal.SIGUSR2 - 1))
    finally:
        persister.close()
