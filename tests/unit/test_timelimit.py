"""sources/timelimit: a time limit that never loses the cancellation of the task that waits.

Python 3.11's asyncio.wait_for returned the awaited result when its task was cancelled in the same loop pass as the
awaited thing finished; a run's health loop then polled on after `specmon wait` had cancelled it, and the command
printed its verdict and never exited (CI: test_wait_exit_codes_failed_stalled_and_timeout, about one wait in six).
"""

from __future__ import annotations

import asyncio

import pytest

from specmon.sources import timelimit


async def test_a_cancel_landing_as_the_awaited_thing_finishes_still_stops_the_task() -> None:
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[str] = loop.create_future()
    went_on = asyncio.Event()

    async def poller() -> None:
        await timelimit.wait_for(answered, 5.0)
        went_on.set()   # a lost cancellation runs on to here
        await asyncio.sleep(3600)

    task = asyncio.create_task(poller())
    await asyncio.sleep(0)   # the task now waits for the answer
    answered.set_result("refused")   # the answer and the cancel in one loop pass
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), 2.0)
    assert task.cancelled() and not went_on.is_set()


async def test_the_limit_raises_timeout_and_ends_what_it_waited_for() -> None:
    ended = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.set()

    with pytest.raises(asyncio.TimeoutError):
        await timelimit.wait_for(slow(), 0.05)
    assert ended.is_set()
    assert await timelimit.wait_for(asyncio.sleep(0, "done"), None) == "done"
