"""Reading a user-named text file without trusting what it is: `/dev/zero`, a FIFO that never ends, a binary file,
a JSON text nested 100,000 deep.

A config, prompt, result or state file is read in blocks: a NUL byte (never in UTF-8 text) or more than `max_bytes`
stops the read at once, and a FIFO, device or socket is refused before the first read (unless the caller says it
may be one), so a wrong path costs a clear one-line error instead of all the memory there is, or a hang. `loads` is
`json.loads` with the nesting capped, so a hostile file is a JSONDecodeError (one line naming the place), never a
RecursionError.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

BLOCK = 1 << 20
MAX_DEPTH = 64          # specmon's own files nest 4 deep, peer tools' reports about 8


class NotTextError(ValueError):
    """The file is not a text file of acceptable size; the message says why, and (where known) on which line."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


def read_capped(path: str | os.PathLike[str], max_bytes: int, special: bool = False) -> bytes:
    """The file's bytes; NotTextError past max_bytes, at a NUL byte, or (unless `special`) when it is a FIFO,
    a device or a socket. OSError as open/read raise it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)   # a FIFO without a writer must not block the open
    with open(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not special and not stat.S_ISREG(mode):
            raise NotTextError(f"{_kind(mode)}, not a regular file (refused: it may never end)")
        os.set_blocking(fd, True)
        parts: list[bytes] = []
        size = 0
        newlines = 0
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


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(text)`; JSONDecodeError (at the bracket too many) when arrays and objects nest deeper than
    `max_depth`, checked by a linear scan before the recursive parser runs."""
    s = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
    if s.count("[") + s.count("{") > max_depth:
        at = too_deep_at(s, max_depth)
        if at >= 0:
            raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", s, at)
    return json.loads(s)


def too_deep_at(text: str, max_depth: int = MAX_DEPTH) -> int:
    """Where (an index into `text`) brackets outside strings first nest deeper than `max_depth`; -1 if never."""
    depth = 0
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                return i
        elif ch in "]}":
            depth -= 1
    return -1


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "a directory" if stat.S_ISDIR(mode) else "not a regular file"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"
