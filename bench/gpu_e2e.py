"""On a GPU host: launch a real OpenAI-compatible server (`transformers serve`, tiny random Llama on cuda:0)
through specmon, wait for ready, sweep it, stop it, and check what `specmon gpus` and `specmon env` say about it.

    python3 bench/gpu_e2e.py --out DIR [--work DIR]

Steps, each written to DIR (small text/JSON files, to bring back as test fixtures) and checked:
  gpus-before.json/.txt      `specmon gpus --json` before the launch (every GPU listed, none held by the run)
  launch.txt, status.json    `specmon launch tf-gpu --wait`, then `specmon status --json`
  gpus-while.json/.txt       while serving: a GPU held by the run (holder run_id = the run, pid = its server)
  smi-query-nounits.csv, smi-apps-nounits.csv   nvidia-smi with the probe's own field lists, while serving
  env-run.json/.txt          `specmon env RUN`: the profile's NCCL_* in the server's /proc environ; NCCL_PROTO=LL
                             injected by the profile's sitecustomize.py (named); versions (torch, driver, GPU)
  diff.json/.txt             `specmon diff tf-gpu tf-gpu-plain`: NCCL_PROTO differs (injected)
  sweep.txt, stop.txt        `specmon sweep`, `specmon stop`
  sweep-rates.{txt,jsonl}    an open-loop sweep (rates 1,4) on the built-in prompts with goodput targets
  vllm-results/              that result exported in vLLM's format
  gpus-after.json/.txt       after the stop: no GPU held by the run
  summary.json               every check with ok/detail; the exit code is 1 if any failed
The model, private HOME and specmon state live under --work (default /tmp/specmon-gpu-e2e-work), not in DIR.
The server is stopped at the end even when a step fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests" / "support"))
sys.path.insert(0, str(HERE))


class Steps:
    """Runs specmon commands, saves their output in `out`, records checks."""

    def __init__(self, out: Path, config: Path, env: dict[str, str]) -> None:
        self.out, self.config, self.env = out, config, env
        self.checks: list[dict[str, Any]] = []

    def specmon(self, name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "specmon", "--config", str(self.config), *args]
        started = time.monotonic()
        try:
            cp = subprocess.run(argv, env=self.env, text=True, capture_output=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            cp = subprocess.CompletedProcess(argv, 124, str(exc.stdout or ""), f"timed out after {timeout} s")
        took = time.monotonic() - started
        print(f"$ specmon {' '.join(args)}  -> rc={cp.returncode} in {took:.1f}s", flush=True)
        suffix = ".json" if "--json" in args else ".txt"
        (self.out / f"{name}{suffix}").write_text(cp.stdout + (f"\n# stderr:\n{cp.stderr}" if cp.stderr and
                                                                 suffix == ".txt" else ""))
        if cp.stderr and suffix == ".json":
            (self.out / f"{name}.stderr.txt").write_text(cp.stderr)
        return cp

    def json(self, name: str, *args: str, timeout: float = 300) -> Any:
        cp = self.specmon(name, *args, "--json", timeout=timeout)
        try:
            return json.loads(cp.stdout)
        except ValueError:
            self.check(f"{name}: JSON output", False, (cp.stderr or cp.stdout)[-300:])
            return None

    def check(self, what: str, ok: bool, detail: object = "") -> bool:
        self.checks.append({"check": what, "ok": bool(ok), "detail": detail})
        print(f"  [{'ok' if ok else 'FAIL'}] {what}" + (f": {detail}" if detail and not ok else ""), flush=True)
        return bool(ok)


def smi(out: Path, name: str, args: list[str]) -> str:
    """Run nvidia-smi itself and keep its output as a capture."""
    try:
        cp = subprocess.run(["nvidia-smi", *args], text=True, capture_output=True, timeout=60)
        text = cp.stdout if cp.returncode == 0 else cp.stdout + cp.stderr + f"\nrc={cp.returncode}\n"
    except (OSError, subprocess.TimeoutExpired) as exc:
        text = f"nvidia-smi failed: {exc}\n"
    (out / name).write_text(text)
    with (out / "commands.txt").open("a") as f:
        f.write(f"{name}: nvidia-smi {' '.join(args)}\n")
    return text


def held_by(gpus: Any, run_id: str) -> list[dict[str, Any]]:
    """The GPUs (from `specmon gpus --json`) that some process of `run_id` holds."""
    found = []
    for gpu in (gpus or {}).get("gpus", []):
        if any(h.get("run_id") == run_id for h in gpu.get("holders", [])):
            found.append(gpu)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for the captured outputs (created)")
    ap.add_argument("--device", default="cuda:0", help="for transformers serve (cpu: a dry run of the steps)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/specmon-gpu-e2e-work"),
                    help="model, HOME and specmon state (default %(default)s)")
    args = ap.parse_args()
    out, work = args.out, args.work
    out.mkdir(parents=True, exist_ok=True)
    (out / "commands.txt").unlink(missing_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    from tiny_model import build_tiny_model  # the same model the CPU test serves

    from specmon.model.machine.gpu import APPS_FIELDS, QUERY_FIELDS

    model = work / "tiny-llama"
    if not (model / "config.json").exists():
        build_tiny_model(model)
    inject = work / "inject"
    inject.mkdir(exist_ok=True)
    (inject / "sitecustomize.py").write_text('import os\nos.environ["NCCL_PROTO"] = "LL"\n')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plain_port = port + 1 if port < 65535 else port - 1

    def serve_argv(on_port: int) -> list[str]:
        return [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model), "--host", "127.0.0.1",
                "--port", str(on_port), "--device", args.device]

    # The profile's PYTHONPATH replaces the caller's: keep what the server itself imports from (where its packages
    # were installed with --target, as on the lent GPU machine) behind the injecting directory.
    inject_path = os.pathsep.join(p for p in [str(inject), os.environ.get("PYTHONPATH", "")] if p)
    cfg = work / "profiles.toml"
    # Each profile's command names its own port (config load refuses a --port that differs from port).
    def common(on_port: int) -> str:
        return (f'server = "other"\nport = {on_port}\ncommand = {json.dumps(serve_argv(on_port))}\n'
                f'python = {json.dumps(sys.executable)}\nexpected_load_s = 60\n')

    cfg.write_text(
        f"[profiles.tf-gpu]\n{common(port)}"
        f'env = {{ HF_HUB_OFFLINE = "1", NCCL_NVLS_ENABLE = "0", NCCL_DEBUG = "INFO", '
        f'PYTHONPATH = {json.dumps(inject_path)} }}\n'
        f"[profiles.tf-gpu-plain]\n{common(plain_port)}"
        'env = { HF_HUB_OFFLINE = "1", NCCL_NVLS_ENABLE = "0", NCCL_DEBUG = "INFO"'
        # The same caller's entries as tf-gpu, so the two differ only by the injecting directory.
        + (f', PYTHONPATH = {json.dumps(os.environ["PYTHONPATH"])}' if os.environ.get("PYTHONPATH") else "")
        + ' }\n')
    shutil.copy(cfg, out / "profiles.toml")
    home = work / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(work / "state"),
           "XDG_CONFIG_HOME": str(work / "config"),
           "PYTHONPATH": os.pathsep.join(p for p in [str(HERE), os.environ.get("PYTHONPATH", "")] if p)}
    steps = Steps(out, cfg, env)

    smi(out, "smi-L.txt", ["-L"])
    before = steps.json("gpus-before", "gpus")
    steps.specmon("gpus-before", "gpus")
    steps.check("gpus before: at least one GPU listed", bool(before and before.get("gpus")), before)
    run_id = None
    try:
        launch = steps.specmon("launch", "launch", "tf-gpu", "--wait", timeout=600)
        steps.check("launch tf-gpu --wait exits 0 (READY)", launch.returncode == 0, launch.stderr[-500:])
        status = steps.json("status", "status") or []
        run: dict[str, Any] = next((r for r in status if r.get("profile") == "tf-gpu"), {})
        run_id, wrapper = run.get("run_id"), run.get("pid")
        steps.check("status knows the run", bool(run_id), status)
        # The probe's query, word for word, so its output can be a parser fixture.
        smi(out, "smi-query-nounits.csv", [f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"])
        smi(out, "smi-apps-nounits.csv",
            [f"--query-compute-apps={','.join(APPS_FIELDS)}", "--format=csv,noheader,nounits"])
        smi(out, "smi-q.xml", ["-q", "-x"])
        deadline = time.monotonic() + 120
        while True:   # the compute-apps row appears once the model is on the GPU
            during = steps.json("gpus-while", "gpus")
            if held_by(during, run_id or "") or time.monotonic() > deadline:
                break
            time.sleep(2)
        steps.specmon("gpus-while", "gpus")
        held = held_by(during, run_id or "")
        steps.check("while serving: a GPU is held by the run", bool(held), during)
        holders = [h for g in held for h in g["holders"] if h.get("run_id") == run_id]
        steps.check("the holder is named as the run's, with its profile",
                    all(h.get("profile") == "tf-gpu" and h.get("description", "").startswith(f"run {run_id}")
                        for h in holders) and bool(holders), holders)
        steps.check("the holding pid is the server (the launch wrapper's child), not the wrapper",
                    bool(holders) and all(h.get("pid") != wrapper for h in holders), {"wrapper": wrapper})

        report = steps.json("env-run", "env", run_id or "tf-gpu") or {}
        steps.specmon("env-run", "env", run_id or "tf-gpu")
        process_env = report.get("process_env") or {}
        steps.check("env: the profile's NCCL_NVLS_ENABLE reached the server's /proc environ",
                    process_env.get("NCCL_NVLS_ENABLE") == "0", process_env)
        site = str(inject / "sitecustomize.py")
        steps.check("env: NCCL_PROTO=LL injected by the profile's sitecustomize.py (named)",
                    {"name": "NCCL_PROTO", "value": "LL", "before": None, "file": site}
                    in (report.get("injected") or []), report.get("injected"))
        # Not checked in process_env: /proc/PID/environ is the environment the process was started with, so a
        # variable its sitecustomize sets later never shows there; that is what the injected view is for.
        versions = report.get("versions") or {}
        steps.check("env: versions include torch, the driver and the GPU model",
                    all(k in versions for k in ("torch", "nvidia driver", "gpu")), versions)
        diff = steps.json("diff", "diff", "tf-gpu", "tf-gpu-plain") or {}
        steps.specmon("diff", "diff", "tf-gpu", "tf-gpu-plain")
        steps.check("diff: NCCL_PROTO differs between tf-gpu and tf-gpu-plain",
                    any(d.get("key") == "NCCL_PROTO" for d in diff.get("differences", [])), diff.get("differences"))

        if launch.returncode == 0:
            # --model: transformers serve's /v1/models scans the HF cache and answers 500 when there is none.
            sweep = steps.specmon("sweep", "sweep", "tf-gpu", "--model", str(model), "--levels", "1,4,16",
                                  "--requests", "16", "--output-len", "32", "--no-ignore-eos",
                                  "--out", str(out / "sweep.jsonl"), timeout=600)
            steps.check("sweep exits 0", sweep.returncode == 0, sweep.stderr[-500:])
            # Open loop on the built-in prompt set with goodput targets, then the result in vLLM's format.
            rated = steps.specmon("sweep-rates", "sweep", "tf-gpu", "--model", str(model), "--rates", "1,4",
                                  "--duration", "20", "--slo", "ttft:500,tpot:100", "--dataset", "builtin",
                                  "--output-len", "32", "--no-ignore-eos", "--seed", "1",
                                  "--out", str(out / "sweep-rates.jsonl"), timeout=600)
            steps.check("open-loop sweep (rates 1,4, builtin prompts, SLO) exits 0", rated.returncode == 0,
                        rated.stderr[-500:])
            levels = [json.loads(line) for line in (out / "sweep-rates.jsonl").read_text().splitlines()[1:]] \
                if (out / "sweep-rates.jsonl").is_file() else []
            steps.check("open-loop levels carry their rate and goodput", len(levels) == 2 and all(
                lv.get("rate") is not None and lv.get("goodput") is not None for lv in levels),
                [{k: lv.get(k) for k in ("rate", "goodput", "requests_ok")} for lv in levels])
            exported = steps.specmon("export-vllm", "export", str(out / "sweep-rates.jsonl"), "--format", "vllm",
                                     "--out", str(out / "vllm-results"))
            steps.check("export --format vllm exits 0", exported.returncode == 0, exported.stderr[-500:])
    finally:
        stop = steps.specmon("stop", "stop", "tf-gpu", timeout=300)
        steps.check("stop exits 0", stop.returncode == 0, stop.stderr[-500:])
    after = steps.json("gpus-after", "gpus")
    steps.specmon("gpus-after", "gpus")
    steps.check("after stop: no GPU held by the run", after is not None and not held_by(after, run_id or ""), after)
    smi(out, "smi-apps-after.csv", [f"--query-compute-apps={','.join(APPS_FIELDS)}", "--format=csv,noheader,nounits"])
    failed = [c for c in steps.checks if not c["ok"]]
    (out / "summary.json").write_text(json.dumps({"run_id": run_id, "checks": steps.checks}, indent=2) + "\n")
    print(f"{len(steps.checks) - len(failed)}/{len(steps.checks)} checks passed; outputs in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
