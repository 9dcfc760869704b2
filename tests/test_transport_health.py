"""HTTP probes against a real `specmon sim`, and the tailer's partial-line bytes across a lost link."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from lifecycle_support import tail_pids
from simproc import start_sim

from specmon.sources.health import ProbeResult, ServerProbe, poll
from specmon.sources.local import LocalTransport
from specmon.sources.tailer import LogTailer, TailBatch


async def test_probe_health_completion_and_info_of_a_ready_sim() -> None:
    with start_sim("--model", "test/Model-7B") as sim:
        probe = ServerProbe(sim.url)
        try:
            assert (await probe.health()).ok
            done = await probe.completion()
            assert done.ok and done.error is None
            assert await probe.model_id() == "test/Model-7B"
            info = await probe.server_info()
            assert isinstance(info, dict) and info
        finally:
            await probe.aclose()


async def test_probe_says_refused_when_nothing_listens(free_port: int) -> None:
    probe = ServerProbe(f"http://127.0.0.1:{free_port}")
    try:
        result = await probe.health()
        assert result.status is None and result.error == "connection refused" and not result.ok
        assert not (await probe.completion()).ok
    finally:
        await probe.aclose()


async def test_polls_never_overlap_even_when_answers_are_slow() -> None:
    with start_sim("--slow-health", "0.4") as sim:
        probe = ServerProbe(sim.url)
        in_flight, most, results = 0, 0, []

        async def counted() -> ProbeResult:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            try:
                return await probe.health()
            finally:
                in_flight -= 1

        def on_result(result: ProbeResult) -> bool:
            results.append(result)
            return len(results) >= 4

        t0 = time.monotonic()
        try:
            await asyncio.wait_for(poll(counted, 0.01, on_result), 20)
        finally:
            await probe.aclose()
        assert most == 1 and all(r.ok for r in results)
        assert time.monotonic() - t0 >= 4 * 0.4   # each poll waited for the previous answer


async def test_partial_line_bytes_reach_the_parser_once_across_a_lost_link(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    tailer = LogTailer(LocalTransport(), str(log), retry_s=0.05)
    batches: list[TailBatch] = []
    pieces = [b"start\n", b"\rshards 1/4", b"\rshards 2/4", b"\rshards 3/4", b"\rshards 4/4\n", b"done\n"]
    with open(log, "ab", buffering=0) as fh:
        async with contextlib.aclosing(tailer.follow()) as follow:
            it = follow.__aiter__()

            async def until(pred) -> None:   # type: ignore[no-untyped-def]
                while not pred():
                    batches.append(await asyncio.wait_for(it.__anext__(), 10))

            fh.write(pieces[0] + pieces[1])
            await until(lambda: b"shards 1/4" in b"".join(b.fresh for b in batches))
            fh.write(pieces[2])
            await until(lambda: b"shards 2/4" in b"".join(b.fresh for b in batches))
            # The progress line is unfinished: readers got "start" only, the parser got the redraws.
            assert b"".join(b.data for b in batches) == b"start\n" and tailer.offset == 6
            for pid in tail_pids(log):   # the link drops
                os.kill(pid, signal.SIGKILL)
            await until(lambda: any(b.note and "lost" in b.note for b in batches))
            fh.write(pieces[3] + pieces[4] + pieces[5])
            await until(lambda: tailer.offset == log.stat().st_size)
    content = log.read_bytes()
    assert b"".join(b.fresh for b in batches) == content            # every byte to the parser exactly once
    assert b"".join(b.data for b in batches) == content              # every whole line to readers exactly once
