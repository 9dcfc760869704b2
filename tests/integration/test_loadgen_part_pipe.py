"""A generator part (`python -m specmon.loadgen --part k/N`) keeps its open loop's schedule while its coordinator
is slow to read its records: its sends never wait on the pipe to the coordinator.

The test plays the coordinator of a real part process against a real streaming server on loopback
(tests/support/sse_server.py) and reads nothing from the part for the whole level (~170 kB of records, more than
a pipe holds by default: 64 KiB). A part that blocks on a write to its full pipe stops sending until the
coordinator reads again.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest
from sse_server import ServerState, serve

from specmon.loadgen.protocol import ChildSpec, Done, Fatal, Ready, Start, decode, encode
from specmon.loadgen.workload import Workload
from specmon.model.sweeps.sweepstats import RequestRecord

pytestmark = pytest.mark.slow

RATE = 600.0        # the level's rate; part 0 of 2 sends half of it
LEVEL_S = 2.5       # 750 records of the part, ~170 kB: the third progress summary's write no longer fits 64 KiB


@pytest.fixture
async def server() -> AsyncIterator[str]:
    runner, port = await serve(ServerState(interval_s=0.01))
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_a_part_sends_on_time_while_its_coordinator_reads_nothing(server: str) -> None:
    wl = Workload(levels=(1,), rates=(RATE,), requests_per_level=round(RATE * LEVEL_S), warmup_requests=0,
                  output_len=4, input_len=8, timeout_s=10.0, dataset="random", processes=2)
    # A plain pipe, read only when the test says (an asyncio one is drained into memory whenever the loop runs),
    # each read in a thread: this loop serves the part's requests meanwhile.
    part = subprocess.Popen([sys.executable, "-m", "specmon.loadgen", "--part", "0/2"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert part.stdin is not None and part.stdout is not None
    out = part.stdout

    async def message() -> object:
        msg = decode(await asyncio.wait_for(asyncio.to_thread(out.readline), 60))
        assert not isinstance(msg, Fatal), msg
        return msg

    try:
        part.stdin.write(encode(ChildSpec(server, "fixture-model", wl)))
        part.stdin.flush()
        assert await message() == Ready(1)
        part.stdin.write(encode(Start(1, time.perf_counter_ns() + 20_000_000)))
        part.stdin.flush()
        await asyncio.sleep(LEVEL_S + 1.0)   # the coordinator is busy elsewhere: not one byte read
        records: list[RequestRecord] = []
        while not isinstance(msg := await message(), Done):
            if isinstance(msg, RequestRecord):
                records.append(msg)
    finally:
        part.stdin.close()
        await asyncio.to_thread(part.wait, 30)
    assert len(records) == wl.arrivals_for(RATE) // 2 and all(r.ok for r in records)
    # A part that blocked on its pipe sent nothing from ~0.75 s until the reads began at 3.5 s: seconds late.
    late = sorted(r.late_ms or 0.0 for r in records)
    assert late[-1] < 1000, f"sends went out up to {late[-1]:.0f} ms late (p50 {late[len(late) // 2]:.1f} ms)"
