"""How long after the server logs its ready line does specmon call the run ready?

    python bench/ready_latency.py [--runs 10] [--shards 4] [--load-seconds 4] [--time-scale 0.05]

Each run launches `specmon sim` through the real RunManager (detached, tailed, probed). A thread polls the
log file every 2 ms and timestamps the moment the sim's ready line lands in it; the latency is the time of
the RunView that says "ready" (log ready line seen AND one real completion answered) minus that moment.
State and run dirs go to a temporary HOME, so the user's files are untouched. Prints each latency and the
distribution (min, median, p90, max) in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

READY_LINE = b"The server is fired up and ready to roll!"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _watch_file(path: Path, needle: bytes, seen: dict[str, float], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            if needle in path.read_bytes():
                seen["at"] = time.time()
                return
        except OSError:
            pass
        time.sleep(0.002)


async def one_run(args: argparse.Namespace) -> float:
    from specmon.model.config import Config, Profile
    from specmon.orchestration.runs.manager import RunManager

    port = _free_port()
    command = (sys.executable, "-m", "specmon.sim", "--port", str(port), "--time-scale", str(args.time_scale),
               "--shards", str(args.shards), "--load-seconds", str(args.load_seconds))
    manager = RunManager(Config(source="bench", profiles={"sim": Profile(name="sim", command=command, port=port)}))
    ready_at: dict[str, float] = {}
    done = asyncio.Event()

    def on_view(view) -> None:   # type: ignore[no-untyped-def]
        if view.state == "ready" and "at" not in ready_at:
            ready_at["at"] = time.time()
            done.set()
        elif not view.active:
            done.set()

    manager.subscribe(on_view)
    try:
        view = await manager.launch("sim")
        seen: dict[str, float] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=_watch_file, args=(Path(view.log_path), READY_LINE, seen, stop))
        watcher.start()
        await asyncio.wait_for(done.wait(), 120)
        stop.set()
        watcher.join()
        if "at" not in ready_at or "at" not in seen:
            raise SystemExit(f"run {view.run_id} did not become ready: {manager.view(view.run_id)}")
        return ready_at["at"] - seen["at"]
    finally:
        for record in manager.index.store.all():
            if not record.terminal:
                await manager.stop(record.run_id, force=True)
        await manager.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--load-seconds", type=float, default=4.0)
    parser.add_argument("--time-scale", type=float, default=0.05)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="specmon-bench-")
    os.environ.update(HOME=home, XDG_STATE_HOME=f"{home}/.local/state")
    latencies = []
    for i in range(args.runs):
        latency = asyncio.run(one_run(args))
        latencies.append(latency)
        print(f"run {i + 1:2d}: ready detected {latency * 1000:7.1f} ms after the ready line")
    ms = sorted(x * 1000 for x in latencies)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    print(f"\n{len(ms)} runs: min {ms[0]:.1f} ms, median {statistics.median(ms):.1f} ms, p90 {p90:.1f} ms, "
          f"max {ms[-1]:.1f} ms (box: {os.cpu_count()} cores, load avg {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
