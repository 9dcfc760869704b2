"""What specmon costs as the fleet grows: N ready runs, each /metrics read at 1 Hz, the GPU pane on 8 GPUs.

    python3 bench/fleet_cost.py [--runs 8,32,64,128] [--size 160x48] [--idle-s 15] [--keys 20]

For each N the TUI (in a real pty, as bench/tui_cost.py runs it) launches N runs of `bench/fleet_stub.py` (one
light stdlib process per run: SGLang's ready lines, /health, /metrics, one-token completions; N real `specmon sim`
processes would load this box more than the app does), all on host "local", `metrics_interval_s = 1`, with the
stand-in `tests/fixtures/gpu/fake-nvidia-smi` (8 GPUs) answering the GPU pane at 1 Hz. Once every run is READY it
prints one row per N:

- first frame: spawn -> the Servers pane's title on the terminal (s)
- ready: spawn -> every run READY by `specmon status --json` (s)
- idle CPU: the app's own CPU (schedstat, all threads) over --idle-s, % of one core
- key p50/p99: `j` (next card) written to the pty -> the first byte the app writes after it (ms), --keys presses
  0.5 s apart;
  a 1 Hz refresh that happens to fall in the window counts as the answer, so these are upper bounds only when the
  app is slower than that
- RSS of the app (MB), sockets it holds open (HTTP keep-alive to the servers, SSH connections on remote hosts)
- status --all: wall time of `specmon status --all` against the same state (s)
- metrics --all: wall time of `specmon metrics --all --json` (every run's /metrics read twice, 1 s apart) (s)

The box is shared (two cores): read the CPU figures with the load average printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tui_cost import CHILD, FAKE_SMI, Terminal, answers, cpu_seconds  # noqa: E402

STUB = Path(__file__).resolve().parent / "fleet_stub.py"


def server_ports(n: int) -> list[int]:
    """`n` free ports below the kernel's ephemeral range: a port picked inside it (bind to 0) can be taken by one
    of the app's own outgoing connections before its server binds it (2 of 64 launches were refused so)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports: list[int] = []
    for port in range(low - 1, 1024, -1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == n:
            return ports
    raise SystemExit(f"fewer than {n} free ports below {low}")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def sockets(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return count


def status(env: dict[str, str], config: Path) -> tuple[float, list[dict[str, object]]]:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "specmon", "--config", str(config), "status", "--all", "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.monotonic() - t0
    try:
        return elapsed, list(json.loads(out.stdout))
    except ValueError:
        raise SystemExit(f"status --all did not print JSON: {out.stderr.strip()[-400:]}") from None


def one(n: int, cols: int, rows: int, idle_s: float, keys: int) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix=f"fleet-{n}-"))
    ports = server_ports(n)
    profiles = [f'[profiles.r{i:03d}]\nport = {port}\nmetrics_interval_s = 1\n'
                f'command = [{json.dumps(sys.executable)}, {json.dumps(str(STUB))}, "--port", "{port}"]\n'
                for i, port in enumerate(ports)]
    config = work / "profiles.toml"
    config.write_text("\n".join(profiles))
    (work / "bin").mkdir()
    (work / "bin" / "nvidia-smi").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SMI}" "$@"\n')
    (work / "bin" / "nvidia-smi").chmod(0o755)
    env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor", FAKE_SMI_GPUS="8",
               XDG_STATE_HOME=str(work / "state"), XDG_CONFIG_HOME=str(work / "config"),
               PATH=f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}")
    term = Terminal([sys.executable, "-c", CHILD, str(config), str(work)], cols, rows, env)
    row: dict[str, float] = {"runs": n}
    try:
        row["first_frame_s"] = term.wait_for(b"Servers", 60)
        deadline = time.monotonic() + 60 + 2 * n
        while not all(answers(p) for p in ports):
            if time.monotonic() > deadline:
                raise SystemExit(f"N={n}: not every stub answered within {60 + 2 * n} s")
            term.pump(0.5)
        while True:
            _, runs = status(env, config)
            ready = sum(r.get("state") == "ready" for r in runs)
            if ready == n:
                break
            if time.monotonic() > deadline:
                states = sorted({str(r.get("state")) for r in runs})
                raise SystemExit(f"N={n}: only {ready} of {len(runs)} runs READY (states: {', '.join(states)}); "
                                 f"profiles and state in {work}")
            term.pump(1.0)
        row["ready_s"] = time.monotonic() - term.started
        term.pump(10)   # toasts gone, every serving view has read /metrics
        load0 = os.getloadavg()[0]
        cpu, _, waited = term.measure(idle_s)
        row["idle_cpu_pct"], row["waited_pct"], row["load"] = cpu, waited, load0
        latencies = []
        for _ in range(keys):
            term.pump(0.5)
            before = term.total
            t0 = time.monotonic()
            os.write(term.fd, b"j")
            while term.total == before and time.monotonic() - t0 < 5:
                term.pump(0.005)
            latencies.append(1000 * (time.monotonic() - t0))
        latencies.sort()
        row["key_p50_ms"] = statistics.median(latencies)
        row["key_p99_ms"] = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
        row["rss_mb"] = rss_mb(term.pid)
        row["sockets"] = sockets(term.pid)
        row["cpu_s_total"] = cpu_seconds(term.pid)
        row["status_all_s"], _ = status(env, config)
        t0 = time.monotonic()
        read = subprocess.run([sys.executable, "-m", "specmon", "--config", str(config), "metrics", "--all", "--json"],
                              capture_output=True, text=True, env=env, timeout=300)
        row["metrics_all_s"] = time.monotonic() - t0
        if read.returncode != 0 or len(read.stdout.splitlines()) != n:
            raise SystemExit(f"N={n}: metrics --all (exit {read.returncode}): {read.stderr.strip()[-400:]}")
    finally:
        _, runs = status(env, config)
        os.write(term.fd, b"q")   # the demo app stops the runs it launched
        term.pump(min(60, 5 + n / 4))
        for r in runs:            # whatever did not stop in time
            pid = r.get("pid")
            if isinstance(pid, int):
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
        if os.waitpid(term.pid, os.WNOHANG) == (0, 0):
            os.kill(term.pid, signal.SIGTERM)
            os.waitpid(term.pid, 0)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="8,32,64,128", help="comma-separated fleet sizes")
    parser.add_argument("--size", default="160x48")
    parser.add_argument("--idle-s", type=float, default=15.0)
    parser.add_argument("--keys", type=int, default=20)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cols, rows = (int(v) for v in args.size.split("x"))
    head = ("runs", "first_frame_s", "ready_s", "idle_cpu_pct", "key_p50_ms", "key_p99_ms", "rss_mb", "sockets",
            "status_all_s", "metrics_all_s", "waited_pct", "load")
    print(" | ".join(head))
    for n in (int(v) for v in args.runs.split(",")):
        row = one(n, cols, rows, args.idle_s, args.keys)
        print(" | ".join(f"{row[k]:.0f}" if k in ("runs", "sockets") else f"{row[k]:.2f}" for k in head), flush=True)
    print(f"terminal {cols}x{rows}; {os.cpu_count()} cores; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
