"""Reading input files safely and writing private ones: the one bounded reader every JSON and text input goes
through, and the one writer of files that hold command lines or environments.

    read_text(path)    the file's text; refuses a file over `max_bytes`, a FIFO, a device or a socket (unless
                       `special=True`), with one `InputError` line naming the file
    read_json(path)    the same, parsed; nesting deeper than `MAX_DEPTH` is refused before the parser recurses
    parse_json(text)   a JSON text from anywhere (a remote file, a server's answer), with the same depth cap
    write_private(p)   a file only its owner may read (0600), written whole: experiment state, reports
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from specmon.errors import UserError

MAX_BYTES = 64 * 1024 * 1024      # no JSON or text input specmon reads is near this; /dev/zero would never end
MAX_DEPTH = 64                    # specmon's own files nest 4 deep; Python's parser recurses per level


class InputError(UserError, ValueError):
    """An input file or text refused before or while it was parsed (too big, too deep, not a regular file).

    A ValueError too, so code that already turns a malformed file into one line catches it."""


def _depth_over(text: str | bytes, limit: int) -> bool:
    """Whether brackets nest deeper than `limit` outside strings (a linear scan, no recursion)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    depth = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:          # backslash
                escaped = True
            elif byte == 0x22:          # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):      # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):      # ] }
            depth -= 1
    return False


def parse_json(text: str | bytes, where: str, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(text)` with nesting capped; InputError naming `where` when too deep (ValueError as json's own
    errors are when malformed)."""
    if _depth_over(text, max_depth):
        raise InputError(f"{where}: JSON nested deeper than {max_depth} levels (refused)")
    return json.loads(text)


def read_bytes(path: str | os.PathLike[str], max_bytes: int = MAX_BYTES, special: bool = False) -> bytes:
    """The file's bytes, at most `max_bytes`; InputError naming the file if it is larger, or a FIFO, device or
    socket (those may never end or never answer) unless `special`. OSError as open/read raise it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not special and not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
            raise InputError(f"{path}: {kind}, not a regular file (refused)")
        os.set_blocking(fd, True)
        chunks = []
        size = 0
        while chunk := os.read(fd, min(1 << 20, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise InputError(f"{path}: larger than {max_bytes // (1024 * 1024)} MiB (refused)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], max_bytes: int = MAX_BYTES, special: bool = False) -> str:
    """The file's UTF-8 text (undecodable bytes replaced), bounded as `read_bytes`."""
    return read_bytes(path, max_bytes, special).decode("utf-8", errors="replace")


def read_json(path: str | os.PathLike[str], max_bytes: int = MAX_BYTES) -> Any:
    """The file's JSON value, bounded in size and depth (InputError naming the file; ValueError if malformed)."""
    return parse_json(read_bytes(path, max_bytes), str(path))


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only (0600, an existing file too): it holds command lines or
    environments."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", encoding="utf-8") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)
