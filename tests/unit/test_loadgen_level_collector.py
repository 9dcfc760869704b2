"""The cyclic collector during a level: the collector is off while a level runs (its full collections stop every
stream for 30 ms+) and the level's ticker collects instead. A level whose requests leave no cyclic garbage must never
stop for a collection (each walks every live object made since the last, milliseconds of a stopped event loop that
land in the open loop's lateness tail and free nothing); one whose requests do leave cycles must still free them."""

from __future__ import annotations

import asyncio
import collections
import gc

import pytest

from specmon.loadgen import level as level_module
from specmon.loadgen.level import GC_PILED_UP_OBJECTS, Level, LevelSetup

TICK_S = 0.02   # the ticker's interval here, so a test waits a few ticks, not seconds


class Cyclic:
    """One half of a reference cycle: freed only by the cyclic collector; counts its frees."""

    __slots__ = ("other",)
    freed = 0

    def __init__(self) -> None:
        self.other: Cyclic | None = None

    def __del__(self) -> None:
        Cyclic.freed += 1


def run_level(monkeypatch: pytest.MonkeyPatch, request_rounds: int, make_request) -> list[int]:
    """Runs a level's ticker with the collector off, as the runner does, while `request_rounds` rounds of 2,500
    requests end (each made by `make_request`), a few ticks apart; returns the generation of each collection."""
    monkeypatch.setattr(level_module, "PROGRESS_INTERVAL_S", TICK_S)
    collections_seen: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            collections_seen.append(info["generation"])

    async def main() -> None:
        level = Level(LevelSetup(0, 0, None, 60.0, False, rate=1000.0), None, [], lambda r: None, lambda p: None,
                      lambda: 0.0)
        level.start()
        tick = asyncio.get_running_loop().create_task(level.ticker())
        for _ in range(request_rounds):
            for _ in range(2500):
                make_request()
                level.acc.requests_ok += 1
            await asyncio.sleep(TICK_S * 5)
        tick.cancel()
        await asyncio.gather(tick, return_exceptions=True)

    gc.collect()
    gc.disable()
    gc.callbacks.append(seen)
    try:
        asyncio.run(main())
    finally:
        gc.callbacks.remove(seen)
        gc.enable()
    return collections_seen


def test_a_level_whose_requests_leave_no_cycles_never_stops_for_a_collection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 400 requests in flight at a time, each a few containers, freed by reference counting when it ends: 10,000
    # requests, well past the 2,000 after which the ticker used to collect (and found nothing).
    in_flight: collections.deque[dict[str, list[int]]] = collections.deque(maxlen=400)
    seen = run_level(monkeypatch, 4, lambda: in_flight.append({"times": [1, 2], "chunks": [3]}))
    assert seen == []


def test_cyclic_garbage_made_during_a_level_is_still_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    # 45 cyclic objects a request (what httpx left): 450,000 in all, several times GC_PILED_UP_OBJECTS.
    def request() -> None:
        for _ in range(45 // 2 + 1):
            a, b = Cyclic(), Cyclic()
            a.other, b.other = b, a

    Cyclic.freed = 0
    seen = run_level(monkeypatch, 4, request)
    made = 4 * 2500 * (45 // 2 + 1) * 2
    assert seen, "no collection during the level"
    assert made - Cyclic.freed <= GC_PILED_UP_OBJECTS + 2500 * 46, (
        f"{made - Cyclic.freed} of {made} cyclic objects still alive at the level's end")
