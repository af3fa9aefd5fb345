"""Read ahead: the next items of an iterator are made on a thread while the caller uses this one.

An import's two halves wait on different things: parsing and checking a chunk
runs mostly inside pyarrow and numpy, writing it mostly inside the database
driver, and both let go of the GIL there. On a login node's two cores each half
runs while the other does, instead of one after the other.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_ITEM, _END, _ERROR = range(3)
#: How often a blocked producer looks whether the consumer has gone.
_POLL_S = 0.05


class ReadAhead(Generic[T]):
    """Iterates ``items`` on a thread, ``depth`` items ahead of the consumer.

    An exception the iterator raises is raised again where the consumer reaches
    it. Leaving the ``with`` block early (an error, ``--strict``) stops the
    thread before the block's resources close, so nothing reads a closed file.
    """

    def __init__(self, items: Iterable[T], *, depth: int = 2, name: str = "acme-read-ahead"):
        self._queue: queue.Queue[tuple[int, object]] = queue.Queue(maxsize=depth)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(items,), name=name, daemon=True)

    def __enter__(self) -> ReadAhead[T]:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stopped.set()
        self._thread.join()

    def _put(self, kind: int, value: object) -> bool:
        while not self._stopped.is_set():
            try:
                self._queue.put((kind, value), timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self, items: Iterable[T]) -> None:
        try:
            for item in items:
                if not self._put(_ITEM, item):
                    return
        except BaseException as exc:  # handed to the consumer, which raises it
            self._put(_ERROR, exc)
            return
        self._put(_END, None)

    def __iter__(self) -> Iterator[T]:
        while True:
            kind, value = self._queue.get()
            if kind == _END:
                return
            if kind == _ERROR:
                assert isinstance(value, BaseException)
                raise value
            yield value  # type: ignore[misc]


def in_background(work: Callable[[], R], *, name: str = "acme-background") -> Future[R]:
    """Run ``work`` on its own thread now; its result (or exception) is the future's."""
    future: Future[R] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # the caller's result() raises it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
