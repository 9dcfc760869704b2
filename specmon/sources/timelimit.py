"""Time limits on awaits that never lose a cancellation.

`asyncio.wait_for` before Python 3.12 returns the awaited result when its task is cancelled in the same loop pass
as the awaited thing finishes: the cancellation is lost and a loop being stopped runs on. Seen here: `specmon wait`
printed its verdict and never exited, its run's health loop cancelled but polling on (a refused connect and the
cancel landed together, about one wait in eight). `asyncio.timeout` (3.11+) has no such gap; on 3.10 a minimal
equivalent stands in. Everything in specmon that limits an await's time goes through here (ruff bans
`asyncio.wait_for`).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from types import TracebackType
from typing import TypeVar

T = TypeVar("T")

if sys.version_info >= (3, 11):
    from asyncio import timeout
else:   # pragma: no cover - Python 3.10 only
    class timeout:   # noqa: N801 - asyncio's name
        """Cancel the current task after `delay` seconds (None: never); that cancellation leaves as a TimeoutError.

        Unlike 3.11's, a cancellation from outside that lands in the same pass as the limit also leaves as a
        TimeoutError (3.10 has no Task.uncancel to tell them apart): the task still stops."""

        def __init__(self, delay: float | None) -> None:
            self._delay = delay
            self._handle: asyncio.TimerHandle | None = None
            self._fired = False

        async def __aenter__(self) -> timeout:
            if self._delay is not None:
                task = asyncio.current_task()
                assert task is not None
                self._handle = asyncio.get_running_loop().call_later(max(self._delay, 0.0), self._fire, task)
            return self

        def _fire(self, task: asyncio.Task[object]) -> None:
            self._fired = True
            task.cancel()

        async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                            tb: TracebackType | None) -> bool:
            if self._handle is not None:
                self._handle.cancel()
            if self._fired and kind is asyncio.CancelledError:
                raise asyncio.TimeoutError from exc
            return False


async def wait_for(awaitable: Awaitable[T], seconds: float | None) -> T:
    """`await awaitable`, or asyncio.TimeoutError after `seconds` (None: no limit); a cancellation always leaves."""
    async with timeout(seconds):
        result = await awaitable
    return result
