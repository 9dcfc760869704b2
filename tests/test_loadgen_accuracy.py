"""Accuracy: the generator must not measure itself. A server emitting one token every 20 ms must read as such
at C=256 as at C=16, and the tokens counted must equal what the server reported in usage, exactly.

Timing on a shared box: the generator reports how long the OS kept it waiting for a CPU (Linux schedstat), and the
server reports its own p99 gap between chunks. A run in which either level's generator waited more than
STARVED_FRACTION of its duration, or the server itself wrote late (its p99 gap over SERVER_LATE_MS), measured the
machine, not the client; the test then tries again (up to ATTEMPTS) and skips, naming the figures, only if every
attempt was disturbed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from specmon.loadgen.workload import Workload
from specmon.model.results import LevelResult
from specmon.orchestration.sweep import SweepSpec, run_sweep

TESTS = Path(__file__).parent
ATTEMPTS = 3
CPUS = sorted(os.sched_getaffinity(0))
STARVED_FRACTION = 0.05
SERVER_LATE_MS = 22.0   # 10 % over the 20 ms pace, measured by the server as it writes
OUTPUT_LEN = 100   # tokens per request: 2 s at 20 ms per token
POOL_DEFAULT = 100   # aiohttp's connection limit when none is set


@pytest.fixture
def paced_server(free_port: int) -> Iterator[str]:
    # Its own process (uvloop), so the pytest process's event loop cannot delay the tokens.
    pin = ["--cpu", str(min(CPUS))] if len(CPUS) >= 2 else []
    proc = subprocess.Popen([sys.executable, str(TESTS / "sse_server.py"), "--port", str(free_port), "--interval-s", "0.02",
                             *pin], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield f"http://127.0.0.1:{free_port}"
    proc.kill()
    proc.wait()


def disturbed(lv: LevelResult, server_gap_p99_ms: float | None) -> bool:
    client_starved = lv.client.cpu_wait_s is not None and lv.client.cpu_wait_s > STARVED_FRACTION * lv.duration_s
    return client_starved or (server_gap_p99_ms is not None and server_gap_p99_ms > SERVER_LATE_MS)


def server_stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url + "/stats") as resp:
        return dict(json.load(resp))


def served_tokens(url: str) -> int:
    return server_stats(url)["completion_tokens"]


async def level(url: str, out: Path, c: int, requests: int) -> tuple[LevelResult, float | None]:
    """One level as its own sweep, and the server's own p99 gap during it (ms); checks its token count against
    the server's usage totals on the way."""
    before = served_tokens(url)   # also resets the server's gap record
    wl = Workload(levels=(c,), requests_per_level=requests, warmup_requests=0, input_len=8, output_len=OUTPUT_LEN)
    result = await run_sweep(SweepSpec(url=url, workload=wl, out_path=out))
    (lv,) = result.levels
    records = [json.loads(x) for x in Path(result.meta.records or "").read_text().splitlines()]
    # Exactly what the server put in usage, request by request.
    assert sum(r["output_tokens"] for r in records) == served_tokens(url) - before
    assert lv.output_tokens == sum(r["output_tokens"] for r in records) == requests * OUTPUT_LEN
    assert lv.requests_failed == 0
    return lv, server_stats(url)["write_gap_ms_p99"]


@pytest.mark.timeout(150)
async def test_itl_tail_does_not_grow_with_concurrency_and_tokens_match_usage(paced_server: str, tmp_path: Path) -> None:
    tried: list[tuple[LevelResult, LevelResult, float | None, float | None]] = []
    # The server has the first CPU; the generator (inheriting this process's affinity) gets the others.
    if len(CPUS) >= 2:
        os.sched_setaffinity(0, CPUS[1:])
    try:
        for attempt in range(ATTEMPTS):
            # Two waves of 2 s requests per level (about 8 s per attempt): 50,000 gaps at C=256, so one stall of the
            # box touches under 1 % of them.
            lo, lo_server = await level(paced_server, tmp_path / f"lo{attempt}.jsonl", 16, 32)
            hi, hi_server = await level(paced_server, tmp_path / f"hi{attempt}.jsonl", 256, 512)
            # The connection pool must not cap C=256 (aiohttp's default of 100 once did, whatever the load). Fewer
            # than 256 at once but more than 100 is a box too slow to start 256 streams within one 2 s request.
            running = server_stats(paced_server)["max_running"]
            assert running > POOL_DEFAULT, f"{running} streams at once at C=256: the connection pool capped it"
            tried.append((lo, hi, lo_server, hi_server))
            if disturbed(lo, lo_server) or disturbed(hi, hi_server) or running < 256:
                continue
            assert lo.itl_ms.p50 == pytest.approx(20.0, rel=0.1)
            assert hi.itl_ms.p99 == pytest.approx(lo.itl_ms.p99, rel=0.15), (lo.itl_ms, hi.itl_ms, hi.client)
            return
    finally:
        os.sched_setaffinity(0, CPUS)
    waits = "; ".join(f"C=16 waited {a.client.cpu_wait_s:.2f} of {a.duration_s:.2f} s (server gap p99 {sa} ms), "
                      f"C=256 {b.client.cpu_wait_s:.2f} of {b.duration_s:.2f} s (server gap p99 {sb} ms)"
                      for a, b, sa, sb in tried)
    pytest.skip(f"machine overloaded in all {ATTEMPTS} attempts (generator waiting for a CPU, or server late: {waits})")
