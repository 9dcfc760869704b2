"""The TUI's garbage collector: full collections walk only what is new, the whole heap while no one types (issue 37).

A fleet's app holds ~250k objects, and Python's collector walked all of them in each full collection: 80-110 ms in
which no key is answered, every ~5 s at 64 runs (the repaints' strips and caches churn through the oldest
generation), and most `j` presses slower than 100 ms had landed in one. Now what start-up leaves, and what each
full collection leaves alive, is frozen (kept out of later walks), so the next full collection walks only what came
into the oldest generation since: ~10 ms.

A frozen object that later dies in a cycle (a toast or a dialog once closed: Textual's widgets point at their
parents) is not freed by those walks. So every RECLAIM_EVERY_S the whole heap is unfrozen and collected once, at a
moment when no key was pressed for QUIET_S (a walk of the whole heap takes a few hundred ms on a busy box), or
regardless once the typing has put it off for RECLAIM_EVERY_S more.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

RECLAIM_EVERY_S = 120.0
QUIET_S = 3.0


def reclaim_due(now: float, reclaimed_at: float, typed_at: float) -> bool:
    """Whether the whole heap is to be walked now: RECLAIM_EVERY_S since the last time, and QUIET_S since the last
    key (or twice RECLAIM_EVERY_S since the last time, typing or not)."""
    since = now - reclaimed_at
    return since >= 2 * RECLAIM_EVERY_S or (since >= RECLAIM_EVERY_S and now - typed_at >= QUIET_S)


class Heap:
    """The app's collector policy: `settle` after the first frame, `typed` on each key, `tick` every few seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.reclaimed_at = self.typed_at = clock()

    def settle(self) -> None:
        """Collect what start-up left behind; from now on every full collection freezes what it left alive."""
        if _freeze_survivors not in gc.callbacks:
            gc.callbacks.append(_freeze_survivors)
        gc.collect()
        self.reclaimed_at = self._clock()

    def typed(self) -> None:
        self.typed_at = self._clock()

    def tick(self) -> bool:
        """Walk the whole heap once if it is due (see reclaim_due); whether it was."""
        if not reclaim_due(self._clock(), self.reclaimed_at, self.typed_at):
            return False
        gc.unfreeze()
        gc.collect()   # which freezes its survivors again
        self.reclaimed_at = self._clock()
        return True


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()
