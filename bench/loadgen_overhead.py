"""CPU cost and accuracy of the load generator, with the figures issue 22 asks for printed in one run.

A minimal streaming server (tests/support/sse_server.py, aiohttp + uvloop) runs as one process per server CPU (CPU 0 on a
2-core box; on a bigger host (CPUs-1)//2 of them, at most 8, sharing one port: one Python process cannot write 51k
paced chunks/s on time, and a late server shows up as client ITL); each client run is a separate process pinned to
the next CPU, so `process_time()` is the client's own cost. The paced cases print how late the server's own writes
were against its schedule. Cases:

  (a) back to back: the server writes 256 tokens per stream as fast as it can; C = 1024 (and, with --full, 1, 64,
      256, each beside a plain default-httpx client). Target: specmon <= 10 us per chunk at C=1024.
  (b) paced: C=256 streams, one token every 25 ms each (~10k tokens/s offered), so chunks arrive one by one.
      Target: specmon <= 40 us per chunk.
  (c) ITL tail vs concurrency: one token every 20 ms, C = 16, 256, 1024; the same server, so the ITL p99 must not
      grow with C. Targets: ITL p99 C=256/C=16 <= 1.05, C=1024/C=16 <= 1.10.
  (d) stamps in bursts: tests/support/burst_server.py writes every stream's next chunk in one burst every 20 ms, in a new
      random order each time, and keeps each write's time; C=256. Printed: how far each measured gap is from the
      true one (p50/p99), with chunk times stamped on arrival (specmon) and, for comparison, stamped when each
      stream's code saw its chunk (the generator before arrival stamps). Target: within 0.5 ms. Also C=1024 stamped
      on arrival, where one process's handling of a burst can outlast the 20 ms (chunks then wait in the sockets).
  (e) open loop: Poisson arrivals at 1000 req/s, 16 tokens each 10 ms apart, three runs: the achieved rate and the
      send lateness p50/p99. Target: achieved within 2 % of 1000, lateness p99 <= 1 ms. `--open-rates 1000,1500,2000`
      runs each rate three times (the highest rate a host holds to that standard); `--only-open` runs only this case.

"specmon" is the real generator (SweepRunner: httpx + aiohttp transport, byte-level SSE, records written to a
file, statistics, loop-lag ticker). "plain httpx" is httpx.AsyncClient with its default transport (pool raised to
C so it is not capped at 100), iterating lines and json-decoding every data line, as typical clients do.
Both run on uvloop. Run: python bench/loadgen_overhead.py [--quick] [--full] [--client-processes M]

CPU per chunk depends on how many chunks one socket read finds: on an idle box the client keeps up and reads them
one by one (~10 us each at C=1024, mostly aiohttp's per-read protocol work); when other work delays it, reads batch
several chunks and the figure drops (5-7 us measured). The lag and CPU-wait columns say which case a run was.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "support" / "sse_server.py"
BURST_SERVER = ROOT / "tests" / "support" / "burst_server.py"
REFERENCE = ROOT / "bench" / "openloop_reference.py"

CLIENT_CPU_ENV = "SPECMON_BENCH_CLIENT_CPUS"
CLIENT_CPUS = [1]   # the client's CPUs (main sets them from cpu_plan; the child reads them from CLIENT_CPU_ENV)

# One measurement's figures, as the child prints them in JSON (an ITL percentile is None without gaps).
Figures = dict[str, Any]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- client runs (in a child process on CLIENT_CPUS)

async def run_specmon(url: str, c: float, n: int, output_len: int, open_loop: bool = False,
                      burst: str | None = None, processes: int = 1) -> Figures:
    """specmon's generator at concurrency c, or (open_loop) at request rate c; with `burst` ("arrival" or "read",
    against tests/support/burst_server.py), also how far its gaps are from the server's true ones."""
    from specmon.loadgen import client
    from specmon.loadgen.protocol import ChildSpec, Message
    from specmon.loadgen.runner import SweepRunner
    from specmon.loadgen.shards import ShardedSweep
    from specmon.loadgen.workload import Workload
    from specmon.model.sweeps.results import LevelResult

    if burst == "read":   # chunk times taken when each stream's code sees its chunk: the generator before stamps
        client._arrivals_of = lambda resp: None
    levels: list[dict] = []
    if open_loop:
        # the default 2 warm-up requests: they tell the level how many connections to open before it starts
        wl = Workload(levels=(1,), rates=(c,), requests_per_level=n, warmup_requests=2 * processes,
                      output_len=output_len, input_len=16, timeout_s=300, dataset="random", processes=processes)
    else:
        wl = Workload(levels=(int(c),), requests_per_level=n, warmup_requests=0, output_len=output_len, input_len=16,
                      timeout_s=300, dataset="random", processes=processes)
    errors: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        records = str(Path(d) / "records.jsonl")

        def emit(m: Message) -> None:
            if isinstance(m, LevelResult):
                levels.append(m.to_dict())

        coord0 = time.process_time()
        if processes > 1:   # this process coordinates, as `python -m specmon.loadgen` does; its parts are processes
            await ShardedSweep(ChildSpec(url, "fixture-model", wl, records), emit).run()
        else:
            await SweepRunner(url, "fixture-model", wl, emit, records_path=records).run()
        coord_s = time.process_time() - coord0 if processes > 1 else 0.0
        if burst:
            errors = burst_errors(url, Path(d) / "records.jsonl")
    lv = levels[0]
    return {**errors, "cpu_s": lv["client"]["cpu_s"], "chunks": lv["client"]["chunks"], "wall_s": lv["duration_s"],
            "requests": lv["requests_ok"] + lv["requests_failed"], "processes": processes,
            "ok": lv["requests_ok"], "itl_p50_ms": lv["itl_ms"]["p50"], "itl_p99_ms": lv["itl_ms"]["p99"],
            "lag_p99_ms": lv["client"]["loop_lag_ms_p99"], "cpu_wait_s": lv["client"]["cpu_wait_s"],
            "late_p50_ms": (lv.get("send_late_ms") or {}).get("p50"), "late_p99_ms": (lv.get("send_late_ms") or {}).get("p99"),
            "achieved_rate": lv.get("achieved_rate"), "handling_ms_p99": lv["client"].get("handling_ms_p99"),
            "burst_max": lv["client"].get("burst_max"), "coordinator_cpu_s": coord_s}


def _q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[round(p / 100 * (len(xs) - 1))] if xs else float("nan")


def burst_errors(url: str, records: Path) -> dict[str, float]:
    """|measured gap - true gap| p50/p99 (ms) over every gap, and the true and measured ITL p99."""
    import urllib.request

    with urllib.request.urlopen(url + "/schedule") as resp:
        schedule = json.load(resp)
    sys.path.insert(0, str(BURST_SERVER.parent))
    from burst_server import gap_errors

    _, true, errs = gap_errors([json.loads(line) for line in records.read_text().splitlines()], schedule["writes"])
    return {"err_p50_ms": _q(errs, 50), "err_p99_ms": _q(errs, 99), "true_itl_p99_ms": _q(true, 99),
            "server_late_p99_ms": schedule["late_ms_p99"], "gaps": len(errs)}


async def run_plain_httpx(url: str, c: int, n: int, output_len: int) -> Figures:
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
    cpus = {int(x) for x in os.environ.get(CLIENT_CPU_ENV, "1").split(",")}
    try:
        os.sched_setaffinity(0, cpus)   # with several generator processes, the OS spreads them over these
    except OSError as exc:   # a sandbox may refuse pinning: the figures are then unpinned, and say so
        print(f"not pinned to CPUs {cpus}: {exc}", file=sys.stderr)
    import uvloop

    processes = len(cpus)
    if kind == "reference":   # bench/openloop_reference.py, on the same CPUs
        sys.path.insert(0, str(REFERENCE.parent))
        from openloop_reference import main as reference

        result = uvloop.run(reference(url, c, n, output_len))
    elif kind == "specmon-open-auto":   # as many processes as specmon picks for this rate on these CPUs
        from specmon.loadgen.shards import auto_processes

        result = uvloop.run(run_specmon(url, c, n, output_len, open_loop=True, processes=auto_processes((c,))))
    elif kind == "specmon-open":
        result = uvloop.run(run_specmon(url, c, n, output_len, open_loop=True, processes=processes))
    elif kind.startswith("specmon-burst-"):   # one process: the "read" case patches this process's client
        result = uvloop.run(run_specmon(url, c, n, output_len, burst=kind.rsplit("-", 1)[1]))
    elif kind == "specmon":
        result = uvloop.run(run_specmon(url, c, n, output_len, processes=processes))
    else:
        result = uvloop.run(run_plain_httpx(url, int(c), n, output_len))
    print(json.dumps(result))


# ---------------------------------------------------------------- orchestration

class Server:
    """A test server: one process per CPU in `cpus`, all on one port (SO_REUSEPORT spreads the connections over
    them), so at C=1024 (51k chunks/s) the server keeps its schedule and the bench measures the client."""

    def __init__(self, interval_s: float, cpus: list[int], script: Path = SERVER) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.procs: list[subprocess.Popen[str]] = []
        self.stats_urls: list[str] = []
        share = ["--reuse-port"] if len(cpus) > 1 else []
        for cpu in cpus:
            proc = subprocess.Popen([sys.executable, str(script), "--port", str(port), "--cpu", str(cpu),
                                     "--interval-s", str(interval_s), *share], stdout=subprocess.PIPE, text=True)
            self.procs.append(proc)
            assert proc.stdout is not None
            ready = proc.stdout.readline().split()
            if ready[:1] != ["ready"]:
                self.stop()   # none of them outlives the bench
                sys.exit(f"{script.name} on CPU {cpu} did not start: {ready}")
            self.stats_urls.append(f"http://127.0.0.1:{ready[1]}" if share else self.url)
        self._asked, self._cpu_s = time.perf_counter(), [0.0] * len(cpus)
        self.busiest_cpu_s = 0.0   # late_ms: the busiest process's CPU seconds since the call before
        self.opened_by_post = self._opened = 0   # and the connections a request (not a warm-up) opened since

    def late_ms(self) -> tuple[float | None, float | None, float]:
        """Since the last call: how late the server's paced writes were against their schedule (p50, p99, ms; the
        worst process's) and the busiest process's share of a CPU (near 1: the server, not the client, is the limit)."""
        import urllib.request

        figures = []
        for url in self.stats_urls:
            with urllib.request.urlopen(url + "/stats") as resp:
                figures.append(json.load(resp))
        now = time.perf_counter()
        self.busiest_cpu_s = max((f["cpu_s"] - cpu for f, cpu in zip(figures, self._cpu_s)), default=0.0)
        opened = sum(f.get("opened_by_post", 0) for f in figures)
        self.opened_by_post, self._opened = opened - self._opened, opened
        busy = self.busiest_cpu_s / (now - self._asked)
        self._asked, self._cpu_s = now, [f["cpu_s"] for f in figures]
        p50s = [f["late_ms_p50"] for f in figures if f.get("late_ms_p50") is not None]
        p99s = [f["late_ms_p99"] for f in figures if f.get("late_ms_p99") is not None]
        return (max(p50s) if p50s else None), (max(p99s) if p99s else None), busy

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


def physical_cores(cpus: list[int]) -> list[list[int]]:
    """`cpus` grouped by physical core (SMT siblings together), in order; one group per CPU where Linux does not say."""
    cores: dict[str, list[int]] = {}
    for cpu in cpus:
        try:
            key = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
        except OSError:
            key = str(cpu)
        cores.setdefault(key, []).append(cpu)
    return list(cores.values())


def cpu_plan(server_cpus: int, client_cpus: int) -> tuple[list[int], list[int], str]:
    """The server's CPUs, the client's, and how they were picked. The server gets `server_cpus` (0: as many as leave
    the client its CPUs and half the rest idle, at most 8), the client the next `client_cpus`. Each on a physical core
    of its own where there are enough cores: an SMT sibling of a busy server process runs the client at about half
    speed (measured on the H200 host, 16 vCPUs)."""
    cpus = sorted(os.sched_getaffinity(0))
    cores = physical_cores(cpus)
    units = [core[0] for core in cores] if len(cores) < len(cpus) else cpus
    k = server_cpus or max(1, min(8, (len(units) - client_cpus) // 2))
    if k + client_cpus > len(units):
        units = cpus   # not enough whole cores: share them
        k = server_cpus or max(1, min(8, (len(units) - client_cpus) // 2))
    if k + client_cpus > len(units):
        sys.exit(f"needs {k + client_cpus} CPUs ({k} for the server, {client_cpus} for the client), has {len(cpus)}")
    how = "one CPU per physical core, SMT siblings left idle" if units is not cpus else "CPUs as listed"
    return units[:k], units[k:k + client_cpus], how


def measure(kind: str, url: str, c: float, n: int, output_len: int) -> Figures:
    cpus = CLIENT_CPUS if kind.startswith("specmon") or kind == "reference" else CLIENT_CPUS[:1]   # plain httpx: one
    out = subprocess.run([sys.executable, __file__, "--child", kind, url, str(c), str(n), str(output_len)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, CLIENT_CPU_ENV: ",".join(map(str, cpus))})
    if out.returncode != 0:
        sys.exit(f"the {kind} client at {c:g} exited with {out.returncode}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(case: str, kind: str, c: float | str, r: Figures) -> str:
    us = r["cpu_s"] * 1e6 / r["chunks"] if r["chunks"] else float("nan")
    p50 = "-" if r["itl_p50_ms"] is None else f"{r['itl_p50_ms']:.1f}"
    p99 = "-" if r["itl_p99_ms"] is None else f"{r['itl_p99_ms']:.1f}"
    lag = "-" if r.get("lag_p99_ms") is None else f"{r['lag_p99_ms']:.1f}"
    wait = "-" if r.get("cpu_wait_s") is None else f"{r['cpu_wait_s']:.2f}"
    late = "" if r.get("late_p99_ms") is None else (
        f"  late p50/p99 {r['late_p50_ms']:.2f}/{r['late_p99_ms']:.2f} ms, sent {r['achieved_rate']:.1f} req/s")
    return (f"{case:<13} {kind:<12} {c!s:>7} {int(r['chunks']):>9} {r['cpu_s']:>8.2f} {us:>9.1f} "
            f"{r['chunks'] / r['wall_s']:>10.0f} {r['wall_s']:>7.1f} {p50:>8} {p99:>8} {lag:>8} {wait:>9}{late}")


def vs_reference(rates: list[float], seconds: float, server_cpus: list[int]) -> None:
    """specmon's open loop (its default processes for the client CPUs) and the reference client, one after the
    other against the same server, three runs a rate: what each sent, how late (taken when the request went to the
    socket, both), and CPU per request (specmon's: its generator processes' during the level; the reference's: its
    process's from the first arrival to the last response)."""
    print(f"open loop vs bench/openloop_reference.py: 16 tokens a request, 10 ms apart; {seconds:g} s of schedule a run;"
          f" lateness p50/p99 in ms, CPU in us a request")
    print("(coord: the coordinator's CPU in us a request, beside its parts' (not in us/req); wait: ms a second the "
          "generator processes were ready to run and had no CPU, summed; server: the busiest server "
          "process's CPU over the run's sending time, specmon's/the reference's: near 100 % the server is the limit;\n"
          " srv late99: how late the server's own paced writes were, ms p99; opened: connections a request opened "
          "during the run, not opened before its clock started)")
    print(f"{'rate':>6} {'run':>3} | {'specmon sent':>12} {'late p50':>8} {'p99':>8} {'us/req':>7} {'procs':>5} "
          f"{'coord':>5} {'wait':>5} | {'ref sent':>9} {'late p50':>8} {'p99':>8} {'us/req':>7} | {'CPU ratio':>9} {'server':>9} "
          f"{'srv late99':>13} {'opened':>11} load")
    server = Server(0.010, server_cpus)
    try:
        for rate in rates:
            for run in range(1, 4):
                n = max(1, round(rate * seconds))
                server.late_ms()   # forget what came before
                sm = measure("specmon-open-auto", server.url, rate, n, 16)
                sm_late99 = server.late_ms()[1]
                sm_busy = server.busiest_cpu_s / sm["wall_s"]   # its CPU over the level's time (first send to last end)
                sm_opened = server.opened_by_post
                ref = measure("reference", server.url, rate, n, 16)
                ref_late99 = server.late_ms()[1]
                ref_busy = server.busiest_cpu_s / (n / ref["achieved_rate"] + 0.16)   # sends' span + a request
                ref_opened = server.opened_by_post
                sm_us, ref_us = sm["cpu_s"] * 1e6 / sm["requests"], ref["cpu_s"] * 1e6 / ref["requests"]
                coord_us = sm["coordinator_cpu_s"] * 1e6 / sm["requests"]
                waited = sm.get("cpu_wait_s")   # the generator processes', summed: ms a second of the level
                wait_ms = "-" if waited is None else f"{1000 * waited / sm['wall_s']:.0f}"
                print(f"{rate:>6g} {run:>3} | {sm['achieved_rate']:>12.1f} {sm['late_p50_ms']:>8.2f} "
                      f"{sm['late_p99_ms']:>8.2f} {sm_us:>7.0f} {sm['processes']:>5} {coord_us:>5.0f} {wait_ms:>5} | "
                      f"{ref['achieved_rate']:>9.1f} {ref['late_p50_ms']:>8.2f} {ref['late_p99_ms']:>8.2f} {ref_us:>7.0f} | "
                      f"{sm_us / ref_us:>9.2f} {sm_busy:>4.0%}/{ref_busy:<4.0%} {sm_late99 or 0:>6.1f}/{ref_late99 or 0:<6.1f} "
                      f"{sm_opened:>5}/{ref_opened:<5} {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        server.stop()


def main() -> None:
    global CLIENT_CPUS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests per point")
    ap.add_argument("--full", action="store_true", help="also back to back at C=1, 64, 256, and plain httpx beside")
    ap.add_argument("--open-rates", default="1000", metavar="R,R,...",
                    help="open-loop rates, three runs each (default 1000): the highest rate held to the target")
    ap.add_argument("--only-open", action="store_true", help="run only the open-loop case")
    ap.add_argument("--server-cpus", type=int, default=0, metavar="K",
                    help="server processes, one per CPU (default: 1 on a small box, (CPUs-1)//2 up to 8 on a big one)")
    ap.add_argument("--client-processes", type=int, default=1, metavar="M",
                    help="specmon's load generator processes (--processes), each on a CPU of its own (default 1)")
    ap.add_argument("--vs-reference", action="store_true",
                    help="only the open loop beside bench/openloop_reference.py, three runs a rate (--ref-rates)")
    ap.add_argument("--ref-rates", default="500,1000,2000,4000", metavar="R,R,...",
                    help="--vs-reference rates (default 500,1000,2000,4000)")
    ap.add_argument("--seconds", type=float, default=5.0, help="--vs-reference: seconds of schedule a run (default 5)")
    ap.add_argument("--child", nargs=5, metavar=("KIND", "URL", "C", "N", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, url, c, n, out = args.child
        child_main(kind, url, float(c), int(n), int(out))
        return
    # A SIGTERM (e.g. from `timeout`) unwinds like an exception, so the servers and the client child are stopped.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    server_cpus, CLIENT_CPUS, how = cpu_plan(args.server_cpus, args.client_processes)
    print(f"host: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          "(other work on the box inflates CPU figures and ITL tails)")
    print(f"server: {len(server_cpus)} process(es) on CPUs {','.join(map(str, server_cpus))}; client "
          f"({len(CLIENT_CPUS)} generator process(es)) on CPUs {','.join(map(str, CLIENT_CPUS))} ({how})")
    if args.vs_reference:
        vs_reference([float(x) for x in args.ref_rates.split(",")], args.seconds, server_cpus)
        return
    print(f"{'case':<13} {'client':<12} {'C':>7} {'chunks':>9} {'cpu_s':>8} {'us/chunk':>9} {'chunks/s':>10} "
          f"{'wall_s':>7} {'ITL p50':>8} {'ITL p99':>8} {'lag p99':>8} {'cpu wait':>9}")
    print("(lag p99: generator event-loop lag, ms; cpu wait: seconds the generator was runnable but had no CPU;\n"
          " server late: how late the server's own paced writes were against their schedule, p50/p99 ms)")
    figures: dict[str, float] = {}
    if not args.only_open:
        kinds = ("specmon", "plain-httpx") if args.full else ("specmon",)
        server = Server(0.0, server_cpus)
        try:
            for c in (1, 64, 256, 1024) if args.full else (1024,):
                n = max(c, 8 if args.quick else 32)
                for kind in kinds:
                    r = measure(kind, server.url, c, n, 256)
                    print(row("back-to-back", kind, c, r), flush=True)
                    if kind == "specmon":
                        figures[f"b2b_us_{c}"] = r["cpu_s"] * 1e6 / r["chunks"]
        finally:
            server.stop()
        server = Server(0.025, server_cpus)
        output_len = 80 if args.quick else 120
        try:
            for kind in kinds:
                r = measure(kind, server.url, 256, 256, output_len)
                print(row("paced 25ms", kind, 256, r), flush=True)
                if kind == "specmon":
                    figures["paced_us_256"] = r["cpu_s"] * 1e6 / r["chunks"]
        finally:
            server.stop()
        server = Server(0.020, server_cpus)
        try:
            for c in (16, 256, 1024):
                server.late_ms()   # forget the last level's
                r = measure("specmon", server.url, c, max(2 * c, 32) if c < 1024 else c, 50 if args.quick else 100)
                late50, late99, busy = server.late_ms()
                print(row("paced 20ms", "specmon", c, r) + f"  server late {late50}/{late99} ms, busiest server "
                      f"process {busy:.0%} of a CPU, client {r['cpu_s'] / r['wall_s']:.0%}", flush=True)
                figures[f"itl_p99_{c}"] = r["itl_p99_ms"]
                figures[f"server_late_p99_{c}"] = late99 if late99 is not None else float("nan")
        finally:
            server.stop()
        for stamp, c in (("arrival", 256), ("read", 256), ("arrival", 1024)):
            server = Server(0.020, server_cpus[:1], BURST_SERVER)
            try:
                r = measure(f"specmon-burst-{stamp}", server.url, c, c, 50)
            finally:
                server.stop()
            print(row("burst 20ms", f"at {stamp}", c, r) + f"  |gap error| p50/p99 {r['err_p50_ms']:.3f}/"
                  f"{r['err_p99_ms']:.3f} ms over {r['gaps']} gaps, true ITL p99 {r['true_itl_p99_ms']:.2f}, server late p99 "
                  f"{r['server_late_p99_ms']:.2f} ms, handling p99 {r['handling_ms_p99']} ms, burst max {r['burst_max']}",
                  flush=True)
            figures[f"burst_err_p99_{stamp}_{c}"] = r["err_p99_ms"]
    server = Server(0.010, server_cpus)
    opens: list[tuple[float, Figures, float]] = []
    try:
        for rate in (float(x) for x in args.open_rates.split(",")):
            for _ in range(3):
                r = measure("specmon-open", server.url, rate, round((2 if args.quick else 5) * rate), 16)
                print(row("open 10ms", "specmon-open", f"{rate:g}/s", r), flush=True)
                opens.append((rate, r, os.getloadavg()[0]))
    finally:
        server.stop()
    print(f"\nissue 22 figures (load average now {os.getloadavg()[0]:.2f}):")
    for i, (rate, r, load) in enumerate(opens, 1):
        print(f"  open loop {rate:g} req/s run {i}: sent {r['achieved_rate']:.1f} req/s, lateness p50/p99 "
              f"{r['late_p50_ms']:.3f}/{r['late_p99_ms']:.3f} ms, load {load:.2f}   (target: within 2 %, p99 <= 1 ms)")
    if args.only_open:
        return
    lo = figures["itl_p99_16"]
    late = "/".join(f"{figures[f'server_late_p99_{c}']:.2f}" for c in (16, 256, 1024))
    print(f"  ITL p99 C=256/C=16   {figures['itl_p99_256'] / lo:.3f}   (target <= 1.05)")
    print(f"  ITL p99 C=1024/C=16  {figures['itl_p99_1024'] / lo:.3f}   (target <= 1.10)")
    print(f"    server's own lateness p99 at C=16/256/1024: {late} ms (a late server is in these ratios, not the client)")
    print(f"  back to back C=1024  {figures['b2b_us_1024']:.1f} us/chunk   (target <= 10)")
    print(f"  paced C=256          {figures['paced_us_256']:.1f} us/chunk   (target <= 40)")
    print(f"  burst C=256 |gap error| p99: {figures['burst_err_p99_arrival_256']:.3f} ms stamped on arrival, "
          f"{figures['burst_err_p99_read_256']:.3f} ms stamped when read   (target <= 0.5)")
    print(f"  burst C=1024 |gap error| p99: {figures['burst_err_p99_arrival_1024']:.3f} ms (a burst of 1024 chunks can "
          "take the client longer than the 20 ms between bursts: chunks wait in the sockets)")


if __name__ == "__main__":
    main()
