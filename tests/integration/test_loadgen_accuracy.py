"""Accuracy: the generator must not measure itself. A server emitting one token every interval must read as such
at C=256 as at C=16, and the tokens counted must equal what the server reported in usage, exactly.

The server writes every stream's token in one batch per interval, as a real server's decode step does, so the
generator takes each burst of C chunks at once and timestamps them one after another: a stream's gap can be off by
up to C x the generator's CPU per chunk. That cost is a property of the CPU (33 us on an H200 host's core, 64 us on
a slow shared one), so at C=256 a burst takes 8-16 ms, most of a 20 ms pace. The test therefore starts at 20 ms and,
when the tail grew there, retries at a pace computed from the CPU per chunk it measured, at which one burst takes at
most BURST_SHARE of the pace. The claim tested is then: at a pace where the generator's own burst handling is
small, its ITL tail does not grow with concurrency.

Timing on a shared box: the generator reports how long the OS kept it waiting for a CPU (Linux schedstat), and the
server reports its own p99 gap between chunks. A run in which either level's generator waited more than
STARVED_FRACTION of its duration, or the server itself wrote late (its p99 gap more than 10 % over the pace),
measured the machine, not the client; the test then tries again (up to ATTEMPTS) and skips, naming the figures,
only if every attempt was disturbed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from burst_server import gap_errors
from paths import SUPPORT

from specmon.loadgen.workload import Workload
from specmon.model.sweeps.results import LevelResult
from specmon.orchestration.measure.sweep import SweepSpec, run_sweep

pytestmark = pytest.mark.slow

ATTEMPTS = 4
CPUS = sorted(os.sched_getaffinity(0))
STARVED_FRACTION = 0.05
SERVER_LATE = 1.10   # the server's own p99 write gap more than 10 % over the pace: the server was late
FIRST_PACE_MS = 20.0
REQUEST_S = 2.0   # each request streams for about this long, whatever the pace
BURST_SHARE = 0.1   # a pace at which handling one burst of C=256 chunks takes at most this share of it
HIGH_C = 256
POOL_DEFAULT = 100   # aiohttp's connection limit when none is set


@contextmanager
def paced_server(port: int, pace_ms: float) -> Iterator[str]:
    # Its own process (uvloop), so the pytest process's event loop cannot delay the tokens.
    pin = ["--cpu", str(min(CPUS))] if len(CPUS) >= 2 else []
    proc = subprocess.Popen([sys.executable, str(SUPPORT / "sse_server.py"), "--port", str(port),
                             "--interval-s", str(pace_ms / 1000), *pin], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def disturbed(lv: LevelResult, server_gap_p99_ms: float | None, pace_ms: float) -> bool:
    client_starved = lv.client.cpu_wait_s is not None and lv.client.cpu_wait_s > STARVED_FRACTION * lv.duration_s
    return client_starved or (server_gap_p99_ms is not None and server_gap_p99_ms > SERVER_LATE * pace_ms)


def carried_pace_ms(lv: LevelResult) -> float:
    """The pace (ms, rounded up to 5) at which one burst of HIGH_C chunks takes BURST_SHARE of it, from the CPU per
    chunk this level measured."""
    per_chunk_s = lv.client.cpu_s / max(1, lv.client.chunks)
    return 5.0 * math.ceil(HIGH_C * per_chunk_s / BURST_SHARE * 1000 / 5.0)


def server_stats(url: str) -> dict[str, Any]:
    """The server's totals, and its own p99 write gap since the last call (the call resets that record)."""
    with urllib.request.urlopen(url + "/stats") as resp:
        return dict(json.load(resp))


async def level(url: str, out: Path, c: int, requests: int, output_len: int) -> tuple[LevelResult, float | None]:
    """One level as its own sweep, and the server's own p99 gap during it (ms); checks its token count against
    the server's usage totals on the way."""
    before = server_stats(url)["completion_tokens"]   # also resets the server's gap record
    wl = Workload(levels=(c,), requests_per_level=requests, warmup_requests=0, input_len=8, output_len=output_len)
    result = await run_sweep(SweepSpec(url=url, workload=wl, out_path=out))
    (lv,) = result.levels
    records = [json.loads(x) for x in Path(result.meta.records or "").read_text().splitlines()]
    # Exactly what the server put in usage, request by request.
    after = server_stats(url)
    assert sum(r["output_tokens"] for r in records) == after["completion_tokens"] - before
    assert lv.output_tokens == sum(r["output_tokens"] for r in records) == requests * output_len
    assert lv.requests_failed == 0
    return lv, after["write_gap_ms_p99"]


@pytest.mark.timeout(240)
async def test_itl_tail_does_not_grow_with_concurrency_and_tokens_match_usage(free_port: int, tmp_path: Path) -> None:
    tried: list[tuple[float, LevelResult, LevelResult, float | None, float | None]] = []
    pace_ms = FIRST_PACE_MS
    # The server has the first CPU; the generator (inheriting this process's affinity) gets the others.
    if len(CPUS) >= 2:
        os.sched_setaffinity(0, CPUS[1:])
    try:
        for attempt in range(ATTEMPTS):
            output_len = round(REQUEST_S * 1000 / pace_ms)
            with paced_server(free_port, pace_ms) as url:
                # Two waves of requests per level: at 20 ms, 50,000 gaps at C=256, so one stall of the box touches
                # under 1 % of them.
                lo, lo_server = await level(url, tmp_path / f"lo{attempt}.jsonl", 16, 32, output_len)
                hi, hi_server = await level(url, tmp_path / f"hi{attempt}.jsonl", HIGH_C, 2 * HIGH_C, output_len)
                # The connection pool must not cap C=256 (aiohttp's default of 100 once did, whatever the load).
                # Fewer than 256 at once but more than 100 is a box too slow to start 256 streams in one request.
                running = server_stats(url)["max_running"]
            assert running > POOL_DEFAULT, f"{running} streams at once at C={HIGH_C}: the connection pool capped it"
            tried.append((pace_ms, lo, hi, lo_server, hi_server))
            carried = carried_pace_ms(hi)
            if disturbed(lo, lo_server, pace_ms) or disturbed(hi, hi_server, pace_ms) or running < HIGH_C:
                pace_ms = max(pace_ms, carried)   # less work for a busy box next time
                continue
            assert lo.itl_ms.p50 == pytest.approx(pace_ms, rel=0.1)
            if hi.itl_ms.p99 == pytest.approx(lo.itl_ms.p99, rel=0.15):
                return
            # The generator's tail grew: it measured its own burst handling. That must be its CPU's limit: at a pace
            # where a burst is a small share, the tail must hold.
            assert carried > pace_ms, (f"the ITL tail grew at a {pace_ms:g} ms pace the generator should carry "
                                       f"({carried:g} ms would do)", lo.itl_ms, hi.itl_ms, hi.client)
            pace_ms = carried
    finally:
        os.sched_setaffinity(0, CPUS)
    waits = "; ".join(f"at {p:g} ms: C=16 waited {a.client.cpu_wait_s:.2f} of {a.duration_s:.2f} s (server gap p99 "
                      f"{sa} ms), C={HIGH_C} {b.client.cpu_wait_s:.2f} of {b.duration_s:.2f} s (server gap p99 {sb} ms, "
                      f"client-bound {b.client.bound})" for p, a, b, sa, sb in tried)
    pytest.skip(f"machine overloaded in all {ATTEMPTS} attempts (generator waiting for a CPU, or server late: {waits})")


STAMP_TOLERANCE_MS = 0.5


def _q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[round(p / 100 * (len(xs) - 1))]


# Issue 22's target: with per-pass stamps the stamp error p99 at C=256 was 1.7-3.4 ms on undisturbed runs. With looks
# at the sockets at every step and, after a gap, the kernel's receive time, bench/loadgen_overhead.py measures 0.08-0.13
# ms (this box and the H200 host). A busy box does not excuse a miss: the truth is a window around each send, which a
# preempted server only widens, and stamps taken from the kernel hold while the generator waits for a CPU. Measured
# with two whole suites running beside it on 2 cores (18 attempts, every one 'disturbed' by the old rule: generator
# waiting 7-28 % of the level, server bursts up to 18 ms late): 17 held (p99 0.08-0.16 ms), one missed (1.29 ms). So
# every attempt is judged; a miss retries only on a disturbed box, and all attempts missing fails the test. Until
# then this test skipped every disturbed attempt, so on CI's busy box it never judged anything.
@pytest.mark.timeout(240)
async def test_chunk_times_are_arrival_times_in_bursts_of_256(free_port: int, tmp_path: Path) -> None:
    """Chunks stamped on arrival: a server writes every stream's next chunk in one burst every 20 ms, in a new random
    order each time (a stream first in one burst is last in the next), and notes each write's time. Stamped as each
    stream's code got to its chunk, a gap was off by up to the handling of the whole burst (256 streams' work);
    stamped as the bytes come off the socket, each measured gap is within STAMP_TOLERANCE_MS of the true one."""
    pin = ["--cpu", str(min(CPUS))] if len(CPUS) >= 2 else []
    if len(CPUS) >= 2:
        os.sched_setaffinity(0, CPUS[1:])
    tried = []
    try:
        for attempt in range(ATTEMPTS):
            proc = subprocess.Popen([sys.executable, str(SUPPORT / "burst_server.py"), "--port", str(free_port), *pin],
                                    stdout=subprocess.PIPE, text=True)
            try:
                assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
                url = f"http://127.0.0.1:{free_port}"
                wl = Workload(levels=(HIGH_C,), requests_per_level=HIGH_C, warmup_requests=0, dataset="random",
                              input_len=8, output_len=50)
                result = await run_sweep(SweepSpec(url=url, workload=wl, out_path=tmp_path / f"b{attempt}.jsonl"))
                with urllib.request.urlopen(url + "/schedule") as resp:
                    schedule = json.load(resp)
            finally:
                proc.kill()
                proc.wait()
            (lv,) = result.levels
            records = [json.loads(x) for x in Path(result.meta.records or "").read_text().splitlines()]
            measured, true, errors = gap_errors(records, schedule["writes"])
            assert len(errors) == sum(len(r["itl_us"]) for r in records) == HIGH_C * 49   # every gap of every stream
            figures = (f"|error| p50 {_q(errors, 50):.3f} p99 {_q(errors, 99):.3f} ms; ITL p50 {_q(measured, 50):.2f} "
                       f"(true {_q(true, 50):.2f}), p99 {_q(measured, 99):.2f} (true {_q(true, 99):.2f}) ms; "
                       f"server late p99 {schedule['late_ms_p99']:.2f} ms, generator waited {lv.client.cpu_wait_s} s "
                       f"of {lv.duration_s:.1f}")
            tried.append(figures)
            if _q(errors, 99) <= STAMP_TOLERANCE_MS and abs(_q(measured, 99) - _q(true, 99)) <= STAMP_TOLERANCE_MS:
                return
            # A miss on a box that starved the generator or the server gets another attempt; on a quiet box it fails.
            assert disturbed(lv, schedule["late_ms_p99"] + FIRST_PACE_MS, FIRST_PACE_MS), figures
    finally:
        os.sched_setaffinity(0, CPUS)
    pytest.fail(f"stamps off by more than {STAMP_TOLERANCE_MS} ms in all {ATTEMPTS} attempts: " + " | ".join(tried))
