"""How fast is the launch-log parser + reducer, and is its memory flat in the log's size?

    python3 bench/logscan_speed.py [--lines 1000000] [--small 250000] [--chunk 1048576]

Writes two synthetic logs typical of an `NCCL_DEBUG=INFO` SGLang launch (8 ranks; NCCL INFO lines
dominate, with SGLang prefixed lines, shard and CUDA-graph bars, `set by environment` lines, a ready
line and decode stats mixed in) to a temp dir, then streams each through `LogWatch.feed` in chunks in a
fresh child process (so peak RSS is per file) and prints lines/s and the child's peak RSS. Not a test:
it prints figures; the box it runs on may be loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

_NCCL = (
    "Bootstrap : Using eth0:10.0.{r}.1<0>",
    "NET/Plugin: No plugin found (libnccl-net.so)",
    "cudaDriverVersion 12040",
    "Channel {c:02d}/24 :    0   1   2   3   4   5   6   7",
    "Channel {c:02d}/0 : {r}[{r}] -> {n}[{n}] via P2P/CUMEM/read",
    "Connected all rings",
    "Connected all trees",
    "threadThresholds 8/8/64 | 64/8/64 | 512 | 512",
    "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer",
    "comm 0x55d5c8a0{r} rank {r} nranks 8 cudaDev {r} nvmlDev {r} busId 18000 commId 0x1a2b3c4d - Init COMPLETE",
    "Setting affinity for GPU {r} to ffffffff,00000000",
    "P2P Chunksize set to 524288",
    "Using network Socket",
    "NVLS multicast support is not available on dev {r}",
    "CC Off, Multi-GPU CC Off, workFifoBytes 1048576",
)
_ENV = ("NCCL_SOCKET_IFNAME set by environment to eth0", "NCCL_IB_DISABLE set by environment to 1",
        "NCCL_DEBUG set by environment to INFO")
_SGLANG = (
    "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs.",
    "Init torch distributed ends. mem usage=0.13 GB",
    "Using model weights format ['*.safetensors']",
    "Memory pool end. avail mem=2.09 GB",
    "Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, #running-req: 31, "
    "#queue-req: 0, cuda graph: True, input throughput (token/s): 559.53",
)


def generate(path: str, n_lines: int, seed: int = 7) -> None:
    """Write an NCCL_DEBUG=INFO-style launch log of n_lines lines."""
    rnd = random.Random(seed)
    shards = 64
    with open(path, "w", encoding="utf-8") as f:
        f.write("[2025-03-08 12:29:04] server_args=ServerArgs(model_path='/m/DeepSeek-V3', tp_size=8, "
                "mem_fraction_static=0.85, port=30000, speculative_algorithm=None)\n")
        written = 1
        buf: list[str] = []
        while written < n_lines - 2:
            r = rnd.randrange(8)
            roll = rnd.random()
            if roll < 0.93:
                msg = rnd.choice(_NCCL).format(r=r, n=(r + 1) % 8, c=rnd.randrange(24))
                buf.append(f"node-0:{4200 + r}:{4300 + r} [{r}] NCCL INFO {msg}\n")
            elif roll < 0.94:
                buf.append(f"node-0:{4200 + r}:{4200 + r} [{r}] NCCL INFO {rnd.choice(_ENV)}\n")
            elif roll < 0.995:
                buf.append(f"[2025-03-08 12:29:{rnd.randrange(60):02d} TP{r}] {rnd.choice(_SGLANG)}\n")
            else:
                done = min(shards, written * shards // n_lines + 1)
                buf.append(f"Loading safetensors checkpoint shards: {done * 100 // shards:3d}% Completed | "
                           f"{done}/{shards} [00:10<00:30,  2.10it/s]\n")
            written += 1
            if len(buf) >= 10000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))
        f.write("[2025-03-08 12:35:33] The server is fired up and ready to roll!\n")
        f.write("[2025-03-08 12:35:40 TP0] Decode batch, #running-req: 32, #token: 11179, token usage: 0.08, "
                "cuda graph: True, gen throughput (token/s): 1635.11, #queue-req: 0\n")


def child(path: str, chunk: int) -> None:
    """Stream one file through LogWatch and print a JSON line of figures (runs in a fresh process)."""
    from specmon.model.runs.runstate import LogWatch, summary

    watch = LogWatch()
    t0 = time.perf_counter()
    n_bytes = 0
    with open(path, "rb") as f:
        while True:
            data = f.read(chunk)
            if not data:
                break
            n_bytes += len(data)
            watch.feed(data, time.monotonic())
    watch.close(time.monotonic())
    elapsed = time.perf_counter() - t0
    lines = watch.parser.line_no - 1
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"lines": lines, "seconds": elapsed, "lines_per_s": lines / elapsed,
                      "mib_per_s": n_bytes / elapsed / 2**20, "peak_rss_mib": rss_mib,
                      "summary": summary(watch.state)}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--small", type=int, default=250_000)
    ap.add_argument("--chunk", type=int, default=1 << 20)
    ap.add_argument("--child", metavar="FILE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.chunk)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for n in (args.small, args.lines):
            path = os.path.join(tmp, f"nccl-{n}.log")
            generate(path, n)
            size_mib = os.path.getsize(path) / 2**20
            res = subprocess.run([sys.executable, __file__, "--child", path, "--chunk", str(args.chunk)],
                                 capture_output=True, text=True, check=True)
            fig = json.loads(res.stdout)
            s = fig["summary"]
            print(f"{fig['lines']:>9,} lines ({size_mib:6.1f} MiB): {fig['lines_per_s']:>10,.0f} lines/s "
                  f"({fig['mib_per_s']:.0f} MiB/s, {fig['seconds']:.2f} s), peak RSS {fig['peak_rss_mib']:.1f} MiB"
                  f"  [phase {s['phase']}, shards {s['shards']}, nccl_env {len(s['nccl_env'])}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
