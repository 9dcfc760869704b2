"""LocalTransport and LogTailer against real /bin/sh processes and real files."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import pytest

from specmon.sources.local import LocalTransport
from specmon.sources.tailer import LogTailer, TailBatch, last_lines, read_range
from specmon.sources.transport import TransportError


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_run_returns_code_stdout_stderr_and_takes_input() -> None:
    t = LocalTransport()
    r = await t.run("printf 'a b'; printf oops >&2; exit 3")
    assert (r.exit_code, r.stdout, r.err) == (3, b"a b", "oops")
    r = await t.run("tr a-z A-Z", input=b"hello \xc3\xa9")
    assert r.ok and r.out == "HELLO \xc3\xa9".encode("latin-1").decode("utf-8")


async def test_run_timeout_ends_the_command(tmp_path: Path) -> None:
    t = LocalTransport()
    pidfile = tmp_path / "pid"
    with pytest.raises(TimeoutError):
        await t.run(f"sleep 30 & echo $! > {pidfile}; wait", timeout=0.5)
    pid = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not _alive(pid), "the timed-out command's child kept running"


async def test_write_file_and_unwritable_path(tmp_path: Path) -> None:
    t = LocalTransport()
    target = tmp_path / "x" / "launch.sh"
    target.parent.mkdir()
    await t.write_file(str(target), b"echo hi\n", 0o700)
    assert target.read_bytes() == b"echo hi\n" and (target.stat().st_mode & 0o777) == 0o700
    (tmp_path / "file").write_text("")
    with pytest.raises(TransportError, match="cannot write"):
        await t.write_file(str(tmp_path / "file" / "sub"), b"x")


async def test_stream_yields_output_and_close_ends_the_command(tmp_path: Path) -> None:
    t = LocalTransport()
    async with t.stream("printf 'one\\n'; sleep 0.1; printf 'two\\n'; exit 4") as out:
        data = b"".join([chunk async for chunk in out])
    assert data == b"one\ntwo\n" and out.exit_code == 4
    pidfile = tmp_path / "pid"
    async with t.stream(f"echo $$ > {pidfile}; exec sleep 30") as out:
        for _ in range(100):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await asyncio.sleep(0.02)
    pid = int(pidfile.read_text())
    await asyncio.sleep(0.1)
    assert not _alive(pid)


async def _collect(tailer: LogTailer, until: int, timeout: float = 10.0) -> list[TailBatch]:
    """Batches from follow() until `tailer.offset` reaches `until`."""
    batches: list[TailBatch] = []

    async def go() -> None:
        async with contextlib.aclosing(tailer.follow()) as follow:
            async for batch in follow:
                batches.append(batch)
                if tailer.offset >= until:
                    return

    await asyncio.wait_for(go(), timeout)
    return batches


async def test_tailer_emits_only_complete_lines_and_resumes_without_loss_or_repeat(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    t = LocalTransport()
    # A writer that splits a multi-byte character and lines across writes, slowly.
    lines = [f"line {i} \u00e9\u4e2d".encode() + b"\n" for i in range(40)]
    blob = b"".join(lines)
    pieces = [blob[i:i + 7] for i in range(0, len(blob), 7)]

    async def writer() -> None:
        with open(log, "ab", buffering=0) as fh:
            for piece in pieces:
                fh.write(piece)
                await asyncio.sleep(0.002)

    tailer = LogTailer(t, str(log))
    half = len(b"".join(lines[:20]))
    wtask = asyncio.create_task(writer())
    first = await _collect(tailer, half)
    saved = tailer.offset
    got = b"".join(b.data for b in first)
    assert got.endswith(b"\n") and got == blob[:saved]
    # A new follower from the saved offset (as a later specmon process would) gets exactly the rest.
    await wtask
    second = await _collect(LogTailer(t, str(log), saved, tailer.inode), len(blob))
    assert got + b"".join(b.data for b in second) == blob
    for b in first + second:
        b.data.decode("utf-8")   # never a split character (raises if one were cut)


async def test_tailer_drain_includes_an_unterminated_last_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"a\nb\nlast words")
    tailer = LogTailer(LocalTransport(), str(log), offset=2)
    batch = await tailer.drain()
    assert batch.data == b"b\nlast words\n" and tailer.offset == log.stat().st_size


async def test_tailer_notes_a_replaced_log_and_a_skipped_backlog(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"old line\n" * 3)
    t = LocalTransport()
    tailer = LogTailer(t, str(log))
    await _collect(tailer, log.stat().st_size)
    inode = tailer.inode
    replacement = tmp_path / "new.log"
    replacement.write_bytes(b"new\n")
    os.replace(replacement, log)
    resumed = LogTailer(t, str(log), tailer.offset, inode)
    batches = await _collect(resumed, 4)
    assert "replaced" in (batches[0].note or "") and b"".join(b.data for b in batches) == b"new\n"

    log.write_bytes(b"".join(f"{i:05d}\n".encode() for i in range(2000)))   # 12000 bytes
    big = LogTailer(t, str(log), max_backlog=600)
    batches = await _collect(big, 12000)
    assert "skipped" in (batches[0].note or "")
    data = b"".join(b.data for b in batches)
    assert data.startswith(b"01900\n") and data.endswith(b"01999\n")   # starts on a whole line


async def test_read_range_and_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"l1\nl2\nl3\npartial")
    t = LocalTransport()
    assert await read_range(t, str(log), 3, 9) == b"l2\nl3\n"
    text, follow_from = await last_lines(t, str(log), 2)
    assert text == b"l2\nl3\n" and follow_from == 9


async def test_tail_follow_latency_is_small(tmp_path: Path) -> None:
    """A line appended to the log reaches the follower quickly (ready detection depends on it)."""
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    tailer = LogTailer(LocalTransport(), str(log))
    got: list[float] = []

    async def follow() -> None:
        async with contextlib.aclosing(tailer.follow()) as batches:
            async for batch in batches:
                if batch.data:
                    got.append(time.monotonic())
                    return

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.5)
    t0 = time.monotonic()
    with open(log, "ab") as fh:
        fh.write(b"ready\n")
    await asyncio.wait_for(task, 5)
    assert got[0] - t0 < 1.5   # generous guard on a loaded box; typically a few ms (inotify)
