"""What the TUI costs the machine it runs on (usually a shared jump box), measured in a real pty.

    python3 bench/tui_cost.py [--size 160x48] [--idle-s 20] [--sweep-s 15] [--fake-gpus N] [--runs N]
                              [--metrics-interval S] [--no-sweep]

1. Time to first frame: from spawning the app until the pty has received its first full screen (the Servers
   pane's title). Target < 1.5 s.
2. Idle: the app with two ready runs (two `specmon sim` servers launched by the app itself; --runs N for N), each
   card's serving view reading its server's /metrics every --metrics-interval seconds (1), and the GPU pane
   showing the host's GPUs from the real GPU probe at 1 Hz (`nvidia-smi -lms 1000`). On a machine without GPUs, or
   with --fake-gpus N, the stand-in `tests/fixtures/gpu/fake-nvidia-smi` (first on PATH, FAKE_SMI_GPUS=N, default 8)
   answers instead: every GPU's memory, utilisation and power change every second, a busier board than idle GPUs.
   CPU of the app process (% of one core: the time the scheduler ran its threads, /proc/PID/task/*/schedstat,
   over the window's wall time) and bytes written to the terminal per second. Target <= 2 % of a core. Also how
   long the app waited for a CPU while it was ready to run, and the load average: how busy the box was. The
   stand-in nvidia-smi's own CPU is printed separately (a real one is not ours).
3. Live sweep: `s` + enter in the pty starts a sweep of both servers; the same figures while it runs. The load
   generator is a separate process and is not counted (its own cost is reported by bench/loadgen_overhead.py).

Prints one line per figure. The CPU figure is the app's own CPU time, so another user's load does not add to it,
but a busy box still moves it (caches, clock speed): run it on a quiet box, or say it was not.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

CHILD = r"""
import gc, signal, sys, time
from pathlib import Path
from specmon.model.config import load_config
from specmon.ui.app import SpecmonApp
from specmon.ui.bridge import EngineBridge

# The CPU its collections took (the collecting thread's), told in the file `gc_s` of the work folder on SIGUSR1.
collecting = [0.0, 0.0]
def timed(phase, info):
    if phase == "start":
        collecting[1] = time.thread_time()
    else:
        collecting[0] += time.thread_time() - collecting[1]
def tell(*_):
    told = Path(sys.argv[2]) / "gc_s.part"
    told.write_text(repr(collecting[0]))
    told.replace(told.with_name("gc_s"))
gc.callbacks.insert(0, timed)
signal.signal(signal.SIGUSR1, tell)

config = load_config(sys.argv[1])
engine = EngineBridge(config, autolaunch=list(config.profiles), results_dir=Path(sys.argv[2]))
app = SpecmonApp(config, engine=engine, demo=True, state_path=Path(sys.argv[2]) / "ui.json")
app.run()
"""
FAKE_SMI = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "gpu" / "fake-nvidia-smi"

def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _cpu_or_zero(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except OSError:
        return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    """Whether the server on 127.0.0.1:`port` answers /health with 200."""
    try:
        with socket.create_connection(("127.0.0.1", port), 1) as s:
            s.sendall(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return s.recv(64).split(b" ")[1:2] == [b"200"]
    except OSError:
        return False


def cpu_seconds(pid: int) -> float:
    """CPU time of `pid`, all its threads: what the scheduler ran them for (schedstat, in ns), not the clock ticks
    that /proc/PID/stat samples (at 100 Hz, a tick is charged to whichever task holds the CPU then: an app that
    wakes briefly many times a second is miscounted, worst on a busy box). Ticks where schedstat is missing."""
    return _schedstat(pid)[0] if _has_schedstat(pid) else _ticks(pid)


def cpu_wait_seconds(pid: int) -> float:
    """How long `pid`'s threads were ready to run but waited for a CPU (how busy the box was for it)."""
    return _schedstat(pid)[1] if _has_schedstat(pid) else 0.0


def _has_schedstat(pid: int) -> bool:
    return Path(f"/proc/{pid}/schedstat").exists()


def _schedstat(pid: int) -> tuple[float, float]:
    ran = waited = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:   # a thread that just ended
            continue
        ran, waited = ran + int(fields[0]), waited + int(fields[1])
    return ran / 1e9, waited / 1e9


def _ticks(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Terminal:
    """The app in a pty: counts what it writes, can type into it."""

    def __init__(self, argv: list[str], cols: int, rows: int, env: dict[str, str], cpus: set[int] | None = None) -> None:
        """`cpus`: the CPUs the app (and what it runs) may use; None: the bench's own."""
        self.started = time.monotonic()
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            if cpus is not None:
                os.sched_setaffinity(0, cpus)
            os.execvpe(argv[0], argv, env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.total = 0
        self.tail = b""

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    return
                self.total += len(data)
                self.tail = (self.tail + data)[-200_000:]

    def wait_for(self, needle: bytes, timeout: float) -> float:
        end = time.monotonic() + timeout
        while needle not in self.tail:
            if time.monotonic() > end:
                raise SystemExit(f"never saw {needle!r} within {timeout} s")
            self.pump(0.05)
        return time.monotonic() - self.started

    def measure(self, seconds: float) -> tuple[float, float, float]:
        """(% of one core, bytes/s, % of the time it waited for a CPU) of the app over `seconds`."""
        cpu0, wait0, bytes0, t0 = cpu_seconds(self.pid), cpu_wait_seconds(self.pid), self.total, time.monotonic()
        self.pump(seconds)
        elapsed = time.monotonic() - t0
        return (100 * (cpu_seconds(self.pid) - cpu0) / elapsed, (self.total - bytes0) / elapsed,
                100 * (cpu_wait_seconds(self.pid) - wait0) / elapsed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="160x48", help="at least 150 wide, so the GPU/env pane shows")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--sweep-s", type=float, default=15.0)
    parser.add_argument("--fake-gpus", type=int, default=0, metavar="N",
                        help="use the stand-in nvidia-smi with N GPUs even where a real one exists")
    parser.add_argument("--runs", type=int, default=2, metavar="N", help="ready sim runs (alternately with EAGLE-3)")
    parser.add_argument("--metrics-interval", type=float, default=1.0, metavar="S",
                        help="each READY card reads its server's /metrics this often (metrics_interval_s)")
    parser.add_argument("--no-sweep", action="store_true", help="measure the idle app only")
    args = parser.parse_args()
    # Killed (a timeout), still quit through `q` below so the demo stops the servers it launched.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cols, rows = (int(v) for v in args.size.split("x"))
    work = Path(tempfile.mkdtemp(prefix="tui-cost-"))
    profiles = []
    ports = []
    for i in range(args.runs):
        name, spec = ("baseline", "none") if i % 2 == 0 else ("eagle3", "eagle3")
        name += "" if i < 2 else str(i // 2 + 1)
        port = free_port()
        ports.append(port)
        # The running interpreter's specmon (a host where `specmon` is not on PATH, or is another install).
        profiles.append(f'[profiles.{name}]\nport = {port}\nmetrics_interval_s = {args.metrics_interval}\n'
                        f'command = [{json.dumps(sys.executable)}, "-m", "specmon", '
                        f'"sim", "--port", "{port}", "--shards", "8", "--load-seconds", "3", "--spec", "{spec}"]\n')
    profiles.append("[sweep]\nlevels = [1, 4, 16, 64, 128]\nrequests_per_level = 200\nwarmup_requests = 0\n")
    (work / "profiles.toml").write_text("\n".join(profiles))
    env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor",
               XDG_STATE_HOME=str(work / "state"), XDG_CONFIG_HOME=str(work / "config"))
    real = shutil.which("nvidia-smi") is not None and not args.fake_gpus
    if not real:
        (work / "bin").mkdir()
        # Through the running interpreter: a copied checkout may have lost the fake's exec bit.
        (work / "bin" / "nvidia-smi").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SMI}" "$@"\n')
        (work / "bin" / "nvidia-smi").chmod(0o755)
        env.update(PATH=f"{work / 'bin'}{os.pathsep}{env['PATH']}", FAKE_SMI_GPUS=str(args.fake_gpus or 8))
    term = Terminal([sys.executable, "-c", CHILD, str(work / "profiles.toml"), str(work)], cols, rows, env)
    try:
        first = term.wait_for(b"Servers", 30)
        print(f"time to first frame: {first:.2f} s (target < 1.5 s)")
        term.wait_for(b"READY", 90)
        for port in ports:   # every server answers (the app marks them READY within a probe or two)
            while not answers(port):
                term.pump(0.5)
        term.pump(15)  # every run ready, its /metrics read, toasts gone
        # The pane's own words are not scraped: a partial repaint may put colour codes between "8" and "GPUs".
        gpus = (subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, env=env).stdout.count("GPU ")
                if real else args.fake_gpus or 8)
        smi = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).find(b"nvidia-smi") >= 0]
        smi0 = sum(_cpu_or_zero(int(p.name)) for p in smi)
        load0 = os.getloadavg()[0]
        cpu, rate, waited = term.measure(args.idle_s)
        smi_cpu = 100 * (sum(_cpu_or_zero(int(p.name)) for p in smi) - smi0) / args.idle_s
        print(f"idle, {args.runs} ready runs (/metrics every {args.metrics_interval:g} s), GPU pane polling {gpus} "
              f"{'real' if real else 'stand-in'} GPUs at 1 Hz: "
              f"{cpu:.2f} % of a core, "
              f"{rate / 1024:.2f} KiB/s to the terminal (target <= 2 %); nvidia-smi itself {smi_cpu:.2f} %; "
              f"the app waited for a CPU {waited:.2f} % of the time, load average {load0:.2f} -> "
              f"{os.getloadavg()[0]:.2f}")
        if not args.no_sweep:
            os.write(term.fd, b"s")
            term.pump(1.0)
            os.write(term.fd, b"\r")
            term.wait_for(b"C=", 30)
            cpu, rate, waited = term.measure(args.sweep_s)
            print(f"live sweep: {cpu:.2f} % of a core, {rate / 1024:.2f} KiB/s to the terminal; "
                  f"waited for a CPU {waited:.2f} % of the time")
        os.write(term.fd, b"q")
        term.pump(10)
    finally:
        # Also when a step above failed: `q` stops the demo's servers (a SIGTERM alone would leave them running).
        running = os.waitpid(term.pid, os.WNOHANG) == (0, 0)
        if running:
            os.write(term.fd, b"q")
            term.pump(10)
            running = os.waitpid(term.pid, os.WNOHANG) == (0, 0)
        if running:
            os.kill(term.pid, signal.SIGTERM)
            os.waitpid(term.pid, 0)
    print(f"terminal {cols}x{rows}; load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
