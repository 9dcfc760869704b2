"""A sweep sent by several generator processes (`--processes N`), each on its own event loop and CPU.

One Python process reads, stamps and parses every chunk of every stream and sends every request on one core: at
25-50 us a chunk and 0.3-1 ms a request, C=1024 streams of 20 ms tokens (51k chunks/s) take most of a core, and an
open loop of 1,000 req/s more than one core of the H200 host (its sends then fall behind the schedule; chunk times
stay right, as ArrivalWatch cuts a read where its bytes came in). So the sweep is split over N processes ("parts"),
and this coordinator, the generator process the parent started, runs them and speaks for them: the parent sees one
generator, one records file and one result per level.

- Part k of N (`python -m specmon.loadgen --part k/N`, the same spec line) runs its share of a closed-loop level's
  C workers and sends their requests (request i is worker i mod C's), or sends arrivals k, k+N, k+2N, ... of an
  open-loop level's schedule (drawn whole in every part from the same seed, so the union is exactly the unsharded
  one) with its share of the concurrency cap.
- Levels start together: each part says `Ready(m)` when its connections are open and its schedule drawn (m counts
  levels from 1, the warm-up included), and once every part is ready the coordinator sends each `Start(m, t0_ns)`
  on its stdin: one time on the machine's monotonic clock, shared by all processes, so every record's times count
  from the same instant (the messages: specmon.loadgen.protocol).
- Each part writes its request records on its stdout (`RequestRecord` lines), then after a level its `Tally` (the
  level's accumulator of its requests) and its level message. The coordinator copies the record lines into one
  records file as they came, without reading them (decoding and folding a record cost it 20-25 us, a tenth of a
  core at 4,000 req/s, taken from the CPUs its parts send from: they then waited 55-83 ms a second for a CPU);
  it merges the tallies into the level's figures, and when every part has sent its level message it emits the
  level: CPU time and CPU wait summed over the parts, loop lag, handling delay and burst the worst part's, and
  "client bound" judged per process. Its progress summaries sum the parts' counts and take their live TTFT p50 and
  tokens per chunk as the mean weighted by successful requests (the parts send interleaved shares of one
  schedule, so each part's figure estimates the level's).
- The coordinator stops the sweep where one process would (no request succeeded at a level), says a part's fatal
  error as its own, and treats a part that exits before "done" as fatal. Stopping it (SIGTERM, stdin closed)
  closes every part's stdin; a part that has not exited EXIT_GRACE_S later is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable, Iterable

from specmon.errors import UserError
from specmon.loadgen.protocol import ChildSpec, Done, Emit, Fatal, ProtocolError, Ready, Start, Stopped, Tally, Warn, decode, encode
from specmon.loadgen.runner import RecordsWriter, no_success_warning
from specmon.model.config.types import MAX_PROCESSES
from specmon.model.sweeps.results import ClientHealth, LevelResult
from specmon.model.sweeps.sweepstats import LevelAccumulator, RequestRecord, SweepProgress

AUTO_MOST = 4                 # --processes not given: one per AUTO_CPUS CPUs this process may use, at most this
AUTO_CPUS = 4
# The open-loop rate one generator process is asked for at most by default. Measured (bench/loadgen_overhead.py
# --vs-reference, one process on one core of the 16-CPU H200 host, 16 tokens a request 10 ms apart): 1,000 req/s
# held within 1 % with lateness p99 4-8 ms, 2,000 req/s fell behind by seconds (issue 34); 750 keeps every process
# below the rate where its lateness tail grows.
OPEN_LOOP_RATE_PER_PROCESS = 750.0
START_AHEAD_NS = 20_000_000   # a level starts this long after the last part is ready: the start line's way there
EXIT_GRACE_S = 3.0
PROGRESS_EVERY_S = 0.25
LINE_MAX = 64 << 20           # one line from a part (a record of a long stream's gaps is the longest)
READ_BYTES = 1 << 20          # a read from a part's stdout takes what is there, up to this (its pipe holds 1 MiB)
RECORD_START = b'{"concurrency":'   # a request record's line (protocol.record_line), copied to the file unread


class ShardedSweep:
    """Runs `spec.workload.processes` parts of the sweep in `spec` and emits what one generator would."""

    def __init__(self, spec: ChildSpec, emit: Emit) -> None:
        self._spec = dataclasses.replace(spec, records_path=None)
        self._w = spec.workload
        self._n = spec.workload.processes
        self._emit = emit
        self._records = RecordsWriter(spec.records_path, lambda message: emit(Warn(message)))
        self._phases = self._phase_list()
        self._phase = 0                     # the level (1-based, warm-up included) the parts are in
        self._ready: set[int] = set()
        self._levels: dict[int, LevelResult] = {}
        self._progress: dict[int, SweepProgress] = {}
        self._acc: LevelAccumulator | None = None
        self._first_error: str | None = None
        self._warned: set[str] = set()
        self._progress_at = 0.0
        self._done: set[int] = set()
        self._finished = asyncio.get_running_loop().create_future()
        self._procs: list[asyncio.subprocess.Process] = []

    def _phase_list(self) -> list[tuple[int, float | None, int | None]]:
        """(concurrency, rate, requests) of every level the parts run, in order, the warm-up first (the parts send
        no level message for it: its records go to the file, nothing else)."""
        w = self._w
        phases: list[tuple[int, float | None, int | None]] = []
        if w.warmup_requests:
            phases.append((w.warmup_requests, None, w.warmup_requests))
        if w.open_loop:
            phases += [(w.max_concurrency or 0, rate, w.arrivals_for(rate)) for rate in w.rates]
        else:
            phases += [(c, None, w.requests_for(c)) for c in w.levels]
        return phases

    async def run(self) -> None:
        readers: list[asyncio.Task[None]] = []
        try:
            for k in range(self._n):
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "specmon.loadgen", "--part", f"{k}/{self._n}",
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=LINE_MAX)
                self._procs.append(proc)
                assert proc.stdin is not None
                proc.stdin.write(encode(self._spec))
                readers.append(asyncio.get_running_loop().create_task(self._read(k, proc)))
            await self._finished
        finally:
            for r in readers:
                r.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            await self._stop_parts()
            self._records.close()

    async def _stop_parts(self) -> None:
        for proc in self._procs:
            if proc.stdin is not None:
                proc.stdin.close()   # end of stdin: the part stops its sweep and exits
        waits = [asyncio.ensure_future(proc.wait()) for proc in self._procs]
        if waits:
            await asyncio.wait(waits, timeout=EXIT_GRACE_S)
            for proc in self._procs:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            await asyncio.gather(*waits, return_exceptions=True)

    def _end(self, error: str | None = None) -> None:
        if not self._finished.done():
            if error is None:
                self._finished.set_result(None)
            else:
                self._finished.set_exception(UserError(error))

    async def _read(self, k: int, proc: asyncio.subprocess.Process) -> None:
        """Part k's lines, read as whole reads (a read a line cost as much as the rest of a record's handling)."""
        assert proc.stdout is not None
        pending = bytearray()
        while chunk := await proc.stdout.read(READ_BYTES):
            pending += chunk
            end = chunk.rfind(b"\n")
            if end < 0:
                if len(pending) > LINE_MAX:
                    self._end(f"{self._part(k)} wrote a line longer than {LINE_MAX >> 20} MiB")
                    return
                continue
            end += len(pending) - len(chunk)
            lines = bytes(pending[:end]).split(b"\n")
            del pending[:end + 1]
            for line in lines:
                self._line(k, line)
                if self._finished.done():
                    return
        if pending:   # a last line without its newline, as a part killed in mid-write leaves: read, not copied
            self._line(k, bytes(pending), copy_records=False)
        if k not in self._done and not self._finished.done():
            code = await proc.wait()
            self._end(f"{self._part(k)} exited (code {code}) before its sweep was done")

    def _line(self, k: int, line: bytes, copy_records: bool = True) -> None:
        """One line of part k: a record line is copied to the records file unread (with `copy_records`), any
        other line is read as its message."""
        if copy_records and line.startswith(RECORD_START):
            self._records.write_line(line)
            return
        try:
            msg = decode(line)
        except ProtocolError as exc:
            self._end(f"{self._part(k)} wrote {exc}")
            return
        if isinstance(msg, RequestRecord):   # a record written some other way (its fields in another order)
            self._records.write_line(line)
        elif isinstance(msg, Tally):
            if self._acc is not None:
                self._acc.merge(msg.acc)
            if self._first_error is None:
                self._first_error = msg.first_error
        elif isinstance(msg, Ready):
            self._on_ready(k, msg.level)
        elif isinstance(msg, SweepProgress):
            self._progress[k] = msg
            self._emit_progress()
        elif isinstance(msg, LevelResult):
            self._levels[k] = msg
            if len(self._levels) == self._n:
                self._level_done()
        elif isinstance(msg, Warn):
            if msg.message not in self._warned:   # every part sees the same level-wide conditions
                self._warned.add(msg.message)
                self._emit(msg)
        elif isinstance(msg, Done):
            self._done.add(k)
            if len(self._done) == self._n:
                self._end()
        elif isinstance(msg, Fatal):
            self._end(msg.message)
        elif isinstance(msg, Stopped):
            self._end(f"{self._part(k)} stopped on its own")
        else:
            self._end(f"{self._part(k)} wrote a {type(msg).__name__} message, which only a coordinator sends")

    def _part(self, k: int) -> str:
        return f"load generator part {k + 1} of {self._n}"

    def _on_ready(self, k: int, phase: int) -> None:
        self._ready.add(k)
        if len(self._ready) < self._n:
            return
        self._ready.clear()
        self._phase = phase
        c, rate, _ = self._phases[phase - 1]
        self._acc = LevelAccumulator(c, rate=rate, slo=self._w.slo)
        self._levels.clear()
        self._progress.clear()
        self._first_error = None
        line = encode(Start(phase, time.perf_counter_ns() + START_AHEAD_NS))
        for proc in self._procs:
            assert proc.stdin is not None
            proc.stdin.write(line)

    def _emit_progress(self) -> None:
        now = time.monotonic()
        if now - self._progress_at < PROGRESS_EVERY_S or self._acc is None:
            return
        self._progress_at = now
        self._records.flush()
        parts = list(self._progress.values())
        first = parts[0]
        _, _, count = self._phases[self._phase - 1]
        fractions = [p.cpu_fraction for p in parts if p.cpu_fraction is not None]
        lags = [p.loop_lag_ms for p in parts if p.loop_lag_ms is not None]
        lates = [p.backlog_late_ms for p in parts if p.backlog_late_ms is not None]

        def total(values: list[int | None]) -> int | None:
            return None if None in values else sum(v for v in values if v is not None)

        merged = SweepProgress(
            concurrency=first.concurrency, level_index=first.level_index, level_count=first.level_count,
            phase=first.phase, elapsed_s=max(p.elapsed_s for p in parts),
            requests_done=sum(p.requests_done for p in parts), requests_failed=sum(p.requests_failed for p in parts),
            requests_target=count if first.requests_target is not None else None,
            duration_target_s=first.duration_target_s, in_flight=sum(p.in_flight for p in parts),
            output_tok_s=round(sum(p.output_tok_s for p in parts), 2),
            ttft_p50_ms=weighted_mean((p.ttft_p50_ms, p.requests_done - p.requests_failed) for p in parts),
            tokens_per_chunk=weighted_mean((p.tokens_per_chunk, p.requests_done - p.requests_failed) for p in parts),
            loop_lag_ms=max(lags) if lags else None,
            cpu_fraction=max(fractions) if fractions else None, rate=first.rate,
            sent=total([p.sent for p in parts]), backlog=total([p.backlog for p in parts]),
            backlog_late_ms=max(lates) if lates else None,
        )
        self._emit(merged)

    def _level_done(self) -> None:
        self._records.flush()
        c, rate, _ = self._phases[self._phase - 1]
        acc, levels = self._acc, list(self._levels.values())
        self._levels.clear()
        assert acc is not None   # made when the level started
        clients = [lv.client for lv in levels]

        def worst(value: Callable[[ClientHealth], float | None]) -> float | None:
            values = [v for v in map(value, clients) if v is not None]
            return max(values) if values else None

        waits = [cl.cpu_wait_s for cl in clients]
        starts = [lv.started_at for lv in levels if lv.started_at is not None]
        burst = worst(lambda cl: cl.burst_max)
        first, last = acc.first_start_s, acc.last_end_s
        level = acc.result(
            (last - first) if first is not None and last is not None else 0.0, sum(cl.cpu_s for cl in clients),
            worst(lambda cl: cl.loop_lag_ms_p99), min(starts, default=None),
            cpu_wait_s=None if None in waits else sum(w for w in waits if w is not None),
            handling_ms_p99=worst(lambda cl: cl.handling_ms_p99), burst_max=None if burst is None else int(burst),
            processes=self._n,
        )
        self._emit(level)
        if level.requests_ok == 0:
            self._emit(no_success_warning(level, c, rate, self._first_error))
            self._end()


def weighted_mean(pairs: Iterable[tuple[float | None, int]]) -> float | None:
    """The mean of the values weighted by their counts, those without a value (or count) left out; None if none."""
    known = [(value, n) for value, n in pairs if value is not None and n > 0]
    total = sum(n for _, n in known)
    return sum(value * n for value, n in known) / total if total else None


def auto_processes(rates: Iterable[float] = ()) -> int:
    """How many generator processes a sweep gets when nobody says: one per AUTO_CPUS CPUs specmon may use, 1 to
    AUTO_MOST (1 on a 2-core box, 4 on the 16-CPU H200 host), and for an open loop at least enough that no process
    is asked for more than OPEN_LOOP_RATE_PER_PROCESS requests a second at the sweep's highest rate, one per CPU at
    most. A shared jump box keeps three quarters of its CPUs unless the rate asked for needs them."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        cpus = os.cpu_count() or 1
    default = max(1, min(AUTO_MOST, cpus // AUTO_CPUS))
    top = max(rates, default=0.0)
    return max(default, min(math.ceil(top / OPEN_LOOP_RATE_PER_PROCESS), cpus, MAX_PROCESSES))


def part_of(text: str) -> tuple[int, int]:
    """`--part k/N` -> (k, N)."""
    k, _, n = text.partition("/")
    part = (int(k), int(n))
    if not 0 <= part[0] < part[1]:
        raise ValueError(f"--part {text}: need 0 <= k < N")
    return part
