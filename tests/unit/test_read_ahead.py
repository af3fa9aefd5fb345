"""ReadAhead: an import's reading half on its own thread. Items arrive in order,
an error arrives where it happened, and leaving early stops the thread."""

from __future__ import annotations

import threading
import time

import pytest

from slurm_acme.ingest.read_ahead import ReadAhead, in_background


def test_items_arrive_in_order_and_all_of_them():
    with ReadAhead(range(1000), depth=3) as items:
        assert list(items) == list(range(1000))


def test_the_iterator_runs_on_another_thread():
    def where():
        for _ in range(3):
            yield threading.current_thread().name

    with ReadAhead(where(), name="acme-test-read") as items:
        assert set(items) == {"acme-test-read"}


def test_an_error_is_raised_after_the_items_before_it():
    def failing():
        yield 1
        yield 2
        raise ValueError("line 3: bad")

    seen = []
    with pytest.raises(ValueError, match="line 3: bad"), ReadAhead(failing()) as items:
        for item in items:
            seen.append(item)
    assert seen == [1, 2]


def test_leaving_early_stops_the_thread_before_the_block_ends():
    made = []

    def endless():
        n = 0
        while True:
            made.append(n)
            yield n
            n += 1

    reader = ReadAhead(endless(), depth=2)
    with pytest.raises(RuntimeError), reader as items:
        for item in items:
            if item == 5:
                raise RuntimeError("--strict")
    assert not reader._thread.is_alive()
    count = len(made)
    time.sleep(0.2)
    assert len(made) == count  # nothing more is read once the block is left
    assert count <= 5 + 1 + 2 + 1  # at most depth items (and the one being put) ahead


def test_in_background_returns_the_result_or_raises_the_error():
    assert in_background(lambda: 6 * 7).result(timeout=5) == 42

    def boom():
        raise KeyError("rollups")

    with pytest.raises(KeyError, match="rollups"):
        in_background(boom).result(timeout=5)
