"""Reading a user-named text file without trusting what it is: `/dev/zero`, a FIFO that never ends, a binary file.

A config or prompt file is read in blocks: a NUL byte (never in UTF-8 text) or more than `max_bytes` stops the read
at once, so a wrong path costs a clear one-line error instead of all the memory there is.
"""

from __future__ import annotations

from pathlib import Path

BLOCK = 1 << 20


class NotTextError(ValueError):
    """The file is not a text file of acceptable size; the message says why, and (where known) on which line."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


def read_capped(path: Path, max_bytes: int) -> bytes:
    """The file's bytes; NotTextError past max_bytes or at a NUL byte. OSError as open/read raise it."""
    parts: list[bytes] = []
    size = 0
    newlines = 0
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            nul = block.find(b"\0")
            if nul >= 0:
                line = newlines + block.count(b"\n", 0, nul) + 1
                raise NotTextError(f"a NUL byte at offset {size + nul}: not a text file", line)
            size += len(block)
            if size > max_bytes:
                raise NotTextError(f"larger than {_size(max_bytes)}: not a text file of this kind")
            newlines += block.count(b"\n")
            parts.append(block)
    return b"".join(parts)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"
