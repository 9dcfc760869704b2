"""Coalesced repaints: many "something changed" requests become at most one call per interval."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.message_pump import MessagePump
from textual.timer import Timer


class Throttle:
    """Call `callback` at most once per `interval` seconds, and always after the last request.

    A request inside the interval arms a single timer for the remainder; further requests ride on it. No timer
    runs while nothing changes, so an idle screen costs nothing.
    """

    def __init__(self, owner: MessagePump, interval: float, callback: Callable[[], None]) -> None:
        self._owner = owner
        self.interval = interval
        self._callback = callback
        self._last = float("-inf")
        self._timer: Timer | None = None

    def request(self, gather: float = 0.0, late: float = 0.0) -> None:
        """Ask for a call; it happens now or when the interval has passed since the previous one, and not sooner
        than `gather` seconds from now: the requests of a burst that come meanwhile ride on that one call. One that
        must wait waits `late` seconds more, for `ride_along` to make it sooner."""
        if self._timer is not None:
            return
        wait = max(self._last + self.interval - time.monotonic(), gather)
        if wait <= 0:
            self._fire()
        else:
            self._timer = self._owner.set_timer(wait + late, self._fire)

    def ride_along(self, early: float) -> None:
        """A waiting call happens now if it was due within `early` seconds: something else paints now, and both
        go to the terminal in one frame instead of two."""
        if self._timer is not None and time.monotonic() >= self._last + self.interval - early:
            self._timer.stop()
            self._fire()

    def _fire(self) -> None:
        self._timer = None
        self._last = time.monotonic()
        self._callback()
