"""The checkpoint-now signal: USR2, sent before the time limit (Slurm's ``--signal``,
forwarded by the supervisor) or by an operator.

A training script calls :func:`install_checkpoint_signal` once and reads
``request.requested`` once a step; on a distributed job the ranks must agree on
the step, so OR the flag across ranks (``LossSpikeGuard.check(..., flags=(
request.requested,))`` does it in the collective it already runs), then
``AsyncCheckpointer.save_and_requeue``. Torch-free.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

CHECKPOINT_SIGNAL = signal.SIGUSR2


class CheckpointRequest:
    """Set when the checkpoint-now signal has arrived; safe to read from any thread."""

    def __init__(self) -> None:
        self._flag = threading.Event()

    @property
    def requested(self) -> int:
        """1 once the signal has arrived (an int, ready for a collective), else 0."""
        return int(self._flag.is_set())

    def set(self) -> None:
        self._flag.set()

    def clear(self) -> None:
        self._flag.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._flag.set()


def install_checkpoint_signal(request: CheckpointRequest | None = None) -> CheckpointRequest:
    """Install the USR2 handler that sets `request` (a new one by default) and return it.

    Must be called from the main thread (Python delivers signals only there). The
    handler only sets a flag: the training loop decides when it is safe to save.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("install_checkpoint_signal() must be called from the main thread")
    request = request or CheckpointRequest()
    signal.signal(CHECKPOINT_SIGNAL, request._handle)
    return request
