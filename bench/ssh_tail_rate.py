"""Lines per second of remote log tailing through a real sshd on 127.0.0.1, against the local transport.

Writes a log of N lines (about 120 bytes each, like a busy server log) and times LogTailer.follow() from byte 0 to
the end, over LocalTransport and over SSHTransport to the loopback sshd (both with the same tail -c +N -F
command). Needs root and openssh-server (like the tests).

    python3 bench/ssh_tail_rate.py [--lines 500000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests" / "support"))

from sshd_support import bench_sshd  # noqa: E402

from specmon.sources.local import LocalTransport  # noqa: E402
from specmon.sources.ssh import SSHTransport  # noqa: E402
from specmon.sources.tailer import LogTailer  # noqa: E402
from specmon.sources.transport import Transport  # noqa: E402


async def rate(transport: Transport, log: Path) -> tuple[float, int]:
    size = log.stat().st_size
    tailer = LogTailer(transport, str(log), max_backlog=size + 1)
    lines = 0
    t0 = time.perf_counter()
    async with contextlib.aclosing(tailer.follow()) as batches:
        async for batch in batches:
            lines += batch.data.count(b"\n")
            if tailer.offset >= size:
                break
    return time.perf_counter() - t0, lines


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lines", type=int, default=500_000)
    args = ap.parse_args()
    with bench_sshd() as (sshd, tmp):
        log = tmp / "server.log"
        line = "[2026-11-30 12:00:00 TP0] Decode batch. #running-req: 64, #token: 81234, token usage: 0.41, gen throughput (token/s): 2950.12 #{:08d}\n"
        with open(log, "w") as fh:
            for i in range(args.lines):
                fh.write(line.format(i))
        mb = log.stat().st_size / 1e6
        for name, transport in (("local", LocalTransport()), ("ssh gpu1", SSHTransport("gpu1", sshd.settings())),
                                ("ssh gpu2 (ProxyJump)", SSHTransport("gpu2", sshd.settings()))):
            await transport.run("true")          # connect first: time the tail, not the login
            seconds, lines = await rate(transport, log)
            await transport.close()
            assert lines == args.lines, f"{name}: {lines} of {args.lines} lines"
            print(f"{name:22s} {lines / seconds:12,.0f} lines/s  {mb / seconds:7.1f} MB/s  "
                  f"({lines} lines, {mb:.1f} MB in {seconds:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
