"""Files of any size and content stream in bounded memory."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from slurm_acme.diagnose.api import diagnose_file, scan_file
from slurm_acme.diagnose.reader import MAX_LINE_BYTES, iter_batches
from slurm_acme.errors import InputError


def test_missing_file_is_a_one_line_input_error(tmp_path):
    with pytest.raises(InputError, match=r"nope\.log: log file not found"):
        scan_file(str(tmp_path / "nope.log"))


def test_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        scan_file(str(tmp_path))


def test_empty_file_is_unknown(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    verdict, diagnoser = diagnose_file(str(path), cases=[])
    assert verdict.is_unknown and diagnoser.lines_seen == 0


def test_binary_file_streams_without_error(tmp_path):
    path = tmp_path / "core.bin"
    path.write_bytes(os.urandom(3 << 20))
    verdict, diagnoser = diagnose_file(str(path), cases=[])
    assert diagnoser.lines_seen > 0
    assert verdict.category in {"unknown"} or verdict.source == "rule"


def test_a_line_without_end_is_cut_not_buffered_whole(tmp_path):
    path = tmp_path / "oneline.log"
    path.write_bytes(b"x" * (5 * MAX_LINE_BYTES))
    with path.open("rb") as handle:
        sizes = [len(line) for lines, _ in iter_batches(handle, chunk_bytes=MAX_LINE_BYTES) for line in lines]
    assert max(sizes) <= MAX_LINE_BYTES


def test_crlf_and_final_line_without_newline(tmp_path):
    path = tmp_path / "win.log"
    path.write_bytes(b"a\r\nb\r\nKeyError: 'k'")
    verdict, diagnoser = diagnose_file(str(path))
    assert diagnoser.lines_seen == 3 and verdict.category == "KeyError"


def test_memory_stays_bounded_on_a_big_log(tmp_path):
    path = tmp_path / "big.log"
    with path.open("w") as out:
        for i in range(150_000):
            out.write(f"{i % 8}: [rank{i % 8}]: step {i} loss {i * 0.001:.3f} tokens/s {i * 7} id {i:x}{i % 13}\n")
        out.write("3: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    assert path.stat().st_size > 8 << 20  # every line a new key: the worst case for caches
    tracemalloc.start()
    verdict, _ = diagnose_file(str(path), cases=[])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert verdict.category == "ECCError"
    assert peak < 40 << 20  # the per-chunk working set; it does not grow with the file
