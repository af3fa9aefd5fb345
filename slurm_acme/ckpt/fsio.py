"""Durable, checksummed file writes: the checkpointer's only door to the filesystem.

The manifest is written as a hidden temp file, fsynced, renamed into place and
its directory fsynced, so a reader sees either nothing or the whole file. DCP's
writer gets streams from :meth:`LocalFS.open_write` (fsynced on close) and
renames through :meth:`LocalFS.rename`. The low-level calls (`_write`, `_fsync`,
...) are methods so tests can fake the operating system (ENOSPC, EIO, a crash
mid-write) without faking the checkpointer. Torch-free.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import zlib
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from pathlib import Path

CHUNK_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Written:
    """Size and checksum of a file as it was written."""

    bytes: int
    checksum: str


def format_crc(crc: int) -> str:
    return f"crc32:{crc & 0xFFFFFFFF:08x}"


def _chunks_of(buf: bytes | bytearray | memoryview) -> Iterable[memoryview]:
    mv = memoryview(buf).cast("B")
    for start in range(0, len(mv), CHUNK_BYTES):
        yield mv[start:start + CHUNK_BYTES]


class LocalFS:
    """POSIX filesystem operations with the durability steps a checkpoint needs."""

    def _open(self, path: Path) -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def _write(self, fd: int, data: memoryview) -> int:
        return os.write(fd, data)

    def _fsync(self, fd: int) -> None:
        os.fsync(fd)

    def _rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def makedirs(self, path: Path) -> None:
        """Create `path` and make its entry durable in the parent directory."""
        existed = path.is_dir()
        path.mkdir(parents=True, exist_ok=True)
        if not existed:
            self.fsync_dir(path.parent)

    def write_atomic(self, path: Path, parts: Iterable[bytes | bytearray | memoryview]
                     ) -> Written:
        """Write the concatenation of `parts` to `path` atomically; return size and crc32."""
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        crc = 0
        total = 0
        fd = self._open(tmp)
        try:
            for part in parts:
                for chunk in _chunks_of(part):
                    crc = zlib.crc32(chunk, crc)
                    view = chunk
                    while len(view):
                        n = self._write(fd, view)
                        view = view[n:]
                    total += len(chunk)
            self._fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        try:
            self._rename(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.fsync_dir(path.parent)
        return Written(bytes=total, checksum=format_crc(crc))

    def rename(self, src: Path, dst: Path) -> None:
        """Rename `src` over `dst` and make the new name durable."""
        self._rename(src, dst)
        self.fsync_dir(dst.parent)

    @contextlib.contextmanager
    def open_write(self, path: Path) -> Generator[io.RawIOBase, None, None]:
        """A binary stream for a writer that wants a file object (DCP's): its writes go
        through `_write`, and closing it fsyncs it first (`_fsync`), unless it is closed
        because of an error."""
        stream = _Stream(self, self._open(path))
        try:
            yield stream
        except BaseException:
            stream.failed = True
            raise
        finally:
            stream.close()

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self.fsync_dir(path.parent)

    def remove_tree(self, path: Path, first: str | None = None) -> None:
        """Delete a directory; `first` (e.g. the manifest) goes first and durably, so a
        half-deleted checkpoint never looks committed."""
        if first is not None and (path / first).exists():
            self.remove(path / first)
        shutil.rmtree(path, ignore_errors=True)


def checksum_file(path: Path) -> Written:
    """Size and crc32 of a file as it is on disk now (re-read, for verification)."""
    crc = 0
    total = 0
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(CHUNK_BYTES)
        view = memoryview(buf)
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            crc = zlib.crc32(view[:n], crc)
            total += n
    return Written(bytes=total, checksum=format_crc(crc))


class _Stream(io.RawIOBase):
    """A write-only file over a descriptor whose writes go through a LocalFS."""

    def __init__(self, fs: LocalFS, fd: int) -> None:
        self._fs, self._fd = fs, fd
        self.failed = False

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def tell(self) -> int:
        return os.lseek(self._fd, 0, os.SEEK_CUR)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return os.lseek(self._fd, offset, whence)

    def write(self, data) -> int:  # type: ignore[no-untyped-def,override]
        view = memoryview(data).cast("B")
        total = len(view)
        while len(view):
            n = self._fs._write(self._fd, view[:CHUNK_BYTES])
            view = view[n:]
        return total

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self.failed:
                self._fs._fsync(self._fd)
        except BaseException:
            self.failed = True
            raise
        finally:
            os.close(self._fd)
            super().close()
