"""The generator's sweep loop: concurrency or request-rate levels, records on disk, summaries to the parent.

Runs inside the child process (see specmon.loadgen.__main__). Closed loop, per level: C worker tasks each send a
request, wait for it to finish and send the next, until the level's request count is issued or its duration has
passed (in-flight requests then finish and count). Open loop, per level: one dispatcher sleeps until each arrival
of the level's schedule (specmon.model.arrivals, absolute times from the level's start, so a late send never
shifts the ones after it) and starts that request as its own task, whatever is still in flight; with a
max-concurrency cap a request whose arrival finds every slot taken waits for one. Each record notes how late its
send was against the schedule. A warm-up phase of `warmup_requests` requests runs once before the first
level and is excluded. Every request is appended to the records file as one JSON line (a RequestRecord), and folded
into a LevelAccumulator, so memory does not grow with the sweep. The generator measures its own event-loop lag
(a 10 ms ticker) and process CPU per level, and emits a SweepProgress about 4 times a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import os
import time
from array import array
from collections.abc import Callable, Iterable
from typing import Any

from specmon.loadgen.client import PHASE, Stream, StreamClient
from specmon.loadgen.workload import RequestFactory, Workload
from specmon.model.arrivals import Schedule
from specmon.model.datasets import Dataset
from specmon.model.results import append_whole, redact, utc_now_iso
from specmon.model.sweepstats import LevelAccumulator, LogHistogram, RequestRecord, SweepProgress, percentile

PROGRESS_INTERVAL_S = 0.25
LAG_TICK_S = 0.01
REFUSED_BACKOFF_S = 0.2
START_SPACING_S = 0.0005  # level start ramp: 256 streams start within 128 ms
PRECONNECT_OPEN_LOOP = 64   # open loop without a cap: keep-alive connections opened before the level
GC_EVERY_REQUESTS = 2000  # ~45 cyclic objects each: a few tens of MB between collections   # a refused worker waits, so a dead server is not hammered in duration mode

Emit = Callable[[dict[str, Any]], None]


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
    (results.append_whole), and a kill lands between writes, never inside a line.

    The records are a by-product: when the disk fills up (or the file otherwise stops taking writes), writing them
    stops with one warning through `on_error`, and the sweep, whose level results matter more, goes on.
    """

    def __init__(self, path: str | None, on_error: Callable[[str], None] = lambda message: None) -> None:
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        self._path = path
        self._pending: list[str] = []
        self._on_error = on_error

    def write(self, r: RequestRecord) -> None:
        if self._fd is not None:
            self._pending.append(json.dumps(r.to_dict(), separators=(",", ":")) + "\n")

    def flush(self) -> None:
        if self._fd is None or not self._pending:
            return
        data, self._pending = "".join(self._pending).encode("utf-8"), []
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
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


class SweepRunner:
    """Runs every level of a workload against one server, emitting progress, level and warning messages."""

    def __init__(self, url: str, model: str, workload: Workload, emit: Emit, records_path: str | None = None,
                 api_key: str | None = None, dataset: Dataset | None = None) -> None:
        self.w = workload
        self.emit = emit
        self.factory = RequestFactory(workload, model, dataset)
        self.records = RecordsWriter(records_path, lambda message: emit({"type": "warning", "message": message}))
        # Open loop without a cap has no bound on requests in flight: no pool limit (0) either.
        top = (workload.max_concurrency or 0) if workload.open_loop else max(max(workload.levels),
                                                                           workload.warmup_requests, 1)
        self.client = StreamClient(url, workload.api, max_connections=top, timeout_s=workload.timeout_s, api_key=api_key,
                                   deadline_s=workload.deadline_s)
        self.lag = LoopLagMonitor()
        self._secrets = [api_key] if api_key else []
        self._first_error: str | None = None

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
                self.emit({"type": "level", "level": level})
                if level["requests_ok"] == 0:
                    # A dead server, a bad key or model, or a server drowning at this load: higher levels would
                    # only repeat it.
                    kinds = ", ".join(f"{k} {n}" for k, n in level["errors"].items())
                    where = f"C={c}" if rate is None else f"{rate:g} req/s"
                    self.emit({"type": "warning", "message": f"no request succeeded at {where} ({kinds}; first: "
                               f"{self._first_error}); stopping the sweep"})
                    break
        finally:
            await self.lag.stop()
            self.records.close()
            await self.client.aclose()

    async def _phase(self, idx: int, c: int, n: int | None, duration_s: float | None, warmup: bool,
                     rate: float | None = None) -> dict[str, Any]:
        """One level (or the warm-up): closed loop at concurrency c, or open loop at `rate` with n arrivals."""
        await self.client.preconnect(c if rate is None else (c or min(n or 1, PRECONNECT_OPEN_LOOP)))
        # The cyclic collector is paused during a level: its full collections stop every stream for 30 ms+
        # (measured), which would land in the ITL tail as client noise. httpx/aiohttp leave ~45 cyclic objects per
        # request, so the ticker collects once every GC_EVERY_REQUESTS requests to keep memory flat.
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        gc.disable()
        acc = LevelAccumulator(c, rate=rate, slo=self.w.slo)
        handled = LogHistogram()   # per request, the longest a chunk waited for the stream's code after arriving
        PHASE.largest = 0
        self._first_error = None
        in_flight: set[Stream] = set()
        issued = 0
        first_start_ns: int | None = None   # duration mode: the level's time starts with its first send
        latest_end_ns = 0
        started_at = utc_now_iso()
        self.lag.reset_level()
        cpu0 = time.process_time()
        wait0 = cpu_wait_s()
        cpu_mark, wall_mark = cpu0, time.perf_counter()

        def take() -> int | None:
            nonlocal issued
            if duration_s is not None and n is None:
                # The first wave always goes out whole, even when the duration is shorter than the start ramp:
                # otherwise the level would be labelled C without ever having had C requests in flight. After it,
                # a level stops once a request has ended past the deadline, so its measured time (first send to
                # last end) is never shorter than asked, however late this process was scheduled.
                if issued >= c and first_start_ns is not None and latest_end_ns >= first_start_ns + duration_s * 1e9:
                    return None
            elif n is not None and issued >= n:
                return None
            issued += 1
            return issued - 1

        def finished(s: Stream) -> None:
            nonlocal first_start_ns, latest_end_ns
            if first_start_ns is None or s.start_ns < first_start_ns:
                first_start_ns = s.start_ns
            latest_end_ns = max(latest_end_ns, s.end_ns)

        async def worker(k: int) -> None:
            # Workers start START_SPACING_S apart: sending C requests in one loop iteration would hold back the
            # first streams' chunks (~0.1 ms of client work per request start) and show up as client-made ITL.
            await asyncio.sleep(k * START_SPACING_S)
            while (i := take()) is not None:
                s = Stream()
                in_flight.add(s)
                try:
                    await self.client.send(self.factory.body(c, i), s)
                finally:
                    in_flight.discard(s)
                finished(s)
                handled.add(s.handled_max_ns / 1e6)
                if s.detail is not None:
                    s.detail = redact(s.detail, self._secrets)  # error bodies may echo the key
                finish(_record(c, i, s, t0_ns, warmup, self.factory.category(i)))
                if s.error == "refused":
                    await asyncio.sleep(REFUSED_BACKOFF_S)

        def finish(r: RequestRecord) -> None:
            if r.detail is not None and self._first_error is None:
                self._first_error = f"{r.error}: {r.detail}"
            self.records.write(r)
            acc.add(r)

        async def arrival(i: int, due_ns: int, slots: asyncio.Semaphore | None) -> None:
            # Lateness counts from the scheduled time, or from when a slot came free if the cap held this one back
            # (that wait is the cap doing its job: recorded as queued_ms).
            ready_ns, queued_ms = due_ns, None
            if slots is not None:
                if slots.locked():
                    await slots.acquire()
                    ready_ns = time.perf_counter_ns()
                    queued_ms = (ready_ns - due_ns) / 1e6
                else:
                    await slots.acquire()
            s = Stream()
            in_flight.add(s)
            try:
                await self.client.send(self.factory.body(f"r{rate:g}", i), s)
            finally:
                in_flight.discard(s)
                if slots is not None:
                    slots.release()
            handled.add(s.handled_max_ns / 1e6)
            if s.detail is not None:
                s.detail = redact(s.detail, self._secrets)
            r = _record(c, i, s, t0_ns, warmup, self.factory.category(i))
            finish(dataclasses.replace(r, rate=rate, late_ms=(s.start_ns - ready_ns) / 1e6,
                                       queued_ms=queued_ms))

        async def dispatcher(times: Iterable[float]) -> None:
            slots = asyncio.Semaphore(self.w.max_concurrency) if self.w.max_concurrency else None
            tasks: set[asyncio.Task[None]] = set()
            loop = asyncio.get_running_loop()
            try:
                for i, t in enumerate(times):
                    due_ns = t0_ns + int(t * 1e9)
                    # uvloop's timers have 1 ms steps and wake up to 1 ms early: sleep again for what is left, so
                    # no request goes out before its time (lateness is then never negative). A dispatcher behind
                    # its schedule still yields once per send, so the requests it started (and a stop) can run.
                    delay = (due_ns - time.perf_counter_ns()) / 1e9
                    if delay <= 0:
                        await asyncio.sleep(0)
                    while delay > 0:
                        await asyncio.sleep(delay)
                        delay = (due_ns - time.perf_counter_ns()) / 1e9
                    task = loop.create_task(arrival(i, due_ns, slots))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

        def progress() -> None:
            elapsed = (time.perf_counter_ns() - t0_ns) / 1e9
            tpc = acc.tokens_per_chunk or 1.0
            live_tokens = acc.output_tokens + tpc * sum(len(s.times) for s in in_flight)
            cpu_now = time.process_time()
            nonlocal cpu_mark, wall_mark
            wall = time.perf_counter()
            cpu_frac = (cpu_now - cpu_mark) / (wall - wall_mark) if wall > wall_mark else None
            cpu_mark, wall_mark = cpu_now, wall
            p = SweepProgress(
                concurrency=c, level_index=idx, level_count=len(self.w.levels), phase="warmup" if warmup else "level",
                elapsed_s=round(elapsed, 3), requests_done=acc.requests_ok + acc.requests_failed,
                requests_failed=acc.requests_failed, requests_target=n, duration_target_s=duration_s,
                in_flight=len(in_flight), output_tok_s=round(live_tokens / elapsed, 2) if elapsed > 0 else 0.0,
                ttft_p50_ms=acc.ttft_live.quantile(50), tokens_per_chunk=acc.tokens_per_chunk,
                loop_lag_ms=round(self.lag.take_window_max(), 3), cpu_fraction=None if cpu_frac is None else round(cpu_frac, 3),
                rate=rate,
            )
            self.records.flush()
            self.emit(p.to_dict())

        async def ticker() -> None:
            collected_at = 0
            while True:
                await asyncio.sleep(PROGRESS_INTERVAL_S)
                progress()
                done = acc.requests_ok + acc.requests_failed
                if done - collected_at >= GC_EVERY_REQUESTS:
                    gc.collect()
                    collected_at = done

        # The schedule is summed before the clock starts (in blocks, each followed by a yield, so a stop is obeyed
        # while a long level's schedule is drawn) and then drawn lazily as the level runs; a level's seed is the
        # workload's plus its index.
        times: Iterable[float] = ()
        if rate is not None:
            schedule = Schedule(n or 0, rate, self.w.burstiness, self.w.seed + idx)
            total = 0.0
            for part in schedule.gap_sums():
                total += part
                await asyncio.sleep(0)
            times = schedule.times(total)
            self._warn_far_first_arrival(schedule, total)
        tick = asyncio.get_running_loop().create_task(ticker())
        t0_ns = time.perf_counter_ns()
        try:
            if rate is not None:
                await dispatcher(times)
            else:
                await asyncio.gather(*(worker(k) for k in range(c)))
        finally:
            tick.cancel()
            await asyncio.gather(tick, return_exceptions=True)
            self.records.flush()
            gc.enable()
        progress()
        cpu_s = time.process_time() - cpu0
        wait1 = cpu_wait_s()
        first, last = acc.first_start_s, acc.last_end_s
        duration = (last - first) if first is not None and last is not None else 0.0
        waited = None if wait0 is None or wait1 is None else wait1 - wait0
        return acc.result(duration, cpu_s, self.lag.p99(), started_at, cpu_wait_s=waited,
                          handling_ms_p99=handled.quantile(99), burst_max=PHASE.largest).to_dict()


    def _warn_far_first_arrival(self, schedule: Schedule, total: float) -> None:
        """A level whose first request is due later than a request's deadline would sit silent: say so."""
        first = next(iter(schedule.times(total)), None)
        deadline = self.client.deadline_s
        if first is not None and first > deadline:
            self.emit({"type": "warning", "message": f"{schedule.rate:g} req/s: the first request is due {first:.0f} s "
                       f"after the level starts, later than the {deadline:g} s request deadline; nothing is sent "
                       "until then"})


def _record(c: int, i: int, s: Stream, t0_ns: int, warmup: bool, category: str | None) -> RequestRecord:
    times = s.times
    ok = s.error is None
    gaps = tuple((b - a) // 1000 for a, b in zip(times, times[1:])) if ok else ()
    return RequestRecord(
        concurrency=c, index=i, start_s=(s.start_ns - t0_ns) / 1e9, end_s=(s.end_ns - t0_ns) / 1e9, ok=ok,
        error=s.error, detail=s.detail, status=s.status,
        ttft_ms=(times[0] - s.start_ns) / 1e6 if ok and times else None,
        e2e_ms=(times[-1] - s.start_ns) / 1e6 if ok and times else None,
        chunks=len(times), output_tokens=s.output_tokens, prompt_tokens=s.prompt_tokens, itl_us=gaps, warmup=warmup,
        category=category,
    )


def cpu_wait_s() -> float | None:
    """Seconds this process's main thread has spent runnable but waiting for a CPU (Linux), else None.

    Loop lag with little CPU used and a large wait here means the box is overloaded, not the generator slow.
    """
    try:
        with open("/proc/self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None
