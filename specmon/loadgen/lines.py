"""Appending whole JSON lines to result files, all or nothing: the load generator's request records and the
sweep runner's result lines (a finished level, redacted) go through here, so a kill or a full disk leaves a
file that ends at its last whole line.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from specmon.model.text.secrets import redact


def append_line(path: str | os.PathLike[str], obj: Mapping[str, Any], secrets: Iterable[str] = ()) -> None:
    """Append one redacted JSON line and fsync it, so a finished level survives a crash right after.

    All or nothing (see append_whole): a failed write leaves the file ending at its last whole line.
    """
    line = (json.dumps(redact(obj, secrets), separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        append_whole(fd, line, sync=True)
    finally:
        os.close(fd)


def append_whole(fd: int, data: bytes, sync: bool = False) -> None:
    """Append `data` (whole lines) to the file open as `fd` with O_APPEND, all or nothing.

    When a write (or the fsync asked for with `sync`) fails, as on a full disk or past a file size limit, the file
    is cut back to the size it had, so it still ends at its last whole line; the OSError is raised.
    """
    size = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise
