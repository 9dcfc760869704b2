"""HTTP probes against a real `specmon sim`."""

from __future__ import annotations

import asyncio
import time

import pytest
from simproc import start_sim

from specmon.sources.health import ProbeResult, ServerProbe, poll

pytestmark = pytest.mark.slow


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
