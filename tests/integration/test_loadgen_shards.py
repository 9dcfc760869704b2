"""A sweep sent by several generator processes (`--processes N`, loadgen/shards.py) is still one sweep: the same
requests (each index once), C requests in flight at a level labelled C, an open loop's one schedule, one records
file, one result per level; and its processes stop together, whoever stops first.

Against a real streaming server on loopback (tests/support/sse_server.py, in the test's own event loop), through
orchestration.measure.sweep.run_sweep, the path `specmon sweep` and the TUI take.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from process_support import alive
from sse_server import ServerState, serve

from specmon.errors import UserError
from specmon.loadgen.shards import OPEN_LOOP_RATE_PER_PROCESS
from specmon.loadgen.workload import Workload
from specmon.model.config import SweepDefaults, load_config
from specmon.model.sweeps.sweepstats import RequestRecord, SweepProgress, level_from_records
from specmon.model.workload.arrivals import arrival_times
from specmon.orchestration.measure.sweep import SweepSpec, SweepUpdate, WorkloadOverrides, run_sweep, workload_from
from specmon.sources.resultfiles import read_results

pytestmark = pytest.mark.slow

PARTS = 3


@pytest.fixture
async def server() -> AsyncIterator[tuple[ServerState, str]]:
    state = ServerState(tokens_per_chunk=1, interval_s=0.01)   # a request of 10 tokens takes ~100 ms
    runner, port = await serve(state)
    yield state, f"http://127.0.0.1:{port}"
    await runner.cleanup()


def records(path: Path) -> list[RequestRecord]:
    return [RequestRecord.from_dict(json.loads(x)) for x in path.read_text().splitlines()]


def most_in_flight(recs: list[RequestRecord]) -> int:
    """The most requests in flight at one moment, from the records' send and end times."""
    events = sorted([(r.start_s, 1) for r in recs] + [(r.end_s, -1) for r in recs], key=lambda e: (e[0], e[1]))
    now = top = 0
    for _, step in events:
        now += step
        top = max(top, now)
    return top


def descendants(pid: int) -> list[int]:
    """Live processes under `pid` (children, grandchildren, ...), from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[0] != "Z":
                parents[int(entry)] = int(stat[1])
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def parts_of(coordinator: int) -> list[int]:
    return [p for p in descendants(coordinator) if b"--part" in Path(f"/proc/{p}/cmdline").read_bytes()]


def loadgen_coordinator() -> int | None:
    for p in descendants(os.getpid()):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"specmon.loadgen" in cmd and b"--part" not in cmd:
            return p
    return None


def sweep(url: str, out: Path, processes: int, **kw: object) -> SweepSpec:
    wl = Workload(levels=kw.pop("levels", (1, 4, 7)), requests_per_level=kw.pop("requests", 14),  # type: ignore[arg-type]
                  output_len=10, input_len=8, warmup_requests=kw.pop("warmup", 2), timeout_s=10.0,  # type: ignore[arg-type]
                  processes=processes, **kw)  # type: ignore[arg-type]
    return SweepSpec(url=url, workload=wl, out_path=out)


async def test_a_sweep_sent_by_three_processes_is_the_same_sweep(server: tuple[ServerState, str],
                                                                  tmp_path: Path) -> None:
    state, url = server
    one = await run_sweep(sweep(url, tmp_path / "one.jsonl", 1))
    three = await run_sweep(sweep(url, tmp_path / "three.jsonl", PARTS))
    assert [lv.concurrency for lv in three.levels] == [1, 4, 7]
    for a, b in zip(one.levels, three.levels):
        assert (b.requests_ok, b.requests_failed, b.output_tokens) == (a.requests_ok, a.requests_failed, a.output_tokens)
        assert b.client.processes == PARTS and a.client.processes == 1
        assert b.client.chunks == a.client.chunks == 14 * 10
    assert read_results(tmp_path / "three.jsonl").levels == three.levels
    recs = records(Path(three.meta.records or ""))
    assert sum(r.warmup for r in recs) == 2
    for c in (1, 4, 7):
        level = [r for r in recs if r.concurrency == c and not r.warmup]
        assert sorted(r.index for r in level) == list(range(14)), c   # every request once, none twice
        # A level labelled C had C requests in flight, no more, although three processes sent it: counted from the
        # records' times, which holds only if all three count from the one instant they started the level (no part
        # sends before it). How soon after it the first send goes depends on the box (0.4 s with two suites at once).
        assert most_in_flight(level) == c, c
        assert min(r.start_s for r in level) >= 0
        # The level's figures, which the parts tallied, are those its records make (to the records' rounding).
        (figures,) = [lv for lv in three.levels if lv.concurrency == c]
        again = level_from_records(level)
        for got, want in ((figures.ttft_ms, again.ttft_ms), (figures.e2e_ms, again.e2e_ms),
                          (figures.itl_ms, again.itl_ms)):
            assert got.p50 == pytest.approx(want.p50, abs=1e-3) and got.p99 == pytest.approx(want.p99, abs=1e-3)


async def test_an_open_loop_sent_by_three_processes_keeps_its_one_schedule(server: tuple[ServerState, str],
                                                                           tmp_path: Path) -> None:
    state, url = server
    result = await run_sweep(sweep(url, tmp_path / "r.jsonl", PARTS, levels=(1,), rates=(40.0,), requests=30,
                                   warmup=0, seed=7))
    (level,) = result.levels
    assert level.requests_ok == 30 and level.rate == 40.0
    recs = records(Path(result.meta.records or ""))
    assert sorted(r.index for r in recs) == list(range(30))
    schedule = arrival_times(30, 40.0, 1.0, seed=7)   # the level's seed: the workload's plus its index (0)
    for r in recs:
        assert r.late_ms is not None and r.late_ms >= 0
        # send time - lateness = the scheduled time of that arrival in the unsharded schedule
        assert r.start_s - r.late_ms / 1000 == pytest.approx(schedule[r.index], abs=2e-6)


async def sweeping_in_parts(url: str, tmp_path: Path) -> tuple[asyncio.Task[object], int, list[int]]:
    """A sharded sweep of one long level, once its requests are finishing: its task, the coordinator's pid and its
    parts' pids."""
    progressed = asyncio.Event()

    def on_update(u: SweepUpdate) -> None:
        if isinstance(u, SweepProgress) and u.requests_done > 0:
            progressed.set()

    task: asyncio.Task[object] = asyncio.create_task(run_sweep(
        sweep(url, tmp_path / "r.jsonl", PARTS, levels=(6,), requests=None, duration_s=60.0), on_update))
    await asyncio.wait_for(progressed.wait(), 30)
    coordinator = loadgen_coordinator()
    assert coordinator is not None
    parts = parts_of(coordinator)
    assert len(parts) == PARTS
    return task, coordinator, parts


async def test_stopping_a_sharded_sweep_stops_every_process(server: tuple[ServerState, str], tmp_path: Path) -> None:
    state, url = server
    task, coordinator, parts = await sweeping_in_parts(url, tmp_path)
    task.cancel()   # what `c` in the TUI and Ctrl-C in `specmon sweep` do
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [p for p in [coordinator, *parts] if alive(p)] == []


async def test_a_part_that_dies_ends_the_sweep_naming_it(server: tuple[ServerState, str], tmp_path: Path) -> None:
    state, url = server
    task, coordinator, parts = await sweeping_in_parts(url, tmp_path)
    victim = sorted(parts)[1]
    os.kill(victim, signal.SIGKILL)
    t = time.monotonic()
    with pytest.raises(UserError, match=r"load generator part \d of 3 exited \(code -9\) before its sweep was done"):
        await asyncio.wait_for(task, 30)
    assert time.monotonic() - t < 10
    assert descendants(coordinator) == []   # the other parts went with it


def test_processes_are_checked_where_they_are_given(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"processes: must be in \[1, 64\], got 0"):
        Workload(levels=(1,), processes=0)
    with pytest.raises(UserError, match=r"processes: 4 is more than the max concurrency \(2\)"):
        Workload(levels=(1,), rates=(5.0,), max_concurrency=2, processes=4)
    path = tmp_path / "profiles.toml"
    profile = '[profiles.a]\ncommand = "python3 -m http.server"\n'
    path.write_text(profile + '[sweep]\nlevels = [1, 2]\nprocesses = 65\n')
    with pytest.raises(UserError, match=rf"{path}:5: sweep.processes: must be an integer in 1..64, got 65"):
        load_config(path)
    path.write_text(profile + '[sweep]\nprocesses = 4\n')
    assert load_config(path).sweep.processes == 4
    path.write_text(profile)
    assert load_config(path).sweep.processes is None   # auto


def test_processes_default_to_one_per_four_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody said how many: one process per 4 CPUs specmon may use, 1 to 4; what a user gives wins, and an open
    loop's cap bounds the default (each process needs a slot of it)."""
    for cpus, want in ((1, 1), (2, 1), (7, 1), (8, 2), (16, 4), (128, 4)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cpus: set(range(n)))
        assert workload_from(SweepDefaults()).processes == want, cpus
    assert workload_from(SweepDefaults(processes=2)).processes == 2
    assert workload_from(SweepDefaults(processes=2), WorkloadOverrides(processes=5)).processes == 5
    assert workload_from(SweepDefaults(), WorkloadOverrides(rates=(5.0,), max_concurrency=2)).processes == 2


def test_an_open_loop_gets_the_processes_its_rate_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """An open loop's default process count follows its highest rate (shards.OPEN_LOOP_RATE_PER_PROCESS a process),
    one per CPU specmon may use at most, never fewer than a closed loop gets there; --processes still wins."""
    per = OPEN_LOOP_RATE_PER_PROCESS
    for cpus, rates, want in ((16, (per * 2,), 4), (4, (per * 2,), 2), (4, (per / 2, per * 4), 4),
                              (16, (per * 8,), 8), (2, (per * 8,), 2), (1, (per * 3,), 1), (16, (per / 10,), 4)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cpus: set(range(n)))
        assert workload_from(SweepDefaults(), WorkloadOverrides(rates=rates)).processes == want, (cpus, rates)
    assert workload_from(SweepDefaults(), WorkloadOverrides(levels=(64,))).processes == 4   # closed loop: unchanged
    assert workload_from(SweepDefaults(processes=1), WorkloadOverrides(rates=(per * 8,))).processes == 1
    assert workload_from(SweepDefaults(), WorkloadOverrides(rates=(per * 8,), processes=3)).processes == 3
