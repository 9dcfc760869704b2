"""A polled log (the way logs are followed over SSH) that stays quiet is looked at less and less often, and comes
back to its fast pace at its first new bytes: issue 37, the idle cost of a fleet's ready runs whose logs say
nothing. Real /bin/sh commands read a real file (LocalTransport, made to poll as SSHTransport does)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

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
        since = len(transport.looks)
        await asyncio.sleep(4 * QUIET_S)
        quiet = len(transport.looks) - since
        # At its fast pace that is 64 looks; backed off, 4.
        assert quiet <= 4 * QUIET_S / QUIET_S + 2, f"{quiet} looks at a quiet log in {4 * QUIET_S:.1f} s"
        with open(log, "a") as fh:
            fh.write("GET /v1/completions 200\n")
        # The next look is at most 1.5 periods away (the shared tick), plus a busy box's slack.
        await _until(got, b"200\n", 1.5 * QUIET_S + 5)
        since = len(transport.looks)
        await asyncio.sleep(1.0)
        assert len(transport.looks) - since >= 3, "new bytes did not bring the log back to its fast pace"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await transport.close()
