"""A polled log (the way logs are followed over SSH) that stays quiet is looked at less and less often, and comes
back to its fast pace at its first new bytes: issue 37, the idle cost of a fleet's ready runs whose logs say
nothing. Real /bin/sh commands read a real file (LocalTransport, made to poll as SSHTransport does)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from specmon.model.logs.signals import watch_reads_only
from specmon.sources.local import LocalTransport
from specmon.sources.tailer import LogTailer
from specmon.sources.transport import FileLook

pytestmark = pytest.mark.slow

FAST_S = 0.1
QUIET_S = 1.6


class CountedPolling(LocalTransport):
    """A local transport that follows logs by polling, and counts its looks."""

    polls_logs = True

    def __init__(self) -> None:
        super().__init__()
        self.looks: list[float] = []

    async def look(self, path: str, start: int, length: int) -> FileLook | None:
        self.looks.append(time.monotonic())
        return await super().look(path, start, length)


async def _until(got: list[bytes], text: bytes, within_s: float) -> float:
    started = time.monotonic()
    while not b"".join(got).endswith(text):
        assert time.monotonic() - started < within_s, f"{text!r} not read within {within_s} s: {got}"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def _looks_in(transport: CountedPolling, seconds: float) -> int:
    since = len(transport.looks)
    await asyncio.sleep(seconds)
    return len(transport.looks) - since


async def _back_to_fast_pace(transport: CountedPolling, got: list[bytes], log: Path, line: bytes) -> None:
    """`line` written to `log` is read at the next look (at most 1.5 quiet periods away, on the shared tick, plus a
    busy box's slack), and the looks after it are at the fast pace again."""
    with open(log, "ab") as fh:
        fh.write(line)
    await _until(got, line, 1.5 * QUIET_S + 5)
    assert await _looks_in(transport, 1.0) >= 3, f"{line!r} did not bring the log back to its fast pace"


async def test_a_quiet_log_is_looked_at_less_often_and_a_new_line_still_comes(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("The server is fired up and ready to roll!\n")
    transport = CountedPolling()
    got: list[bytes] = []

    async def follow() -> None:
        async for batch in LogTailer(transport, str(log), poll_s=FAST_S, quiet_poll_s=QUIET_S).follow():
            got.append(batch.data)

    task = asyncio.create_task(follow())
    try:
        await _until(got, b"roll!\n", 30)
        await asyncio.sleep(2 * QUIET_S)   # backed off by now
        quiet = await _looks_in(transport, 4 * QUIET_S)
        # At its fast pace that is 64 looks; backed off, 4.
        assert quiet <= 4 * QUIET_S / QUIET_S + 2, f"{quiet} looks at a quiet log in {4 * QUIET_S:.1f} s"
        await _back_to_fast_pace(transport, got, log, b"GET /v1/completions 200\n")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await transport.close()


async def test_a_log_that_grows_only_by_the_access_lines_of_its_watchers_reads_is_quiet(tmp_path: Path) -> None:
    """A real ready server's log is never silent: SGLang and vLLM log every request, specmon's own /metrics read every
    second among them, so the back-off above never began for a watched server. Those lines (every one still read)
    leave the log quiet; any other line brings it back to its fast pace."""
    log = tmp_path / "server.log"
    log.write_text("The server is fired up and ready to roll!\n")
    transport = CountedPolling()
    got: list[bytes] = []
    scrape = b'[2026-12-07 18:00:00] INFO:     127.0.0.1:41234 - "GET /metrics HTTP/1.1" 200 OK\n'
    written = 0

    async def follow() -> None:
        tailer = LogTailer(transport, str(log), poll_s=FAST_S, quiet_poll_s=QUIET_S, idle_lines=watch_reads_only)
        async for batch in tailer.follow():
            got.append(batch.data)

    async def scraped() -> None:
        nonlocal written
        while True:
            with open(log, "ab") as fh:
                fh.write(scrape)
            written += 1
            await asyncio.sleep(0.25)

    task, scraper = asyncio.create_task(follow()), asyncio.create_task(scraped())
    try:
        await _until(got, scrape, 30)
        await asyncio.sleep(2 * QUIET_S)   # backed off by now
        quiet = await _looks_in(transport, 4 * QUIET_S)
        # At its fast pace that is 64 looks (without `idle_lines` too: new bytes at every look); backed off, 4.
        assert quiet <= 4 * QUIET_S / QUIET_S + 2, f"{quiet} looks at a log that grew by its /metrics reads alone"
        scraper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await scraper
        started = time.monotonic()   # every access line is read all the same, at the next look
        while b"".join(got).count(scrape) != written:
            assert time.monotonic() - started < 1.5 * QUIET_S + 5, (b"".join(got).count(scrape), written)
            await asyncio.sleep(0.02)
        await _back_to_fast_pace(transport, got, log, b"Traceback (most recent call last):\n")
    finally:
        for running in (task, scraper):
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        await transport.close()
