"""Peak memory of the load generator over a long sweep: records stream to disk, statistics stay constant-size.

Runs the generator's sweep loop (SweepRunner, the code the child process runs) for REQUESTS short requests against
the local fixture server, writing the records file like a real sweep, and prints the peak RSS (ru_maxrss) of the
generator process, sampled RSS along the way, and the records file size. Target: under 300 MB for 100,000 requests.
Run: python bench/loadgen_memory.py [--requests N] [--concurrency C] [--output-len N]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from loadgen_overhead import free_port  # noqa: E402  (same directory)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


async def sweep(url: str, requests: int, concurrency: int, output_len: int, records: Path) -> None:
    from specmon.loadgen.protocol import Message
    from specmon.loadgen.runner import SweepRunner
    from specmon.loadgen.workload import Workload
    from specmon.model.sweeps.results import LevelResult

    # Several levels, as a real sweep would have (C/4, C/2, 3C/4, C: levels must increase), adding up to `requests`.
    per = requests // 4
    wl = Workload(levels=tuple(max(1, concurrency * k // 4) for k in range(1, 5)), requests_per_level=per, warmup_requests=0, input_len=16,
                  output_len=output_len, timeout_s=60)
    t0 = time.monotonic()

    def emit(msg: Message) -> None:
        if isinstance(msg, LevelResult):
            print(f"  level done: {msg.requests_ok} ok, {msg.requests_failed} failed, "
                  f"{msg.request_throughput:.0f} req/s, RSS now {rss_mb():.0f} MB, t={time.monotonic() - t0:.0f} s", flush=True)

    await SweepRunner(url, "fixture-model", wl, emit, records_path=str(records)).run()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--output-len", type=int, default=16)
    args = ap.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "sse_server.py"), "--port", str(port)],
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    try:
        import uvloop

        with tempfile.TemporaryDirectory() as d:
            records = Path(d) / "records.jsonl"
            print(f"start RSS {rss_mb():.0f} MB; {args.requests} requests at C={args.concurrency}, "
                  f"{args.output_len} tokens each", flush=True)
            uvloop.run(sweep(f"http://127.0.0.1:{port}", args.requests, args.concurrency, args.output_len, records))
            size = records.stat().st_size / 2**20
            lines = sum(1 for _ in records.open())
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS {peak:.0f} MB (target < 300 MB); records file {size:.0f} MB, {lines} lines")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
