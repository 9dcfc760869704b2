"""Issue 37: an SSH host's metrics relay reads its runs' /metrics on the host's wall clock, at every whole second;
the runs on the app's own host were read, and every run's process checked and log looked at, on the app's
monotonic clock, whose seconds begin at another moment. Their figures came at two moments of each second, and the
app drew two frames a second where one would do (an 8-run fleet: 2.3 frames a second, measured with strace). They
now all wake on the wall clock's ticks, which the hosts share."""

from __future__ import annotations

import asyncio
import statistics
import time
import types

import pytest
from test_health_by_scrape import scraped_sim

from specmon.orchestration.runs.watcher import WatchTimings
from specmon.sources import transport
from specmon.sources.scrape import MetricsScraper
from specmon.sources.transport import tick_passed, until_tick

pytestmark = pytest.mark.slow

# A wall clock whose seconds begin half a second after the loop's: a reader on the loop's clock reads half a
# second off this one's ticks, whatever phase the two real clocks have on this box.
WALL_AHEAD_S = 0.5


def wall_half_a_second_off(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = types.SimpleNamespace(time=lambda: time.monotonic() + WALL_AHEAD_S, monotonic=time.monotonic)
    monkeypatch.setattr(transport, "time", clock)


async def test_the_shared_tick_is_the_wall_clocks_whatever_the_loops_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    wall_half_a_second_off(monkeypatch)
    loop = asyncio.get_running_loop()
    wait = until_tick(1.0, 0.0)
    assert abs((loop.time() + wait + WALL_AHEAD_S) % 1.0 - 0.5) > 0.49, \
        f"the tick {wait:.3f} s away is not a whole second of the wall clock"
    last_tick = loop.time() + wait - 1.0   # in the loop's time
    assert tick_passed(1.0, last_tick - 0.01) and not tick_passed(1.0, last_tick + 0.01)


@pytest.mark.timeout(120)
async def test_a_local_runs_metrics_are_read_on_the_wall_clocks_second(
        free_port_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the SSH hosts' relays read theirs: read 0.5 s off it (on the loop's clock) they came at another moment."""
    reads: list[float] = []
    read = MetricsScraper.read

    async def timed(self: MetricsScraper) -> object:
        if self.path == "/metrics":
            reads.append(time.monotonic())
        return await read(self)

    async with scraped_sim(free_port_factory(), WatchTimings(), metrics_interval_s=1.0):
        wall_half_a_second_off(monkeypatch)
        monkeypatch.setattr(MetricsScraper, "read", timed)
        await asyncio.sleep(7)
    late = [(at + WALL_AHEAD_S) % 1.0 for at in reads[1:]]   # the first may have been asked before the clock moved
    assert len(late) >= 4, reads
    # On the wall clock's ticks: a few ms late on an idle box; a busy one can hold a wake-up back, hence the median
    # and a quarter second. Read on the loop's clock, every read was 0.5 s off.
    assert statistics.median(late) < 0.25, f"reads {[round(x, 3) for x in late]} s after the wall clock's second"
