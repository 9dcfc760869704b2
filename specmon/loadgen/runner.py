"""The generator's sweep loop: concurrency or request-rate levels, records on disk, summaries to the parent.

Runs inside the child process (see specmon.loadgen.__main__). Each level (specmon.loadgen.level) is driven by a
closed loop (C workers, each sending its next request when the last ends) or an open loop (requests sent on an
arrival schedule, specmon.model.workload.arrivals, drawn lazily). A warm-up phase of `warmup_requests` requests runs once
before the first level and is excluded. Every request is appended to the records file as one JSON line (a
RequestRecord), and folded into a LevelAccumulator, so memory does not grow with the sweep. The generator measures
its own event-loop lag (a 10 ms ticker) and process CPU per level, and emits a SweepProgress about 4 times a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import time
from array import array
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from specmon.loadgen.client import WATCH, StreamClient
from specmon.loadgen.level import ClosedLoop, Level, LevelSetup, OpenLoop
from specmon.loadgen.lines import append_whole
from specmon.loadgen.protocol import Emit, Tally, Warn, encode
from specmon.loadgen.wakeup import Wakeup
from specmon.loadgen.workload import RequestFactory, Workload
from specmon.model.sweeps.results import LevelResult
from specmon.model.sweeps.sweepstats import RequestRecord, SweepProgress, percentile
from specmon.model.workload.arrivals import Schedule, connections_needed
from specmon.model.workload.datasets import Dataset

LAG_TICK_S = 0.01
PRECONNECT_OPEN_LOOP = 64   # open loop: the fewest keep-alive connections opened before a level
PRECONNECT_MOST = 4096      # and the most (file descriptors)
TALLY_MOST = 50_000         # a part's tally of a level goes in pieces of this many values a series (~9 MB a line)

class LoopLagMonitor:
    """Sleeps LAG_TICK_S in a loop and records how late it wakes: the event loop's own queueing delay."""

    def __init__(self) -> None:
        self.samples = array("d")     # this level, ms
        self.window_max = 0.0         # since the last progress summary, ms
        self._task: asyncio.Task[None] | None = None
        self._epoch = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            epoch = self._epoch
            await asyncio.sleep(LAG_TICK_S)
            if epoch != self._epoch:
                continue  # this sleep straddled a level start (setup work): not part of the level
            lag_ms = max(0.0, (time.perf_counter() - t - LAG_TICK_S) * 1000.0)
            self.samples.append(lag_ms)
            self.window_max = max(self.window_max, lag_ms)

    def reset_level(self) -> None:
        self.samples = array("d")
        self.window_max = 0.0
        self._epoch += 1

    def take_window_max(self) -> float:
        v, self.window_max = self.window_max, 0.0
        return v

    def p99(self) -> float | None:
        return percentile(sorted(self.samples), 99)


class RecordsWriter:
    """Appends one JSON line per request. Lines wait in memory and go to the file whole, at every progress summary
    and level end (and at close), so the file always ends at a whole line: a write that fails midway is cut back
    (lines.append_whole), and a kill lands between writes, never inside a line.

    The records are a by-product: when the disk fills up (or the file otherwise stops taking writes), writing them
    stops with one warning through `on_error`, and the sweep, whose level results matter more, goes on.
    """

    def __init__(self, path: str | None, on_error: Callable[[str], None] = lambda message: None,
                 fd: int | None = None) -> None:
        """Records go to the file at `path`, or to the open file descriptor `fd` (a shard's stdout), or nowhere."""
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else fd
        self._path = path or f"file descriptor {fd}"
        self._owned = bool(path)   # a descriptor given stays open (a shard's stdout carries its last messages)
        self._pending: list[bytes] = []
        self._on_error = on_error

    def write(self, r: RequestRecord) -> None:
        if self._fd is not None:
            self._pending.append(encode(r))

    def write_line(self, line: bytes) -> None:
        """A record already encoded (a part's line; its newline is added where it has none)."""
        if self._fd is not None:
            self._pending.append(line if line.endswith(b"\n") else line + b"\n")

    def flush(self) -> None:
        if self._fd is None or not self._pending:
            return
        data, self._pending = b"".join(self._pending), []
        try:
            append_whole(self._fd, data)
        except OSError as exc:
            self._close()
            self._on_error(f"{self._path}: per-request records stopped ({exc.strerror or exc}); "
                           "level results are still written")

    def close(self) -> None:
        self.flush()
        self._close()

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None and self._owned:
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass(frozen=True)
class Part:
    """This process sends part k of n of every level (specmon.loadgen.shards): `start(index)` waits until every
    part is ready for level `index` and returns the time (time.perf_counter_ns) they all start it at."""

    k: int
    n: int
    start: Callable[[int], Awaitable[int]]


class SweepRunner:
    """Runs every level of a workload against one server, emitting progress, level and warning messages.

    With a `part`, it is one shard of a sharded sweep: it sends its part of each level, starts each level when the
    coordinator says, writes its records to `records_fd` (its stdout), and leaves stopping a failing sweep to the
    coordinator, which sees every part."""

    def __init__(self, url: str, model: str, workload: Workload, emit: Emit, records_path: str | None = None,
                 api_key: str | None = None, dataset: Dataset | None = None, part: Part | None = None,
                 records_fd: int | None = None) -> None:
        if workload.processes > 1 and part is None:
            raise ValueError("a workload sent by several processes is run by loadgen.shards.ShardedSweep")
        self.w = workload
        self.emit = emit
        self.part = part
        self.factory = RequestFactory(workload, model, dataset)
        self.records = RecordsWriter(records_path, lambda message: emit(Warn(message)),
                                     fd=records_fd)
        # Open loop without a cap has no bound on requests in flight: no pool limit (0) either.
        top = (workload.max_concurrency or 0) if workload.open_loop else max(max(workload.levels),
                                                                           workload.warmup_requests, 1)
        self.client = StreamClient(url, workload.api, max_connections=top, timeout_s=workload.timeout_s, api_key=api_key,
                                   deadline_s=workload.deadline_s)
        self.lag = LoopLagMonitor()
        self._secrets = [api_key] if api_key else []
        self._first_error: str | None = None
        self._request_s: float | None = None   # the longest mean request duration of the levels so far (warm-up too)
        self._started = 0   # levels started so far, the warm-up included

    async def run(self) -> None:
        self.lag.start()
        try:
            if self.w.warmup_requests:
                await self._phase(0, self.w.warmup_requests, self.w.warmup_requests, None, warmup=True)
            cap = self.w.max_concurrency or 0
            points: list[tuple[int, float | None]] = (
                [(cap, rate) for rate in self.w.rates] if self.w.open_loop else [(c, None) for c in self.w.levels])
            for idx, (c, rate) in enumerate(points):
                if rate is None:
                    level = await self._phase(idx, c, self.w.requests_for(c), self.w.duration_s, warmup=False)
                else:
                    level = await self._phase(idx, c, self.w.arrivals_for(rate), None, warmup=False, rate=rate)
                self.emit(level)
                if level.requests_ok == 0 and self.part is None:
                    self.emit(no_success_warning(level, c, rate, self._first_error))
                    break
        finally:
            await self.lag.stop()
            self.records.close()
            await self.client.aclose()

    async def _phase(self, idx: int, c: int, n: int | None, duration_s: float | None, warmup: bool,
                     rate: float | None = None) -> LevelResult:
        """One level (or the warm-up): closed loop at concurrency c, or open loop at `rate` with n arrivals."""
        # An open loop's connections are opened before its clock starts, as many as Little's law says will be in
        # flight (from how long requests took so far, the warm-up's too): a connection opened during the level costs
        # the loop ~0.3 ms (aiohappyeyeballs, the socket, its watch) and delays the sends around it; with 64 opened,
        # a level at 500 req/s opened 442 more on its first sends (profiled: 14 % of its CPU).
        setup = LevelSetup(idx, c, n, duration_s, warmup, rate, level_count=len(self.w.levels),
                           part=(self.part.k, self.part.n) if self.part else (0, 1))
        await self.client.preconnect(setup.share(c if rate is None else connections_needed(
            rate, self._request_s, n or 1, c, c or PRECONNECT_OPEN_LOOP, PRECONNECT_MOST)))
        times = await self._schedule(idx, n or 0, rate) if rate is not None else tuple
        # The cyclic collector is paused during a level: its full collections stop every stream for 30 ms+
        # (measured), which would land in the ITL tail as client noise. httpx/aiohttp leave ~45 cyclic objects per
        # request, so the level's ticker collects once GC_PILED_UP_OBJECTS objects piled up, to keep memory flat.
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        gc.disable()
        level = Level(setup, self.w.slo, self._secrets, self.records.write, self._progress, self.lag.take_window_max)
        driver = (ClosedLoop(level, self.client, self.factory) if rate is None
                  else OpenLoop(level, self.client, self.factory, times, self.w.max_concurrency))
        self.lag.reset_level()
        cpu0 = time.process_time()
        wait0 = cpu_wait_s()
        if self.part is not None:
            await self._start_together(level)
        else:
            level.start()
        tick = asyncio.get_running_loop().create_task(level.ticker())
        try:
            await driver.run()
        finally:
            tick.cancel()
            await asyncio.gather(tick, return_exceptions=True)
            self.records.flush()
            gc.enable()
        self._first_error = level.first_error
        if level.requests_timed:
            mean_s = level.request_ns / level.requests_timed / 1e9
            self._request_s = max(mean_s, self._request_s or 0.0)
        level.progress()
        cpu_s = time.process_time() - cpu0
        wait1 = cpu_wait_s()
        acc = level.acc
        first, last = acc.first_start_s, acc.last_end_s
        duration = (last - first) if first is not None and last is not None else 0.0
        waited = None if wait0 is None or wait1 is None else wait1 - wait0
        result = acc.result(duration, cpu_s, self.lag.p99(), level.started_at, cpu_wait_s=waited,
                            handling_ms_p99=level.handled.quantile(99), burst_max=WATCH.largest)
        if self.part is not None and not warmup:   # the coordinator merges these, then takes the result's health
            for k, piece in enumerate(acc.pieces(TALLY_MOST)):
                self.emit(Tally(piece, level.first_error if k == 0 else None))
        return result

    async def _start_together(self, level: Level) -> None:
        """A shard's level starts when the coordinator says, at the time it gives (every shard's). Levels are
        counted from 1, the warm-up included."""
        assert self.part is not None
        self._started += 1
        t0_ns = await self.part.start(self._started)
        wakeup = Wakeup()
        try:
            await wakeup.at(t0_ns)
        finally:
            wakeup.close()
        level.start(t0_ns)

    def _progress(self, progress: SweepProgress) -> None:
        self.records.flush()
        self.emit(progress)

    async def _schedule(self, idx: int, n: int, rate: float) -> Callable[[], Iterable[float]]:
        """A level's arrival times, drawn lazily each time the callable returned is called (a level's seed is the
        workload's plus its index). The gaps are summed first, in blocks with a yield after each, so a stop is
        obeyed while a long schedule is summed."""
        schedule = Schedule(n, rate, self.w.burstiness, self.w.seed + idx)
        total = 0.0
        for part in schedule.gap_sums():
            total += part
            await asyncio.sleep(0)
        self._warn_far_first_arrival(schedule, total)
        return functools.partial(schedule.times, total)

    def _warn_far_first_arrival(self, schedule: Schedule, total: float) -> None:
        """A level whose first request is due later than a request's deadline would sit silent: say so."""
        first = next(iter(schedule.times(total)), None)
        deadline = self.client.deadline_s
        if first is not None and first > deadline:
            self.emit(Warn(f"{schedule.rate:g} req/s: the first request is due {first:.0f} s after the level "
                           f"starts, later than the {deadline:g} s request deadline; nothing is sent until then"))


def no_success_warning(level: LevelResult, c: int, rate: float | None, first_error: str | None) -> Warn:
    """The warning that stops a sweep after a level where no request succeeded: a dead server, a bad key or model,
    or a server drowning at this load (higher levels would only repeat it)."""
    kinds = ", ".join(f"{k} {n}" for k, n in level.errors.items())
    where = f"C={c}" if rate is None else f"{rate:g} req/s"
    return Warn(f"no request succeeded at {where} ({kinds}; first: {first_error}); stopping the sweep")


def cpu_wait_s() -> float | None:
    """Seconds this process's main thread has spent runnable but waiting for a CPU (Linux), else None.

    Loop lag with little CPU used and a large wait here means the box is overloaded, not the generator slow.
    """
    try:
        with open("/proc/self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None
