"""On a GPU host: a tuning grid of two `transformers serve` settings run through `specmon experiment` to its verdict
(issue 36's must-show on the H200).

    python3 bench/gpu_grid.py --out DIR [--work DIR] [--vary --dtype=bfloat16,float16]

The base profile serves the same tiny random Llama as bench/gpu_e2e.py on cuda:0 with `--dtype auto` (the weights'
float32); the grid varies one flag over two values, with the base itself as the baseline, at two concurrency levels
with repeats. Written to DIR:
  profiles.toml          the profile and the `[experiments.tf-grid]` table
  experiment.json        `specmon experiment tf-grid --json` (verdict, grid bands, levels, steps)
  steps.txt              the experiment's steps, one JSON object a line
  report.md, report.png  `specmon report` of the result directory (bands, levels, each variant's setup; chart)
  summary.json           the checks; exit 1 if any failed

transformers serve's /v1/models lists the models of the Hugging Face cache (5.17 ignores the served model there and
answers 500 without a cache), and an experiment sweeps the first model listed: so the model is put in a private
cache as `local/tiny-llama` and served under that name, offline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests" / "support"))
sys.path.insert(0, str(HERE))

from gpu_e2e import Steps  # noqa: E402  (bench/ is this script's own directory)

REPO = "local/tiny-llama"


def cached_model(hf_home: Path) -> None:
    """The tiny model in the Hugging Face cache layout (blobs, a snapshot linking to them, refs/main)."""
    from tiny_model import build_tiny_model

    repo = hf_home / "hub" / ("models--" + REPO.replace("/", "--"))
    if (repo / "refs" / "main").is_file():
        return
    built = hf_home / "built"
    build_tiny_model(built)
    revision = "0" * 40
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(sorted(built.iterdir())):
        blob = repo / "blobs" / f"{i:040x}"
        shutil.copy(f, blob)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/specmon-gpu-grid-work"))
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--vary", default="--dtype=bfloat16,float16", help="FLAG=V1,V2 (default %(default)s)")
    ap.add_argument("--levels", default="1,8")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--duration", type=float, default=6)
    args = ap.parse_args()
    out, work = args.out, args.work
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    hf_home = work / "hf"
    cached_model(hf_home)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flag, _, values = args.vary.partition("=")
    argv = [sys.executable, "-m", "transformers.cli.transformers", "serve", REPO, "--host", "127.0.0.1",
            "--port", str(port), "--device", args.device, "--dtype", "auto"]
    env_toml = (f'{{ HF_HUB_OFFLINE = "1", HF_HOME = {json.dumps(str(hf_home))}'
                + (f', PYTHONPATH = {json.dumps(os.environ["PYTHONPATH"])}' if os.environ.get("PYTHONPATH") else "")
                + " }")
    cfg = work / "profiles.toml"
    cfg.write_text(
        f'[profiles.tf]\nserver = "other"\nport = {port}\ncommand = {json.dumps(argv)}\n'
        f"python = {json.dumps(sys.executable)}\nexpected_load_s = 60\nenv = {env_toml}\n\n"
        f'[experiments.tf-grid]\nbase = "tf"\nbaseline = "tf"\n'
        f"vary = {{ {json.dumps(flag)} = {json.dumps(values.split(','))} }}\n"
        f"levels = [{args.levels}]\nrepeats = {args.repeats}\nduration_s = {args.duration}\n"
        'output_len = 32\nignore_eos = false\nmax_load_s = 240\non_failure = "retry"\nretries = 1\n')
    shutil.copy(cfg, out / "profiles.toml")
    env = {**os.environ, "HOME": str(work / "home"), "XDG_STATE_HOME": str(work / "state"),
           "XDG_CONFIG_HOME": str(work / "config"),
           "PYTHONPATH": os.pathsep.join(p for p in [str(HERE), os.environ.get("PYTHONPATH", "")] if p)}
    (work / "home").mkdir(exist_ok=True)
    steps = Steps(out, cfg, env)
    results = work / "results"
    shutil.rmtree(results, ignore_errors=True)
    result = steps.json("experiment", "experiment", "tf-grid", "--results-dir", str(results), timeout=1200) or {}
    grid = result.get("grid") or {}
    steps.check("experiment exits with a result", bool(result), result)
    steps.check("every variant and the baseline measured at every level",
                all(len(p.get("levels", [])) == len(args.levels.split(",")) for p in result.get("profiles", []))
                and len(result.get("profiles", [])) == 1 + len(values.split(",")), result.get("profiles"))
    steps.check("a grid verdict (bands) is given", bool(grid.get("bands")), grid)
    (out / "steps.txt").write_text("".join(f"{json.dumps(s)}\n" for s in result.get("steps", [])))
    runs = sorted(f.parent for f in results.rglob("experiment.json"))
    if runs:
        report = steps.specmon("report", "report", str(runs[-1]), "--force")
        steps.check("report exits 0", report.returncode == 0, report.stderr[-500:])
        for f in runs[-1].iterdir():
            if f.name.startswith("report"):
                shutil.copy(f, out / f.name)
    print("verdict:", result.get("verdict"))
    failed = [c for c in steps.checks if not c["ok"]]
    (out / "summary.json").write_text(json.dumps({"verdict": result.get("verdict"), "checks": steps.checks},
                                                 indent=2) + "\n")
    print(f"{len(steps.checks) - len(failed)}/{len(steps.checks)} checks passed; outputs in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
