"""Transport.look: the local transport answers in-process (a followed log is looked at every quiet second and
before every chunk; a fork and a shell for each was most of the idle TUI's CPU with eight runs), and it must say
exactly what the shell command every other transport runs says, for every kind of file a tailer meets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specmon.sources.local import LocalTransport
from specmon.sources.transport import Transport


def _files(tmp_path: Path) -> dict[str, str]:
    log = tmp_path / "server.log"
    log.write_bytes(b"line one\nline two\n\xff\xfe binary tail")
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return {"log": str(log), "empty": str(empty), "fifo": str(fifo), "missing": str(tmp_path / "gone.log"),
            "dir": str(tmp_path)}


@pytest.mark.slow
@pytest.mark.parametrize("start,length", [(0, 64), (5, 9), (18, 64), (30, 64), (200, 64), (0, 0)])
async def test_local_look_says_what_the_shell_command_says(tmp_path: Path, start: int, length: int) -> None:
    local = LocalTransport()
    for name, path in _files(tmp_path).items():
        mine = await local.look(path, start, length)
        shell = await Transport.look(local, path, start, length)   # the default: one shell command
        assert mine == shell, name


async def test_a_look_gives_inode_size_and_the_bytes_asked_for(tmp_path: Path) -> None:
    files = _files(tmp_path)
    looked = await LocalTransport().look(files["log"], 9, 8)
    assert looked is not None
    assert (looked.inode, looked.size, looked.data) == (os.stat(files["log"]).st_ino, 32, b"line two")
    fifo = await LocalTransport().look(files["fifo"], 0, 8)
    assert fifo is not None and fifo.data is None   # never read: a FIFO would hang the reader
    assert await LocalTransport().look(files["missing"], 0, 8) is None
