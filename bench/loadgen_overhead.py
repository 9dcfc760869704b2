"""CPU cost of the load generator per streamed chunk, beside a plain default-httpx client.

A minimal streaming server (tests/sse_server.py, aiohttp + uvloop) runs pinned to CPU 0; each client run is a
separate process pinned to CPU 1, so `process_time()` is the client's own cost. Two cases:

  (a) back to back: the server writes 256 tokens per stream as fast as it can; C = 1, 64, 256, 1024.
      Target: specmon <= 10 us per chunk at C=1024.
  (b) paced: C=256 streams, one token every 25 ms each (~10k tokens/s offered), so chunks arrive one by one.
      Target: specmon <= 40 us per chunk.
  (c) open loop, paced alike: Poisson arrivals at R = 10000 / output_len requests/s (~10k tokens/s offered, ~250
      streams in flight), 2 x 256 arrivals; the same figure for specmon's open-loop generator (dispatcher, schedule,
      lateness records), printed next to (b), with its send lateness p50/p99.

"specmon" is the real generator (SweepRunner: httpx + aiohttp transport, byte-level SSE, records written to a
file, statistics, loop-lag ticker). "plain httpx" is httpx.AsyncClient with its default transport (pool raised to
C so it is not capped at 100), iterating lines and json-decoding every data line, as typical clients do.
Both run on uvloop. Run: python bench/loadgen_overhead.py [--quick] [--only-paced]

CPU per chunk depends on how many chunks one socket read finds: on an idle box the client keeps up and reads them
one by one (~10 us each at C=1024, mostly aiohttp's per-read protocol work); when other work delays it, reads batch
several chunks and the figure drops (5-7 us measured). The lag and CPU-wait columns say which case a run was.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "sse_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- client runs (in a child process on CPU 1)

async def run_specmon(url: str, c: float, n: int, output_len: int, open_loop: bool = False) -> dict[str, float]:
    """specmon's generator at concurrency c, or (open_loop) at request rate c."""
    from specmon.loadgen.runner import SweepRunner
    from specmon.loadgen.workload import Workload

    levels: list[dict] = []
    if open_loop:
        wl = Workload(levels=(1,), rates=(c,), requests_per_level=n, warmup_requests=0, output_len=output_len,
                      input_len=16, timeout_s=300)
    else:
        wl = Workload(levels=(int(c),), requests_per_level=n, warmup_requests=0, output_len=output_len, input_len=16,
                      timeout_s=300)
    with tempfile.TemporaryDirectory() as d:
        runner = SweepRunner(url, "fixture-model", wl, lambda m: levels.append(m["level"]) if m["type"] == "level" else None,
                             records_path=str(Path(d) / "records.jsonl"))
        await runner.run()
    lv = levels[0]
    return {"cpu_s": lv["client"]["cpu_s"], "chunks": lv["client"]["chunks"], "wall_s": lv["duration_s"],
            "ok": lv["requests_ok"], "itl_p50_ms": lv["itl_ms"]["p50"], "itl_p99_ms": lv["itl_ms"]["p99"],
            "lag_p99_ms": lv["client"]["loop_lag_ms_p99"], "cpu_wait_s": lv["client"]["cpu_wait_s"],
            "late_p50_ms": (lv.get("send_late_ms") or {}).get("p50"), "late_p99_ms": (lv.get("send_late_ms") or {}).get("p99"),
            "achieved_rate": lv.get("achieved_rate")}


async def run_plain_httpx(url: str, c: int, n: int, output_len: int) -> dict[str, float]:
    import httpx

    body = {"model": "fixture-model", "messages": [{"role": "user", "content": "hi " * 16}], "max_tokens": output_len,
            "stream": True, "stream_options": {"include_usage": True}}
    gaps: list[float] = []
    chunks = ok = 0
    issued = 0
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=c, max_keepalive_connections=c),
                                 timeout=300) as client:
        async def worker() -> None:
            nonlocal chunks, ok, issued
            while issued < n:
                issued += 1
                last = None
                async with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
                    async for line in resp.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        obj = json.loads(line[6:])
                        if obj.get("choices") and obj["choices"][0]["delta"].get("content"):
                            t = time.perf_counter()
                            chunks += 1
                            if last is not None:
                                gaps.append(t - last)
                            last = t
                ok += 1

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(c)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    gaps.sort()
    return {"cpu_s": cpu, "chunks": chunks, "wall_s": wall, "ok": ok,
            "itl_p50_ms": gaps[len(gaps) // 2] * 1000 if gaps else None,
            "itl_p99_ms": gaps[int(len(gaps) * 0.99)] * 1000 if gaps else None}


def child_main(kind: str, url: str, c: float, n: int, output_len: int) -> None:
    os.sched_setaffinity(0, {1})
    import uvloop

    if kind == "specmon-open":
        result = uvloop.run(run_specmon(url, c, n, output_len, open_loop=True))
    elif kind == "specmon":
        result = uvloop.run(run_specmon(url, c, n, output_len))
    else:
        result = uvloop.run(run_plain_httpx(url, int(c), n, output_len))
    print(json.dumps(result))


# ---------------------------------------------------------------- orchestration

def start_server(interval_s: float) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), "--cpu", "0", "--interval-s", str(interval_s)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc, f"http://127.0.0.1:{port}"


def measure(kind: str, url: str, c: float, n: int, output_len: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", kind, url, str(c), str(n), str(output_len)],
                         capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(case: str, kind: str, c: float | str, r: dict[str, float]) -> str:
    us = r["cpu_s"] * 1e6 / r["chunks"] if r["chunks"] else float("nan")
    p50 = "-" if r["itl_p50_ms"] is None else f"{r['itl_p50_ms']:.1f}"
    p99 = "-" if r["itl_p99_ms"] is None else f"{r['itl_p99_ms']:.1f}"
    lag = "-" if r.get("lag_p99_ms") is None else f"{r['lag_p99_ms']:.1f}"
    wait = "-" if r.get("cpu_wait_s") is None else f"{r['cpu_wait_s']:.2f}"
    late = "" if r.get("late_p99_ms") is None else (
        f"  late p50/p99 {r['late_p50_ms']:.2f}/{r['late_p99_ms']:.2f} ms, sent {r['achieved_rate']:.1f} req/s")
    return (f"{case:<13} {kind:<12} {c!s:>7} {int(r['chunks']):>9} {r['cpu_s']:>8.2f} {us:>9.1f} "
            f"{r['chunks'] / r['wall_s']:>10.0f} {r['wall_s']:>7.1f} {p50:>8} {p99:>8} {lag:>8} {wait:>9}{late}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests per point")
    ap.add_argument("--only-paced", action="store_true", help="only the paced closed-loop and open-loop cases")
    ap.add_argument("--child", nargs=5, metavar=("KIND", "URL", "C", "N", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, url, c, n, out = args.child
        child_main(kind, url, float(c), int(n), int(out))
        return
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("needs 2 CPUs (server on CPU 0, client on CPU 1)")
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (other work on the box inflates CPU figures)")
    print(f"{'case':<13} {'client':<12} {'C':>7} {'chunks':>9} {'cpu_s':>8} {'us/chunk':>9} {'chunks/s':>10} "
          f"{'wall_s':>7} {'ITL p50':>8} {'ITL p99':>8} {'lag p99':>8} {'cpu wait':>9}")
    print("(lag p99: generator event-loop lag, ms; cpu wait: seconds the generator was runnable but had no CPU)")
    server, url = start_server(0.0)
    try:
        for c in () if args.only_paced else (1, 64, 256, 1024):
            n = max(c, 8 if args.quick else 32)
            for kind in ("specmon", "plain-httpx"):
                print(row("back-to-back", kind, c, measure(kind, url, c, n, 256)), flush=True)
    finally:
        server.kill()
        server.wait()
    server, url = start_server(0.025)
    output_len = 80 if args.quick else 120
    try:
        for kind in ("specmon", "plain-httpx"):
            print(row("paced 25ms", kind, 256, measure(kind, url, 256, 256, output_len)), flush=True)
        # The open loop at the same offered load: 10k tokens/s in requests of output_len tokens.
        rate = round(10000 / output_len, 2)
        print(row("open 25ms", "specmon-open", f"{rate:g}/s", measure("specmon-open", url, rate, 512, output_len)),
              flush=True)
    finally:
        server.kill()
        server.wait()
    print("(open 25ms: C is the offered request rate; the generator's CPU per chunk is comparable with paced 25ms)")
    print("targets: specmon <= 10 us/chunk back-to-back at C=1024; <= 40 us/chunk paced at C=256 (closed or open loop)")


if __name__ == "__main__":
    main()
