"""The TUI's garbage collector: full collections walk only what is new, the whole heap now and then while no one types,
and the youngest generation is collected a third as often (issue 37).

A fleet's app holds ~250k objects, and Python's collector walked all of them in each full collection: 80-110 ms in
which no key is answered, every ~5 s at 64 runs (the repaints' strips and caches churn through the oldest
generation), and most `j` presses slower than 100 ms had landed in one. Now what start-up leaves, and what each
full collection leaves alive, is frozen (kept out of later walks), so the next full collection walks only what came
into the oldest generation since: ~10 ms.

A frozen object that later dies in a cycle (a toast or a dialog once closed: Textual's widgets point at their
parents) is not freed by those walks. So the whole heap is unfrozen and collected once RECLAIM_FIRST_S after start-up
(what start-up left to die: ~27k objects at 64 runs), then every RECLAIM_EVERY_S, at a moment when no key was pressed
for QUIET_S (a walk of the whole heap takes 150-250 ms at 64 runs), or regardless once the typing has put it off for
as long again. An idle 64-run app strands ~1k objects in two minutes: walked every two minutes, as before, the walks
cost 0.16-0.2 % of a core; every ten, 0.03-0.04 %.

The youngest generation is collected after YOUNG new objects instead of Python's 700, and the middle one after
MIDDLE of those collections instead of 10 (so it is about as large as before when collected). Most of what a young
collection walks is what is waiting right then (every poller's coroutine and future, every strip's caches); walked a
third as often it costs about half: 64 runs idle, 90 s, young and middle collections 130 ms instead of 194 ms.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

RECLAIM_FIRST_S = 120.0
RECLAIM_EVERY_S = 600.0
QUIET_S = 3.0
YOUNG = 2100
MIDDLE = 3


def reclaim_due(now: float, reclaimed_at: float, typed_at: float, every: float = RECLAIM_EVERY_S) -> bool:
    """Whether the whole heap is to be walked now: `every` seconds since the last time, and QUIET_S since the last
    key (or twice `every` since the last time, typing or not)."""
    since = now - reclaimed_at
    return since >= 2 * every or (since >= every and now - typed_at >= QUIET_S)


class Heap:
    """The app's collector policy: `settle` after the first frame, `typed` on each key, `tick` every few seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.reclaimed_at = self.typed_at = clock()
        self.every = RECLAIM_FIRST_S   # until the next whole-heap walk

    def settle(self) -> None:
        """Collect what start-up left behind; from now on every full collection freezes what it left alive, and the
        young generations are collected less often."""
        if _freeze_survivors not in gc.callbacks:
            gc.callbacks.append(_freeze_survivors)
        gc.collect()
        gc.set_threshold(YOUNG, MIDDLE, gc.get_threshold()[2])
        self.reclaimed_at = self._clock()

    def typed(self) -> None:
        self.typed_at = self._clock()

    def tick(self) -> bool:
        """Walk the whole heap once if it is due (see reclaim_due); whether it was."""
        if not reclaim_due(self._clock(), self.reclaimed_at, self.typed_at, self.every):
            return False
        gc.unfreeze()
        gc.collect()   # which freezes its survivors again
        self.reclaimed_at, self.every = self._clock(), RECLAIM_EVERY_S
        return True


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()
