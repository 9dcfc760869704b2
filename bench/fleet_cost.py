"""What specmon costs as the fleet grows: N ready runs, each /metrics read at 1 Hz, the GPU pane on 8 GPUs.

    python3 bench/fleet_cost.py [--runs 8,32,64,128] [--hosts 16] [--slurm-runs K] [--size 160x48] [--idle-s 15]
                                [--keys 50] [--py-spy DIR] [--real-body] [--apart]

For each N the TUI (in a real pty, as bench/tui_cost.py runs it) launches N runs of `bench/fleet_stub.py` (one
light stdlib process per run: SGLang's ready lines, /health, /metrics, one-token completions; N real `specmon sim`
processes would load this box more than the app does; with --real-body each stub's /metrics also carries the rest
of a real SGLang capture, REAL_BODY: 10 kB of histograms and help lines, as a real server's answer is tens of kB,
where the stub's own is 1.5 kB), `metrics_interval_s = 1`, with the stand-in
`tests/fixtures/gpu/fake-nvidia-smi` (8 GPUs) answering the GPU pane at 1 Hz. Where the runs are placed:

- Slurm: the last K runs (--slurm-runs, default N/8, at least one; 0: none) are Slurm jobs. A real single-node
  cluster (munged, slurmctld, slurmd) is started for each N as tests/support/slurm_support.py starts the Slurm
  tests' one, its partitions letting K jobs share the node's two cores (OverSubscribe=FORCE:K). Each of these
  runs is a Slurm profile on host "local" (this machine is the login node: the app runs sbatch, scontrol, squeue
  and srun here with SLURM_CONF naming the cluster, as for any Slurm profile); its job runs the stub with the
  run's port on the node `localhost`, and the app reaches the stub at the address Slurm gives that node.
- the other N-K runs are dealt in turn over --hosts H hosts: "local" and H-1 loopback SSH hosts h01.. (each its
  own real sshd, started as tests/support/sshd_support.py starts the SSH tests' one, with the stand-in
  nvidia-smi first on its PATH).

Once every run is READY it prints one row per N (every column counts all N runs, the Slurm ones included):

- first frame: spawn -> the Servers pane's title on the terminal (s)
- ready: spawn -> every run READY by `specmon status --json` (s)
- idle CPU: the app's own CPU (schedstat, all threads) over --idle-s, % of one core; child_cpu_pct: the CPU of
  the processes the app ran and reaped over the same window (the Slurm clients, nvidia-smi, ...), which the app's
  own figure leaves out; slurm_rpcs: the requests slurmctld answered over the window (sdiag's counts by message
  type: each scontrol or squeue the app runs is one or more); slurm_cpu_pct: slurmctld's and slurmd's CPU then
  (what watching K jobs costs the cluster's daemons); idle_out_b_s: the bytes the app wrote to its terminal per
  second over the window (what it drew while nothing was asked of it: its frames)
- apart (--apart): the app, and what it runs, on the box's last CPU, every stand-in (the sshds and what runs under
  them, the stubs, the Slurm daemons and jobs, this bench) on the others. Real hosts are other machines; sharing
  two cores with 16 sshds and N stubs, which all answer in the same instant every second, the app waits for a CPU
  longer than it runs (waited_pct), and a key press that lands then waits too. Without --apart all share every CPU.
- gc_pct: the part of the idle CPU that went to the app's garbage collections (its collecting thread's CPU in them),
  % of one core. The whole heap is walked only every few minutes (`specmon.ui.heap`): a window that holds one of
  those walks shows it (150-250 ms at 64 runs), one that does not leaves it out
- key p50/p99: `j` (next card) written to the pty -> the first byte the app writes after it (ms), --keys presses
  0.5 s apart;
  a 1 Hz refresh that happens to fall in the window counts as the answer, so these are upper bounds only when the
  app is slower than that
- RSS of the app (MB), sockets it holds open (HTTP keep-alive to the servers, SSH connections on remote hosts)
- ssh_conns: the app's TCP connections to the sshds (the target: one per SSH host); ssh_chans: SSH channels open
  on them, counted on the sshd side: forwarded TCP connections from the sshds to the servers (direct-tcpip) plus
  processes running under the sshds' sessions (session channels: log tails, GPU pane, the metrics relay, ...)
- scrapes: /metrics reads the servers answered over the idle window; cpu_ms_per_scrape: the app's CPU over that
  window divided by them (everything the app did while idle, charged to the reads that drive it)
- status --all: wall time of `specmon status --all` against the same state (s); status_down_s: the same once one
  SSH host is made silent (its sshd replaced by a socket that accepts and never answers; connect_timeout_s = 3):
  the target is one connect timeout, paid in parallel with the rest, not once per run
- metrics --all: wall time of `specmon metrics --all --json` (every run's /metrics read twice, 1 s apart) (s);
  metrics_failed: the runs whose reads failed (the first one's error goes to stderr)

The box is shared (two cores): read the CPU figures with the load average printed beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from slurm_support import SlurmCluster, slurm_available, slurm_cluster  # noqa: E402
from sshd_support import Sshd, established, process_tree, socket_inodes, sshd_available  # noqa: E402
from tui_cost import CHILD, FAKE_SMI, Terminal, answers, cpu_seconds  # noqa: E402

STUB = Path(__file__).resolve().parent / "fleet_stub.py"
REAL_BODY = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "metrics" / "sglang-llama31-8b-production-metrics.prom"
CONNECT_TIMEOUT_S = 3


def server_ports(n: int) -> list[int]:
    """`n` free ports below the kernel's ephemeral range: a port picked inside it (bind to 0) can be taken by one
    of the app's own outgoing connections before its server binds it (2 of 64 launches were refused so). The scan
    starts at a random point: two benches on one box (two branches compared) took the same ports, and runs of
    either failed with "port already in use"."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports: list[int] = []
    for port in range(low - 1 - random.randrange(0, max(1, low - 1025 - 4 * n)), 1024, -1):
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


def ssh_counts(app: int, sshds: list[Sshd], remote_ports: set[int]) -> tuple[int, int]:
    """(the app's connections to the sshds, SSH channels open on them), see the module's docstring."""
    mine = socket_inodes(app)
    sshd_ports = {s.port for s in sshds}
    tcp = established()
    conns = sum(remote in sshd_ports and inode in mine for _, remote, inode in tcp)
    tree = process_tree()
    sessions = 0
    forwarding: set[str] = set()
    for server in sshds:
        processes, sockets = server.sessions(tree)
        sessions += len(processes)
        forwarding |= sockets
    # A server's connection from a session's process (the metrics relay's) is no channel: its session is counted.
    forwarded = sum(remote in remote_ports and inode in forwarding for _, remote, inode in tcp)
    return conns, forwarded + sessions


def silence(server: Sshd) -> socket.socket:
    """Stop `server` and hold its port with a socket that accepts TCP and never says a word (a hung host)."""
    server.stop()
    hole = socket.socket()
    hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    hole.bind(("127.0.0.1", server.port))
    hole.listen(64)
    return hole


def start_hosts(count: int, root: Path, bin_dir: Path) -> tuple[list[Sshd], Path]:
    """`count` loopback sshds, one per host alias h01.., and one ssh_config + known_hosts naming them all."""
    env = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "FAKE_SMI_GPUS": "8"}
    root.mkdir(parents=True, exist_ok=True)   # also with no SSH host (--hosts 1)
    servers = [Sshd.start(root / f"h{i:02d}", set_env=env) for i in range(1, count + 1)]
    (root / "ssh_config").write_text("\n".join(s.alias(f"h{i:02d}") for i, s in enumerate(servers, 1)))
    (root / "known_hosts").write_text("".join(f"[127.0.0.1]:{s.port} {s.host_key_line}\n" for s in servers))
    table = (f'[ssh]\nconfig = "{root / "ssh_config"}"\nknown_hosts = "{root / "known_hosts"}"\n'
             f"connect_timeout_s = {CONNECT_TIMEOUT_S}\nkeepalive_s = 5\n")
    (root / "ssh.toml").write_text(table)
    return servers, root / "ssh.toml"


@contextlib.contextmanager
def slurm_for(jobs: int) -> Iterator[SlurmCluster | None]:
    """A test cluster whose one node runs `jobs` jobs at once (None for none), gone with every job on exit."""
    if jobs == 0:
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="fleet-slurm-"))
    try:
        with slurm_cluster(root, jobs_per_core=jobs) as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


def slurm_daemons_cpu(cluster: SlurmCluster) -> float:
    """CPU seconds so far of the cluster's daemons (slurmctld, slurmd, each job's slurmstepd, munged)."""
    tree = process_tree()
    stack, total = list(tree.get(cluster.process.pid, [])), 0.0
    while stack:
        pid = stack.pop()
        stack += tree.get(pid, [])
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() in ("slurmctld", "slurmd", "slurmstepd", "munged"):
                total += cpu_seconds(pid)
    return total


def reaped_cpu(pid: int) -> float:
    """CPU seconds of the children `pid` has run and reaped so far (cutime + cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def profile_table(name: str, host: str, port: int, work: Path, stub_args: tuple[str, ...]) -> str:
    """The profile of one stub run on `host` ("slurm": a Slurm job submitted on this machine)."""
    extra = "".join(f", {json.dumps(arg)}" for arg in stub_args)
    table = (f'[profiles.{name}]\nhost = "{"local" if host == "slurm" else host}"\nport = {port}\n'
             f'metrics_interval_s = 1\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(STUB))}, '
             f'"--port", "{port}", "--count-to", {json.dumps(str(work / "scrapes" / str(port)))}{extra}]\n')
    return table + (f'\n[profiles.{name}.slurm]\ntime = "120"\n' if host == "slurm" else "")


def stubs(work: Path) -> list[int]:
    """The stub servers of this fleet still running (each is told its count file under `work`)."""
    mark = str(work / "scrapes").encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def scrapes(work: Path) -> int:
    """/metrics reads the stubs have answered so far (each stub counts them in its file)."""
    return sum(int(p.read_text() or 0) for p in work.glob("scrapes/*"))


def status(env: dict[str, str], config: Path) -> tuple[float, list[dict[str, object]]]:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "specmon", "--config", str(config), "status", "--all", "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.monotonic() - t0
    try:
        return elapsed, list(json.loads(out.stdout))
    except ValueError:
        raise SystemExit(f"status --all did not print JSON: {out.stderr.strip()[-400:]}") from None


def one(n: int, hosts: int, slurm_runs: int, cols: int, rows: int, idle_s: float, keys: int,
        py_spy: Path | None = None, stub_args: tuple[str, ...] = (), app_cpus: set[int] | None = None) -> dict[str, float]:
    with slurm_for(slurm_runs) as cluster:
        return fleet(n, hosts, cluster, slurm_runs, cols, rows, idle_s, keys, py_spy, stub_args, app_cpus)


def fleet(n: int, hosts: int, cluster: SlurmCluster | None, slurm_runs: int, cols: int, rows: int, idle_s: float,
          keys: int, py_spy: Path | None, stub_args: tuple[str, ...], app_cpus: set[int] | None) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix=f"fleet-{n}-"))
    (work / "bin").mkdir()
    (work / "bin" / "nvidia-smi").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SMI}" "$@"\n')
    (work / "bin" / "nvidia-smi").chmod(0o755)
    (work / "scrapes").mkdir()
    sshds, ssh_table = start_hosts(hosts - 1, work / "ssh", work / "bin")
    ports = server_ports(n)
    names = ["local", *(f"h{i:02d}" for i in range(1, hosts))]
    placed = [names[i % hosts] for i in range(n - slurm_runs)] + ["slurm"] * slurm_runs
    remote_ports = {port for port, host in zip(ports, placed, strict=True) if host not in ("local", "slurm")}
    profiles = [ssh_table.read_text()] + [profile_table(f"r{i:03d}", host, port, work, stub_args)
                                          for i, (port, host) in enumerate(zip(ports, placed, strict=True))]
    config = work / "profiles.toml"
    config.write_text("\n".join(profiles))
    env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor", FAKE_SMI_GPUS="8",
               XDG_STATE_HOME=str(work / "state"), XDG_CONFIG_HOME=str(work / "config"),
               PATH=f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}",
               **({"SLURM_CONF": str(cluster.conf)} if cluster is not None else {}))
    term = Terminal([sys.executable, "-c", CHILD, str(config), str(work)], cols, rows, env, app_cpus)
    row: dict[str, float] = {"runs": n, "hosts": hosts, "slurm": slurm_runs}
    runs: list[dict[str, object]] = []
    holes: list[socket.socket] = []
    try:
        row["first_frame_s"] = term.wait_for(b"Servers", 60)
        deadline = time.monotonic() + 60 + 3 * n
        while not all(answers(p) for p in ports):
            if time.monotonic() > deadline:
                raise SystemExit(f"N={n}: not every stub answered within {60 + 3 * n} s")
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
        if app_cpus is not None:   # the stubs the app started on host "local" are stand-ins too
            for pid in stubs(work):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(pid, os.sched_getaffinity(0))
        term.pump(10)   # toasts gone, every serving view has read /metrics
        load0 = os.getloadavg()[0]
        scraped0, reaped0 = scrapes(work), reaped_cpu(term.pid)
        rpcs0, daemons0 = (sum(cluster.rpcs().values()), slurm_daemons_cpu(cluster)) if cluster else (0, 0.0)
        gc0 = collector_seconds(term, work)
        cpu, out_b_s, waited = term.measure(idle_s)
        row["gc_pct"] = 100 * (collector_seconds(term, work) - gc0) / idle_s
        row["scrapes"] = scrapes(work) - scraped0
        row["child_cpu_pct"] = 100 * (reaped_cpu(term.pid) - reaped0) / idle_s
        row["slurm_rpcs"] = sum(cluster.rpcs().values()) - rpcs0 if cluster else 0
        row["slurm_cpu_pct"] = 100 * (slurm_daemons_cpu(cluster) - daemons0) / idle_s if cluster else 0.0
        row["cpu_ms_per_scrape"] = 10 * cpu * idle_s / max(1, row["scrapes"])
        row["idle_cpu_pct"], row["idle_out_b_s"], row["waited_pct"], row["load"] = cpu, out_b_s, waited, load0
        row["ssh_conns"], row["ssh_chans"] = ssh_counts(term.pid, sshds, remote_ports)
        if py_spy is not None:   # after the measured window: the sampler's own cost is not in it
            profile(term, py_spy / f"fleet-{n}.txt", idle_s)
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
        answers_read = [json.loads(line) for line in read.stdout.splitlines()]
        if read.returncode not in (0, 1) or len(answers_read) != n:
            raise SystemExit(f"N={n}: metrics --all (exit {read.returncode}): {read.stderr.strip()[-400:]}")
        failed = [a for a in answers_read if a.get("error")]   # exit 1: some runs' reads failed, each says why
        row["metrics_failed"] = len(failed)
        if failed:
            print(f"N={n}: metrics --all: {len(failed)} of {n} reads failed, e.g. {failed[0].get('profile')}: "
                  f"{failed[0]['error']}", file=sys.stderr)
        if remote := [host for host in placed if host not in ("local", "slurm")]:   # the last SSH run's host goes silent
            holes.append(silence(sshds[names.index(remote[-1]) - 1]))
            row["status_down_s"], _ = status(env, config)
        else:
            row["status_down_s"] = float("nan")
    finally:
        os.write(term.fd, b"q")   # the demo app stops the runs it launched
        term.pump(min(60, 5 + n / 4))
        for pid in stubs(work):   # whatever did not stop in time (and the silent host's runs)
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        if os.waitpid(term.pid, os.WNOHANG) == (0, 0):
            os.kill(term.pid, signal.SIGTERM)
            os.waitpid(term.pid, 0)
        for hole in holes:
            hole.close()
        for server in sshds:
            server.stop()
    return row


def collector_seconds(term: Terminal, work: Path) -> float:
    """The CPU the app's garbage collections took so far (s), as it tells it on SIGUSR1 (tui_cost's CHILD)."""
    told = work / "gc_s"
    told.unlink(missing_ok=True)
    os.kill(term.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not told.exists():
        if time.monotonic() > deadline:
            raise SystemExit("the app did not tell its collections' CPU within 10 s")
        term.pump(0.01)
    return float(told.read_text())


def profile(term: Terminal, out: Path, seconds: float) -> None:
    """py-spy's samples of the idle app over `seconds` (raw: one line per stack, with its count) into `out`. At 1,000
    a second: the app idles at ~3 % of a core, so a slower rate leaves a few samples a second to read it by."""
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen(["py-spy", "record", "-p", str(term.pid), "-d", str(int(seconds)), "-r", "1000",
                            "--nonblocking",
                            "--format", "raw", "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while spy.poll() is None:
        term.pump(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="8,32,64,128", help="comma-separated fleet sizes")
    parser.add_argument("--size", default="160x48")
    parser.add_argument("--idle-s", type=float, default=15.0)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--hosts", type=int, default=16, help="'local' and HOSTS-1 loopback SSH hosts")
    parser.add_argument("--slurm-runs", type=int, metavar="K",
                        help="runs that are Slurm jobs on a test cluster (default N/8, at least 1; 0: none)")
    parser.add_argument("--py-spy", type=Path, metavar="DIR",
                        help="after each idle window, py-spy the idle app as long again into DIR/fleet-N.txt")
    parser.add_argument("--real-body", action="store_true",
                        help="each stub's /metrics goes on with the rest of a real SGLang capture (11 kB in all, as real servers answer)")
    parser.add_argument("--apart", action="store_true",
                        help="the app on the last CPU, the stand-in hosts, servers and cluster on the others")
    args = parser.parse_args()
    app_cpus = None
    if args.apart:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise SystemExit("--apart needs two CPUs or more")
        app_cpus = {cpus[-1]}
        os.sched_setaffinity(0, cpus[:-1])   # what this bench starts (sshds, Slurm, ...) stays off the app's CPU
    if args.hosts > 1 and (reason := sshd_available()):
        raise SystemExit(f"--hosts {args.hosts}: {reason} (--hosts 1 runs everything on this host)")
    if args.slurm_runs != 0 and (reason := slurm_available()):
        raise SystemExit(f"Slurm runs: {reason} (--slurm-runs 0 leaves them out)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cols, rows = (int(v) for v in args.size.split("x"))
    head = ("runs", "hosts", "slurm", "first_frame_s", "ready_s", "idle_cpu_pct", "idle_out_b_s", "child_cpu_pct", "slurm_rpcs",
            "slurm_cpu_pct", "key_p50_ms", "key_p99_ms", "rss_mb", "sockets", "ssh_conns", "ssh_chans", "scrapes",
            "cpu_ms_per_scrape", "status_all_s", "status_down_s", "metrics_all_s", "metrics_failed", "waited_pct", "gc_pct", "load")
    counts = ("runs", "hosts", "slurm", "idle_out_b_s", "slurm_rpcs", "sockets", "ssh_conns", "ssh_chans", "scrapes", "metrics_failed")
    print(" | ".join(head))
    for n in (int(v) for v in args.runs.split(",")):
        k = max(1, n // 8) if args.slurm_runs is None else min(n, args.slurm_runs)
        row = one(n, args.hosts, k, cols, rows, args.idle_s, args.keys, args.py_spy,
                  ("--real-body", str(REAL_BODY)) if args.real_body else (), app_cpus)
        print(" | ".join(f"{row[k]:.0f}" if k in counts else f"{row[k]:.2f}" for k in head), flush=True)
    where = f"the app on CPU {min(app_cpus)}, the rest on the others" if app_cpus else "all on every CPU"
    print(f"terminal {cols}x{rows}; {os.cpu_count()} cores ({where}); load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
