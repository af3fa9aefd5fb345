"""LogCompressor: noise filters, template folding, bounded memory."""

from __future__ import annotations

from slurm_acme.diagnose.compressor import LogCompressor, template_of


def feed(compressor: LogCompressor, lines: list[str]) -> None:
    for line in lines:
        compressor.add(line)


def test_lines_differing_in_numbers_fold_into_first_and_last_with_count():
    c = LogCompressor()
    feed(c, [f"saving checkpoint at iteration {i} took {i * 1.5:.1f}s" for i in range(1, 101)])
    assert c.lines() == [
        "saving checkpoint at iteration 1 took 1.5s",
        "saving checkpoint at iteration 100 took 150.0s  [x100]",
    ]


def test_progress_bars_and_step_logs_are_dropped_and_counted():
    c = LogCompressor()
    feed(c, [
        " 14%|█▍        | 381/2724 [14:04:45<85:52:52, 131.96s/it]",
        " iteration     5426/  250000 | consumed samples: 43408 | lm loss: 2.3E+00 | learning rate: 2.999E-04 |",
        "epoch: 3 step: 100 loss: 0.2075416080653667",
        "RuntimeError: boom",
    ])
    assert c.lines() == ["RuntimeError: boom", "[3 noise lines (progress, per-step logs) dropped]"]
    assert c.stats.noise_lines == 3


def test_ranks_hosts_hex_and_timestamps_are_masked():
    a = template_of("node12:4242:4300 [3] 2024-05-01 10:00:01,123 comm 0x7fe222fa3193 rank 3 from 10.0.0.12<5000>")
    b = template_of("gpu7:1:2 [0] 2023-01-09 23:59:59,999 comm 0x1 rank 0 from 192.168.1.1<1>")
    assert a == b
    assert "<HEX>" in a and "<TS>" in a and "<IP>" in a and "<HOST>" in a


def test_interleaved_ranks_share_templates():
    c = LogCompressor()
    feed(c, [f"{rank}: [rank{rank}]: waiting for barrier" for rank in range(8)] * 3)
    assert len(c.lines()) == 2 and c.lines()[1].endswith("[x24]")


def test_compressed_log_keeps_arrival_order():
    c = LogCompressor()
    feed(c, ["a 1", "b", "a 2", "c", "a 3"])
    assert c.lines() == ["a 1", "b", "c", "a 3  [x3]"]


def test_ratio_is_lines_in_per_line_out():
    c = LogCompressor()
    feed(c, [f"heartbeat {i}" for i in range(1000)])
    assert c.ratio == 500.0


def test_template_table_is_bounded():
    c = LogCompressor(max_templates=50)
    feed(c, [f"unique message {chr(65 + i % 26)}{chr(65 + i // 26 % 26)}{chr(65 + i // 676)}" for i in range(2000)])
    assert c.stats.templates <= 50 or len(c.entries()) <= 100
    assert c.stats.overflow_lines == 1950
    assert c.lines()[-1] == "[1950 lines of further templates dropped]"


def test_invalid_utf8_and_nul_bytes_do_not_break_it():
    from collections import Counter

    from slurm_acme.diagnose.lines import DIGITS_TO_ZERO

    c = LogCompressor()
    raw = [b"\xff\xfe bad \x00 bytes 12", b"\xc3\x28 more"]
    keys = [r.translate(DIGITS_TO_ZERO) for r in raw]
    c.add_batch(raw, keys, Counter(keys), 0)
    assert c.lines()[0] == "\ufffd\ufffd bad  bytes 12"
