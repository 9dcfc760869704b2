"""Time from a restored SSH link to the log resuming, through a real sshd on 127.0.0.1 and a TCP relay.

A writer on the "host" appends one numbered line every 10 ms; specmon's LogTailer follows it over an SSHTransport
(keepalive 1 s x 3) through a relay. Each trial breaks the link, then restores it and times how long until the
next new line reaches the tailer:
  reset      the relay resets the connection (RST) and keeps accepting: the link is "restored" at once;
  blackhole  the relay silently drops everything until specmon has noticed (keepalive) and 2 s more, then resets
             the stale connections and forwards again: restored = the moment forwarding resumes. This includes
             waiting out the reconnect backoff (capped at 2 s here; 30 s by default).
At the end it checks that every numbered line arrived exactly once. Needs root and openssh-server (like the tests).

    python3 bench/ssh_reconnect.py [--trials 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests" / "support"))

from sshd_support import Relay, Sshd, bench_sshd  # noqa: E402

from specmon.sources.ssh import SSHTransport  # noqa: E402
from specmon.sources.tailer import LogTailer  # noqa: E402


async def trial_set(sshd: Sshd, how: str, trials: int, work: Path) -> list[float]:
    relay = await Relay(sshd.port).start()
    sshd.add_alias(f"bench-{how}", relay.port)
    transport = SSHTransport(f"bench-{how}", sshd.settings(keepalive_s=1.0, connect_timeout_s=3.0),
                             backoff_cap_s=2.0)
    log = work / f"{how}.log"
    log.write_bytes(b"")
    writer = subprocess.Popen(["/bin/sh", "-c", f'i=0; while :; do i=$((i+1)); echo "seq $i" >> {log}; sleep 0.01; done'])
    tailer = LogTailer(transport, str(log), retry_s=0.1)
    got: list[bytes] = []
    arrived = asyncio.Event()

    async def follow() -> None:
        async with contextlib.aclosing(tailer.follow()) as batches:
            async for batch in batches:
                if batch.data:
                    got.extend(batch.data.splitlines())
                    arrived.set()

    task = asyncio.create_task(follow())
    delays: list[float] = []
    try:
        await asyncio.sleep(2)
        for _ in range(trials):
            if how == "reset":
                relay.reset()                     # the relay accepts again at once: restored now
                restored = time.monotonic()
                while transport.link.up:
                    await asyncio.sleep(0.001)
            else:
                relay.blackhole()
                while transport.link.up:          # wait until specmon has noticed
                    await asyncio.sleep(0.01)
                await asyncio.sleep(2)            # and stays dark a while longer
            arrived.clear()
            if how == "blackhole":
                relay.restore()
                restored = time.monotonic()
            await asyncio.wait_for(arrived.wait(), 60)
            delays.append(time.monotonic() - restored)
            await asyncio.sleep(1.5)
    finally:
        writer.kill()
        writer.wait()
        await asyncio.sleep(0.5)
        with contextlib.suppress(asyncio.TimeoutError):
            size = log.stat().st_size
            await asyncio.wait_for(_until(lambda: tailer.offset >= size), 20)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await transport.close()
        await relay.close()
    expected = [line for line in log.read_bytes().splitlines()][: len(got)]
    assert got == expected, "lines lost or repeated"
    numbers = [int(line.split()[1]) for line in got]
    assert numbers == list(range(1, len(numbers) + 1)), "sequence numbers lost or repeated"
    print(f"{how}: {len(got)} lines, none lost or repeated")
    return delays


async def _until(pred) -> None:   # type: ignore[no-untyped-def]
    while not pred():
        await asyncio.sleep(0.02)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    with bench_sshd() as (sshd, tmp):
        for how in ("reset", "blackhole"):
            delays = await trial_set(sshd, how, args.trials, tmp)
            print(f"{how}: link restored -> log resumed: median {statistics.median(delays) * 1000:.0f} ms, "
                  f"max {max(delays) * 1000:.0f} ms over {len(delays)} trials "
                  f"({', '.join(f'{d * 1000:.0f}' for d in delays)} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
