"""Is this a text log at all? Checked before any rule runs.

Rules match words; random bytes contain every short word sooner or later, so a
binary file given to ``sacme diagnose`` used to come out as a CUDA error with
"exclude node". Only the start of the file is looked at (logs are text from
their first line): known binary formats by their magic bytes, then the share of
bytes no log would hold (NUL, other control characters, invalid UTF-8).
"""

from __future__ import annotations

#: Bytes of the file's start that decide.
SAMPLE_BYTES = 64 << 10
#: Share of suspicious characters above which a sample is not text.
MAX_BAD_SHARE = 0.10
#: Control characters a terminal log does carry (tab, newline, CR, BS, FF, BEL, ESC).
_ALLOWED_CONTROLS = frozenset("\t\n\r\b\f\a\x1b")
_MAGIC = ((b"\x1f\x8b", "gzip-compressed"), (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
          (b"BZh", "bzip2-compressed"), (b"\xfd7zXZ\x00", "xz-compressed"), (b"PK\x03\x04", "a zip archive"),
          (b"\x7fELF", "an ELF binary"), (b"\xff\xfe", "UTF-16 text"), (b"\xfe\xff", "UTF-16 text"),
          (b"\x89PNG", "a PNG image"), (b"%PDF", "a PDF"))


def text_problem(sample: bytes) -> str | None:
    """Why ``sample`` (the start of a file) is not a text log, or None if it is."""
    for magic, what in _MAGIC:
        if sample.startswith(magic):
            return what
    if not sample:
        return None
    text = sample.decode("utf-8", errors="replace")
    if len(sample) >= SAMPLE_BYTES:  # a character cut at the sample's end is not the file's fault
        text = text[:-3]
    if not text:
        return None
    bad = sum(1 for ch in text if ch == "\ufffd" or (ch < " " and ch not in _ALLOWED_CONTROLS) or ch == "\x7f")
    if bad / len(text) > MAX_BAD_SHARE:
        return f"binary data ({bad * 100 // len(text)}% of its first {len(sample)} bytes are not text)"
    return None
