"""`specmon demo [--headless]`: the built-in demo on `specmon sim`, no GPU and no configuration needed.

It launches the two demo profiles (a baseline and an EAGLE-3 speculative server), shows their loads, and sweeps
both to find the concurrency where speculation stops paying. The TUI version lets you press `s` to sweep;
`--headless` does it all and prints the comparison. Either way, the servers it started are stopped at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import TextIO

from specmon.errors import UserError
from specmon.model.config import Config, builtin_config, load_config, parse_levels

HEADLESS_LEVELS = (1, 4, 16, 64)
HEADLESS_REQUESTS = 16
READY_TIMEOUT_S = 180.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="launch two simulated servers (baseline, EAGLE-3), sweep both, show the crossover",
        description=__doc__,
    )
    parser.add_argument("--headless", action="store_true", help="no screen: print progress and the comparison")
    parser.add_argument("--levels", default=",".join(map(str, HEADLESS_LEVELS)),
                        help="concurrency levels of the headless sweep (default %(default)s)")
    parser.add_argument("--requests", type=int, default=HEADLESS_REQUESTS,
                        help="requests per level in the headless sweep (default %(default)s)")
    parser.add_argument("--results-dir", default="results", help="where sweep result files go (default %(default)s)")
    parser.set_defaults(func=run)


def demo_config(args: argparse.Namespace) -> Config:
    """The demo's profiles: those of --config when given (tests use fast ones), else the built-in demo pair."""
    path = getattr(args, "config", None)
    return load_config(path) if path else builtin_config()


def run(args: argparse.Namespace) -> int:
    config = demo_config(args)
    if args.headless:
        try:
            levels = parse_levels(args.levels)
        except ValueError as exc:
            raise UserError(f"--levels: {exc}") from None
        return asyncio.run(headless(config, levels, args.requests, Path(args.results_dir), sys.stdout))
    from specmon.ui.app import run_app

    return run_app(config, demo=True, results_dir=Path(args.results_dir))


async def headless(config: Config, levels: tuple[int, ...], requests: int, results_dir: Path, out: TextIO) -> int:
    """Launch every profile, wait until ready (printing shard progress), sweep each, print the comparison."""
    from specmon.loadgen.workload import Workload
    from specmon.model.compare import crossover
    from specmon.orchestration.runs import RunManager
    from specmon.orchestration.sweep import SweepSpec, default_out_path, run_sweep
    from specmon.ui.format import LEVEL_COLUMNS, fmt_shards, level_cells

    manager = RunManager(config)
    started: list[str] = []
    try:
        views = {}
        for name in config.profiles:
            view = await manager.launch(name, watch=True)
            started.append(view.run_id)
            views[name] = view
            print(f"{name}: launched run {view.run_id} (pid {view.pid}, port {view.port})", file=out, flush=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        shown: dict[str, str] = {}
        while True:
            current = {v.profile: v for v in manager.runs() if v.run_id in started}
            for name, view in current.items():
                line = f"{view.state} shards {fmt_shards(*(view.shards or (None, None)))}"
                if shown.get(name) != line:
                    shown[name] = line
                    print(f"{name}: {line}", file=out, flush=True)
            failed = [v for v in current.values() if v.state in ("failed", "exited", "lost", "stopped")]
            if failed:
                for v in failed:
                    reason = f"{v.failure.kind}: {v.failure.message}" if v.failure else v.state
                    print(f"{v.profile}: FAILED: {reason}", file=out, flush=True)
                return 1
            if all(v.state == "ready" for v in current.values()) and len(current) == len(config.profiles):
                break
            if time.monotonic() > deadline:
                print(f"not ready after {READY_TIMEOUT_S:.0f} s", file=out, flush=True)
                return 1
            await asyncio.sleep(0.5)

        sweep = config.sweep
        workload = Workload(levels=levels, requests_per_level=requests, warmup_requests=sweep.warmup_requests,
                            input_len=sweep.input_len, output_len=sweep.output_len, api=sweep.api)
        results = {}
        for name in config.profiles:
            spec = SweepSpec(url=current[name].url, workload=workload, out_path=default_out_path(name, results_dir),
                             profile=name)
            print(f"{name}: sweeping C={','.join(map(str, levels))}, {requests} requests per level", file=out, flush=True)
            results[name] = await run_sweep(spec)
            print(f"{name}: results in {results[name].path}", file=out, flush=True)

        print("", file=out)
        widths = (16, 4, 10, 9, 10, 9, 9, 7)
        print("  ".join(c.ljust(w) for c, w in zip(LEVEL_COLUMNS, widths)), file=out)
        for name, result in results.items():
            for level in result.levels:
                print("  ".join(c.ljust(w) for c, w in zip(level_cells(name, level.to_dict()), widths)), file=out)
        names = list(results)
        if len(names) >= 2:
            cross = crossover(results[names[0]].levels, results[names[1]].levels)
            verdict = (f"crossover: {names[1]} and {names[0]} cross at C≈{cross:.3g}" if cross is not None
                       else f"crossover: none in C={levels[0]}..{levels[-1]}")
            print(verdict, file=out, flush=True)
        return 0
    finally:
        for run_id in started:
            with contextlib.suppress(Exception):  # a run that already ended has nothing left to stop
                await manager.stop(run_id)
        await manager.close()
