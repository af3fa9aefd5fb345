"""install_checkpoint_signal: the USR2 handler a training script no longer writes itself."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from slurm_acme.ckpt.signals import install_checkpoint_signal


@pytest.fixture
def restore_usr2():  # type: ignore[no-untyped-def]
    previous = signal.getsignal(signal.SIGUSR2)
    yield
    signal.signal(signal.SIGUSR2, previous)


def test_usr2_sets_the_request_and_nothing_else(restore_usr2: None) -> None:
    request = install_checkpoint_signal()
    assert request.requested == 0
    os.kill(os.getpid(), signal.SIGUSR2)  # the process lives on: the handler only flags
    assert request.requested == 1
    request.clear()
    assert request.requested == 0


def test_it_refuses_to_install_from_another_thread(restore_usr2: None) -> None:
    errors: list[Exception] = []

    def install() -> None:
        try:
            install_checkpoint_signal()
        except RuntimeError as exc:
            errors.append(exc)

    t = threading.Thread(target=install)
    t.start()
    t.join()
    assert errors and "main thread" in str(errors[0])
