"""One level of a sweep in progress, and the two ways of loading it: a closed loop and an open loop.

A `Level` holds what every request of the level adds to (the accumulator, the records, the requests in flight, the
chunk handling delays) and reports progress and the result. A driver sends the level's requests:
- `ClosedLoop`: C workers each send a request, wait for it to finish and send the next, until the level's request
  count is issued or its duration has passed (in-flight requests then finish and count);
- `OpenLoop`: each arrival of the level's schedule is a task that sleeps until its time (absolute, from the level's
  start, so a late send never shifts the ones after it) and sends, whatever is still in flight; the next arrival's
  task is made when one goes out; with a max-concurrency cap a request whose arrival finds every slot taken waits
  for one. Each record notes how late its send was against the schedule (to the moment its bytes went to the
  socket), and each progress summary how many requests are due and not yet sent and how late the oldest is.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import gc
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from specmon.loadgen.client import WATCH, Stream, StreamClient
from specmon.loadgen.wakeup import Wakeup
from specmon.loadgen.workload import RequestFactory
from specmon.model.sweeps.results import utc_now_iso
from specmon.model.sweeps.sweepstats import LevelAccumulator, LogHistogram, ProgressPhase, RequestRecord, SweepProgress
from specmon.model.text.secrets import redact

PROGRESS_INTERVAL_S = 0.25
REFUSED_BACKOFF_S = 0.2   # a refused worker waits, so a dead server is not hammered in duration mode
START_SPACING_S = 0.0005  # level start ramp: 256 streams start within 128 ms
# The collector is off during a level; the ticker collects once this many tracked objects were made and not freed
# since the last collection (gc.get_count()[0]: objects freed by reference counting are taken off it again). So a
# level that makes no cyclic garbage never stops for a collection: each one walks every live object made since the
# last (the requests in flight, their coroutines), 2-8 ms on a loaded 2-core box, and freed nothing there (measured).
# A level that does make cycles (httpx made ~45 a request) is collected about as often as once every 2,000 requests.
GC_PILED_UP_OBJECTS = 100_000


@dataclasses.dataclass
class LevelSetup:
    """What a level is: its index, concurrency (an open loop's cap, 0 for none), request count (None: by
    duration), duration, rate (None: closed loop), and whether it is the warm-up."""

    index: int
    concurrency: int
    count: int | None
    duration_s: float | None
    warmup: bool
    rate: float | None = None
    level_count: int = 1
    part: tuple[int, int] = (0, 1)   # (k, n): this process sends part k of n of the level (loadgen.shards)

    def share(self, total: int) -> int:
        """This process's share of `total` (workers, connections, a cap) when it sends part k of n."""
        k, n = self.part
        return total // n + (1 if k < total % n else 0)

    def indices(self) -> Iterator[int]:
        """The requests a closed loop's part sends, in order: request i is worker (i mod C)'s, and part k has the
        share(C) workers after those of parts 0..k-1, so every part sends in proportion to its workers."""
        k, n = self.part
        c = self.concurrency
        first = c // n * k + min(k, c % n)
        mine = range(first, first + self.share(c))
        if not mine:
            return
        for wave in itertools.count():
            for w in mine:
                yield wave * c + w


class Level:
    """A level in progress: requests finish into it (`finish`), it reports progress and its result."""

    def __init__(self, setup: LevelSetup, slo: Any, secrets: list[str], write: Callable[[RequestRecord], None],
                 emit_progress: Callable[[SweepProgress], None], take_lag_max: Callable[[], float]) -> None:
        self.setup = setup
        self.acc = LevelAccumulator(setup.concurrency, rate=setup.rate, slo=slo)
        self.handled = LogHistogram()   # per request, the longest a chunk waited for its stream's code after arriving
        self.in_flight: set[Stream] = set()
        # An open loop's schedule keeping, asked at each progress summary (OpenLoop.schedule_now): requests sent,
        # requests due and not yet sent, how late the oldest of them is (ms).
        self.schedule_now: Callable[[int], tuple[int, int, float | None]] | None = None
        self.first_error: str | None = None
        self.started_at = utc_now_iso()
        self.t0_ns = 0
        self.request_ns = 0     # the summed duration of the level's successful requests, and their number
        self.requests_timed = 0
        self._secrets = secrets
        self._write = write
        self._emit_progress = emit_progress
        self._take_lag_max = take_lag_max
        self._cpu_mark, self._wall_mark = time.process_time(), time.perf_counter()
        WATCH.largest = 0

    def start(self, t0_ns: int | None = None) -> None:
        """The level's clock starts (now, or at `t0_ns`, the time every process of a sharded sweep starts it): record
        times and an open loop's schedule count from here."""
        self.t0_ns = time.perf_counter_ns() if t0_ns is None else t0_ns

    def finish(self, s: Stream, category: str | None, i: int, **extra: Any) -> None:
        """A request ended: record it (with `extra` fields: an open loop's rate, lateness, queueing)."""
        self.handled.add(s.handled_max_ns / 1e6)
        if s.error is None:
            self.request_ns += s.end_ns - s.sent_at
            self.requests_timed += 1
        if s.detail is not None:
            s.detail = redact(s.detail, self._secrets)   # error bodies may echo the key
        r = _record(self.setup.concurrency, i, s, self.t0_ns, self.setup.warmup, category, extra)
        if r.detail is not None and self.first_error is None:
            self.first_error = f"{r.error}: {r.detail}"
        self._write(r)
        self.acc.add(r)

    def progress(self) -> None:
        setup, acc = self.setup, self.acc
        now_ns = time.perf_counter_ns()
        elapsed = (now_ns - self.t0_ns) / 1e9
        sent, backlog, backlog_late_ms = self.schedule_now(now_ns) if self.schedule_now else (None, None, None)
        tpc = acc.tokens_per_chunk or 1.0
        live_tokens = acc.output_tokens + tpc * sum(len(s.times) for s in self.in_flight)
        cpu_now, wall = time.process_time(), time.perf_counter()
        cpu_frac = (cpu_now - self._cpu_mark) / (wall - self._wall_mark) if wall > self._wall_mark else None
        self._cpu_mark, self._wall_mark = cpu_now, wall
        p = SweepProgress(
            concurrency=setup.concurrency, level_index=setup.index, level_count=setup.level_count,
            phase=ProgressPhase.WARMUP if setup.warmup else ProgressPhase.MEASURING, elapsed_s=round(elapsed, 3),
            requests_done=acc.requests_ok + acc.requests_failed, requests_failed=acc.requests_failed,
            requests_target=setup.count, duration_target_s=setup.duration_s, in_flight=len(self.in_flight),
            output_tok_s=round(live_tokens / elapsed, 2) if elapsed > 0 else 0.0,
            ttft_p50_ms=acc.ttft_live.quantile(50), tokens_per_chunk=acc.tokens_per_chunk,
            loop_lag_ms=round(self._take_lag_max(), 3), cpu_fraction=None if cpu_frac is None else round(cpu_frac, 3),
            rate=setup.rate, sent=sent, backlog=backlog,
            backlog_late_ms=None if backlog_late_ms is None else round(backlog_late_ms, 3),
        )
        self._emit_progress(p)

    async def ticker(self) -> None:
        """Progress about 4 times a second; a cyclic collection once GC_PILED_UP_OBJECTS objects piled up (the
        collector is off during a level: its full collections stop every stream for 30 ms+)."""
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            self.progress()
            if gc.get_count()[0] >= GC_PILED_UP_OBJECTS:
                gc.collect()


class ClosedLoop:
    """C workers, each sending its next request when the last one ends; see the module docstring. A process that
    sends part k of n of the level runs its share of the workers and sends their requests (LevelSetup.indices)."""

    def __init__(self, level: Level, client: StreamClient, factory: RequestFactory) -> None:
        self._level, self._client, self._factory = level, client, factory
        self._issued = 0
        self._workers = level.setup.share(level.setup.concurrency)
        self._indices = level.setup.indices()
        self._first_start_ns: int | None = None   # duration mode: the level's time starts with its first send
        self._latest_end_ns = 0

    async def run(self) -> None:
        await asyncio.gather(*(self._worker(k) for k in range(self._workers)))

    def _take(self) -> int | None:
        setup = self._level.setup
        i = next(self._indices, None)
        if i is None:
            return None
        if setup.duration_s is not None and setup.count is None:
            # The first wave always goes out whole, even when the duration is shorter than the start ramp:
            # otherwise the level would be labelled C without ever having had C requests in flight. After it,
            # a level stops once a request has ended past the deadline, so its measured time (first send to
            # last end) is never shorter than asked, however late this process was scheduled.
            if (self._issued >= self._workers and self._first_start_ns is not None
                    and self._latest_end_ns >= self._first_start_ns + setup.duration_s * 1e9):
                return None
        elif setup.count is not None and i >= setup.count:
            return None
        self._issued += 1
        return i

    async def _worker(self, k: int) -> None:
        # Workers start START_SPACING_S apart: sending C requests in one loop iteration would hold back the
        # first streams' chunks (~0.1 ms of client work per request start) and show up as client-made ITL.
        await asyncio.sleep(k * START_SPACING_S)
        level = self._level
        c = level.setup.concurrency
        while (i := self._take()) is not None:
            s = Stream()
            level.in_flight.add(s)
            try:
                await self._client.send(self._factory.body(c, i), s)
            finally:
                level.in_flight.discard(s)
            if self._first_start_ns is None or s.sent_at < self._first_start_ns:
                self._first_start_ns = s.sent_at
            self._latest_end_ns = max(self._latest_end_ns, s.end_ns)
            level.finish(s, self._factory.category(i), i)
            if s.error == "refused":
                await asyncio.sleep(REFUSED_BACKOFF_S)


class OpenLoop:
    """Requests sent on a schedule of arrival times (seconds from the level's start); see the module docstring. A
    process that sends part k of n of the level sends arrivals k, k + n, k + 2n, ... of the schedule, with its
    share of the concurrency cap."""

    def __init__(self, level: Level, client: StreamClient, factory: RequestFactory,
                 times: Callable[[], Iterable[float]], max_concurrency: int | None) -> None:
        """`times()` gives the level's arrival times (seconds from its start), the same ones each call."""
        self._level, self._client, self._factory = level, client, factory
        self._times = times
        self._slots = asyncio.Semaphore(level.setup.share(max_concurrency)) if max_concurrency else None
        self._wakeup = Wakeup()   # made before the level's clock starts (a timerfd and its watch)
        # The schedule kept, for progress: this part's arrivals counted as they fall due (a second pass over the
        # schedule), those whose wait is over, those sent.
        k, n = level.setup.part
        self._due = itertools.islice(times(), k, None, n)
        self._due_next: float | None = next(self._due, None)
        self._due_count = 0
        self._unsent: collections.deque[float] = collections.deque()   # due times counted and not yet woken
        self._woken = 0
        self._sent = 0
        level.schedule_now = self.schedule_now

    def schedule_now(self, now_ns: int) -> tuple[int, int, float | None]:
        """(requests sent, requests due and not yet sent, how late the oldest of them is in ms) at `now_ns`; a request
        held back by the max-concurrency cap is not behind (its wait is the cap's, recorded as queued_ms)."""
        elapsed = (now_ns - self._level.t0_ns) / 1e9
        unsent = self._unsent
        while self._due_next is not None and self._due_next <= elapsed:
            unsent.append(self._due_next)
            self._due_count += 1
            self._due_next = next(self._due, None)
        backlog = self._due_count - self._woken
        while len(unsent) > backlog:
            unsent.popleft()
        return self._sent, backlog, (elapsed - unsent[0]) * 1000.0 if unsent else None

    async def run(self) -> None:
        tasks: set[asyncio.Task[None]] = set()
        loop = asyncio.get_running_loop()
        t0_ns = self._level.t0_ns
        try:
            label = f"r{self._level.setup.rate:g}"
            k, n = self._level.setup.part
            for i, t in itertools.islice(enumerate(self._times()), k, None, n):
                body = self._factory.body(label, i)   # built before the wait, so the send goes out on time
                # The request's own task waits for its time and sends at once when it wakes: a dispatcher that woke
                # and then started the task had it run a loop pass later (after the pass's socket reads). The next
                # request's task is made when this one goes out, so one task at a time waits; a dispatcher behind
                # its schedule still yields once per send, so the requests it started (and a stop) can run.
                due = loop.create_future()
                task = loop.create_task(self._arrival(i, t0_ns + int(t * 1e9), body, due))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                await due
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._wakeup.close()

    async def _arrival(self, i: int, due_ns: int, body: bytes, due: asyncio.Future[None]) -> None:
        try:
            await self._wakeup.at(due_ns)   # never early: lateness is never negative
        finally:
            if not due.done():
                due.set_result(None)
        self._woken += 1
        # Lateness counts from the scheduled time, or from when a slot came free if the cap held this one back
        # (that wait is the cap doing its job: recorded as queued_ms).
        level, slots = self._level, self._slots
        ready_ns, queued_ms = due_ns, None
        if slots is not None:
            if slots.locked():
                await slots.acquire()
                ready_ns = time.perf_counter_ns()
                queued_ms = (ready_ns - due_ns) / 1e6
            else:
                await slots.acquire()
        s = Stream()
        level.in_flight.add(s)
        self._sent += 1
        try:
            await self._client.send(body, s)
        finally:
            level.in_flight.discard(s)
            if slots is not None:
                slots.release()
        level.finish(s, self._factory.category(i), i, rate=level.setup.rate, late_ms=(s.sent_at - ready_ns) / 1e6,
                     queued_ms=queued_ms)


def _record(c: int, i: int, s: Stream, t0_ns: int, warmup: bool, category: str | None,
            extra: dict[str, Any]) -> RequestRecord:
    times, start_ns = s.times, s.sent_at
    ok = s.error is None
    gaps = tuple([(b - a) // 1000 for a, b in zip(times, times[1:])]) if ok else ()
    return RequestRecord(
        concurrency=c, index=i, start_s=(start_ns - t0_ns) / 1e9, end_s=(s.end_ns - t0_ns) / 1e9, ok=ok,
        error=s.error, detail=s.detail, status=s.status,
        ttft_ms=(times[0] - start_ns) / 1e6 if ok and times else None,
        e2e_ms=(times[-1] - start_ns) / 1e6 if ok and times else None,
        chunks=len(times), output_tokens=s.output_tokens, prompt_tokens=s.prompt_tokens, itl_us=gaps, warmup=warmup,
        category=category, **extra,
    )
