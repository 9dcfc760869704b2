"""On a GPU host: launch a real OpenAI-compatible server (`transformers serve`, tiny random Llama on cuda:0)
through specmon, wait for ready, sweep it, stop it, and check nvidia-smi before and after.

Run on demand where a GPU and `transformers[serving]` exist: `python3 bench/gpu_e2e.py [--out DIR]`.
Prints each step's figures; exits non-zero when a step fails. Uses a private HOME/XDG under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))


def sh(cmd: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    t0 = time.monotonic()
    cp = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=timeout)
    print(f"$ {' '.join(cmd[2:])}  -> rc={cp.returncode} in {time.monotonic() - t0:.1f}s", flush=True)
    return cp


def smi(query: str) -> str:
    cp = subprocess.run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader,nounits"],
                        text=True, capture_output=True)
    return cp.stdout.strip() or cp.stderr.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("/tmp/specmon-gpu-e2e"))
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    from test_sweep_transformers import build_tiny_model  # the same model the CPU test serves

    model = out / "tiny-llama"
    build_tiny_model(model)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = out / "profiles.toml"
    argv = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--device", "cuda:0"]
    cfg.write_text(
        "[profiles.tf-gpu]\n"
        'server = "other"\n'
        f"port = {port}\n"
        f"command = {json.dumps(argv)}\n"
        "expected_load_s = 60\n"
        'env = { HF_HUB_OFFLINE = "1", NCCL_NVLS_ENABLE = "0" }\n'
    )
    env = {**os.environ, "HOME": str(out / "home"), "XDG_STATE_HOME": str(out / "state"),
           "XDG_CONFIG_HOME": str(out / "config"), "PYTHONPATH": os.pathsep.join(
               [str(HERE), os.environ.get("PYTHONPATH", "")])}
    (out / "home").mkdir(exist_ok=True)
    spec = [sys.executable, "-m", "specmon", "--config", str(cfg)]
    print("gpu:", smi("gpu=name,memory.total,memory.used,driver_version"))
    print("compute apps before:", repr(smi("compute-apps=pid,used_memory")))
    ok = True
    launch = sh(spec + ["launch", "tf-gpu", "--wait"], env, timeout=400)
    print(launch.stdout[-1500:], launch.stderr[-1500:])
    ok &= launch.returncode == 0
    status = sh(spec + ["status", "--json"], env)
    print(status.stdout)
    apps = smi("compute-apps=pid,used_memory")
    print("compute apps while serving:", repr(apps))
    pid = (json.loads(status.stdout or "[]") or [{}])[0].get("pid")
    print("server pid (specmon):", pid)
    if ok:
        # --model: transformers serve's /v1/models scans the HF cache and answers 500 when there is none.
        sweep = sh(spec + ["sweep", "tf-gpu", "--model", str(model), "--levels", "1,4,16", "--requests", "16", "--output-len", "32",
                           "--no-ignore-eos", "--out", str(out / "sweep.jsonl")], env, timeout=400)
        print(sweep.stdout[-3000:], sweep.stderr[-800:])
        ok &= sweep.returncode == 0
    stop = sh(spec + ["stop", "tf-gpu"], env, timeout=200)
    print(stop.stdout, stop.stderr)
    ok &= stop.returncode == 0
    print("compute apps after stop:", repr(smi("compute-apps=pid,used_memory")))
    print("memory used after stop:", smi("gpu=memory.used"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
