"""loadgen/wakeup: an open loop's arrivals wake at their time, never before it, from the kernel's timer on Linux.

The figures (send lateness at 1,000 req/s) are bench/loadgen_overhead.py's; these tests hold the rules the figures
rest on: no send before its time, a cancelled wait leaves nothing armed, one waiter at a time, and the fallback
without a timerfd keeps the first rule.
"""

from __future__ import annotations

import asyncio
import random
import select
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from specmon.loadgen import wakeup
from specmon.loadgen.wakeup import Wakeup

LINUX = sys.platform.startswith("linux")


def on_both_loops(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())
    uvloop.run(test())   # the generator's loop, whose own timers step by milliseconds


async def waits_never_end_early() -> None:
    w = Wakeup()
    rng = random.Random(5)
    try:
        for _ in range(60):
            due = time.perf_counter_ns() + rng.randrange(0, 3_000_000)
            await w.at(due)
            assert time.perf_counter_ns() >= due
        await w.at(time.perf_counter_ns() - 1_000_000)   # already due: returns at once
    finally:
        w.close()


def test_a_wait_never_ends_before_its_time() -> None:
    on_both_loops(waits_never_end_early)


@pytest.mark.skipif(not LINUX, reason="timerfd is Linux's")
def test_on_linux_the_wakeup_is_the_kernel_timer_and_a_cancelled_wait_leaves_none_armed() -> None:
    async def body() -> None:
        w = Wakeup()
        assert w.precise
        fd = w._fd
        try:
            for _ in range(5):   # a busy box may not get back to the cancel before the timer's time: try again
                due = time.perf_counter_ns() + 150_000_000
                task = asyncio.create_task(w.at(due))
                await asyncio.sleep(0)   # the wait starts and arms the timer
                await asyncio.sleep(0)
                task.cancel()
                cancelled_in_time = time.perf_counter_ns() < due
                with pytest.raises(asyncio.CancelledError):
                    await task
                if cancelled_in_time:
                    break
            else:
                pytest.skip("machine overloaded: no cancel came before the timer's time in 5 tries")
            time.sleep(max(0.0, (due - time.perf_counter_ns()) / 1e9) + 0.03)   # past its time, loop not looking
            assert select.select([fd], [], [], 0)[0] == []   # the timer did not go off: it was disarmed
            due = time.perf_counter_ns() + 20_000_000
            await w.at(due)   # the next wait works as if nothing happened
            assert time.perf_counter_ns() >= due
        finally:
            w.close()

    on_both_loops(body)


def test_one_waiter_at_a_time() -> None:
    async def body() -> None:
        w = Wakeup()
        try:
            first = asyncio.create_task(w.at(time.perf_counter_ns() + 50_000_000))
            await asyncio.sleep(0)
            with pytest.raises(RuntimeError, match="already waiting"):
                await w.at(time.perf_counter_ns() + 10_000_000)
            await first
        finally:
            w.close()

    on_both_loops(body)


def test_without_a_timerfd_the_loop_timers_still_never_wake_early(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wakeup, "_libc", lambda: None)

    async def body() -> None:
        w = Wakeup()
        assert not w.precise
        w.close()
        await waits_never_end_early()

    on_both_loops(body)


def test_the_loop_timer_beside_the_kernel_timer_never_goes_off_before_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvloop counts its timers in whole milliseconds: one set for the due time itself went off early about half the
    time, waking the process for nothing (an open loop's CPU). Set for the first whole millisecond at or after it,
    it never goes off early."""
    early: list[int] = []
    fired = Wakeup._timer_fired

    def noting(self: Wakeup, due_ns: int) -> None:
        if time.perf_counter_ns() < due_ns:
            early.append(due_ns)
        fired(self, due_ns)

    monkeypatch.setattr(Wakeup, "_timer_fired", noting)

    async def body() -> None:
        w = Wakeup()
        rng = random.Random(7)
        try:
            for _ in range(60):
                await w.at(time.perf_counter_ns() + rng.randrange(100_000, 3_000_000))
        finally:
            w.close()

    on_both_loops(body)
    assert early == []
