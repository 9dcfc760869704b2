"""Following a log that grows, and the one rule for when it must be read again from its start.

`restart_reason` is that rule, for the run tailer (specmon.sources.tailer, on any host) and the local follower
alike: a different file at the name (a relaunch, log rotation: a new file under the same name), a file shorter
than what was read (truncated), or the last bytes read changed in place (truncated and refilled past the old
offset, so the size never looked smaller).

`LocalFollower` follows one local file by its name, as `tail -F` does (`specmon logscan --follow`). Deleted or
renamed away: what the old file still held is read, then it says so and waits for the name to come back. A
different file at the name: the old one is read to its end, then the new one from its start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO

CHUNK_BYTES = 1 << 20
TAIL_CHECK_BYTES = 64   # the last bytes read, compared in place to notice a file rewritten under the reader

REPLACED = "replaced by a new file; reading it from the start"
TRUNCATED = "truncated, reading it again from the start"
REWRITTEN = "rewritten in place, reading it again from the start"


def restart_reason(known: object | None, offset: int, identity: object, size: int, same_tail: bool = True) -> str | None:
    """Why a followed log must be read again from its start (REPLACED, TRUNCATED, REWRITTEN), or None to go on.

    `known` is the identity (inode) of the file read so far (None: not known yet), `offset` how far it was read;
    `identity` and `size` are the file now at the name; `same_tail` whether the bytes before `offset` are still
    the last ones read."""
    if known is not None and identity != known:
        return REPLACED
    if size < offset:
        return TRUNCATED
    if not same_tail:
        return REWRITTEN
    return None


def read_chunk(handle: IO[bytes]) -> bytes:
    """Up to CHUNK_BYTES: whatever a pipe has now (read1), or the next piece of a file."""
    read1 = getattr(handle, "read1", None)
    return read1(CHUNK_BYTES) if read1 is not None and not handle.seekable() else handle.read(CHUNK_BYTES)


@dataclass(frozen=True)
class FollowNote:
    """What a reader must be told about the followed file. With `restart`, the bytes after it are the file from
    its start (a reader's parse state starts over)."""

    text: str
    restart: bool = False


class LocalFollower:
    """One local file followed by its name; `read()` gives what arrived since the last call."""

    def __init__(self, path: str, handle: IO[bytes]) -> None:
        self.path = path
        self.handle = handle
        self.offset = 0
        self.identity = _identity_of(handle)   # (device, inode) of the open file
        self.tail = b""      # the last bytes read
        self.gone = False    # the name points at nothing (deleted or renamed away): waiting for it to come back

    def read(self) -> list[bytes | FollowNote]:
        """The pieces in order: data of the file being read, and notes (a `restart` note: what follows is the new
        or rewritten file from its start). Empty when nothing arrived. OSError when reading fails."""
        pieces: list[bytes | FollowNote] = []
        self._check_name(pieces)
        if self.gone:
            return pieces
        data = read_chunk(self.handle)
        if data and not self._check_rewritten(pieces):   # rewritten between the check and the read: `data` is
            self._took(data)                              # the new file's middle, left for the read from its start
            pieces.append(data)
        return pieces

    def close(self) -> None:
        self.handle.close()

    def _check_name(self, pieces: list[bytes | FollowNote]) -> None:
        try:
            st = os.stat(self.path)
        except OSError:
            if not self.gone:
                self._drain(pieces)
                self.gone = True
                pieces.append(FollowNote("deleted or renamed; waiting for it to appear again"))
            return
        if restart_reason(self.identity, 0, (st.st_dev, st.st_ino), 0) is not None:
            try:
                handle = open(self.path, "rb")  # noqa: SIM115 - kept; closed on the next switch or by close()
            except OSError:
                return   # appeared but not readable yet (being created): try again on the next read
            if not self.gone:
                self._drain(pieces)
            pieces.append(FollowNote("appeared again; reading it from the start" if self.gone else REPLACED, True))
            self.handle.close()
            self._restart(handle)
            return
        self._check_rewritten(pieces)

    def _check_rewritten(self, pieces: list[bytes | FollowNote]) -> bool:
        """Same file, but shorter than what was read or its last-read bytes changed: say so and start again from
        the top. True if it did."""
        try:
            fd = self.handle.fileno()
            size = os.fstat(fd).st_size
            same_tail = not self.tail or os.pread(fd, len(self.tail), self.offset - len(self.tail)) == self.tail
        except OSError:
            return False
        why = restart_reason(None, self.offset, None, size, same_tail)
        if why is None:
            return False
        pieces.append(FollowNote(why, True))
        self.handle.seek(0)
        self._restart(self.handle)
        return True

    def _took(self, data: bytes) -> None:
        self.offset += len(data)
        self.tail = (self.tail + data[-TAIL_CHECK_BYTES:])[-TAIL_CHECK_BYTES:]

    def _restart(self, handle: IO[bytes]) -> None:
        self.handle, self.offset, self.tail, self.gone = handle, 0, b"", False
        self.identity = _identity_of(handle)

    def _drain(self, pieces: list[bytes | FollowNote]) -> None:
        """What is left in the open file (the writer may have added to it before it was renamed or deleted)."""
        try:
            while data := read_chunk(self.handle):
                self._took(data)
                pieces.append(data)
        except OSError:
            pass


def _identity_of(handle: IO[bytes]) -> tuple[int, int] | None:
    try:
        st = os.fstat(handle.fileno())
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino
