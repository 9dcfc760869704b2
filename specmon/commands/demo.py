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
from pathlib import Path
from typing import TextIO

from specmon.commands._lifecycle import config_for
from specmon.errors import UserError
from specmon.model.config import Config, builtin_config, on_ports, one_wave_problem, parse_levels

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
    parser.add_argument("--requests", type=int, default=None,
                        help=f"requests per level in the headless sweep (default: {HEADLESS_REQUESTS}, or one full wave "
                        "of the highest level if that is more)")
    parser.add_argument("--results-dir", default="results", help="where sweep result files go (default %(default)s)")
    parser.add_argument("--ports", metavar="P1,P2",
                        help="run the demo's servers on these ports instead (when 30001/30002 are taken)")
    parser.set_defaults(func=run)


def demo_config(args: argparse.Namespace) -> Config:
    """The demo's profiles: those of --config when given (tests use fast ones), else the built-in demo pair;
    moved to --ports when given."""
    config = config_for(args) if getattr(args, "config", None) else builtin_config()
    ports = getattr(args, "ports", None)
    if ports:
        try:
            config = on_ports(config, [int(p) for p in ports.split(",")])
        except ValueError:
            raise UserError(f"--ports: {ports!r} is not a comma-separated list of port numbers") from None
    return config


def run(args: argparse.Namespace) -> int:
    config = demo_config(args)
    if args.headless:
        try:
            levels = parse_levels(args.levels)
        except ValueError as exc:
            raise UserError(f"--levels: {exc}") from None
        requests = max(HEADLESS_REQUESTS, levels[-1]) if args.requests is None else args.requests
        wave = one_wave_problem(requests, levels)
        if wave is not None:
            raise UserError(f"--requests: {wave}")
        return asyncio.run(headless(config, levels, requests, Path(args.results_dir), sys.stdout))
    from specmon.ui.app import run_app

    return run_app(config, demo=True, results_dir=Path(args.results_dir))


async def headless(config: Config, levels: tuple[int, ...], requests: int, results_dir: Path, out: TextIO) -> int:
    """Launch every profile, wait until ready (printing shard progress), sweep each, print the comparison."""
    from specmon.commands._table import table_text
    from specmon.commands.sweep import SweepPrinter
    from specmon.model.charts.levelrow import LEVEL_COLUMNS, LevelRow
    from specmon.model.text.numbers import fmt_shards
    from specmon.orchestration.measure.comparison import ComparisonUpdate, SweepStarted, SweepUpdated, sweep_profiles
    from specmon.orchestration.measure.sweep import WorkloadOverrides, workload_from
    from specmon.orchestration.runs.manager import RunManager
    from specmon.orchestration.runs.ready import wait_all_ready
    from specmon.orchestration.runs.view import RunView

    manager = RunManager(config)
    started: list[str] = []
    shown: dict[str, str] = {}

    def show(view: RunView) -> None:
        line = f"{view.state} shards {fmt_shards(*(view.shards or (None, None)))}"
        if shown.get(view.profile) != line:
            shown[view.profile] = line
            print(f"{view.profile}: {line}", file=out, flush=True)

    try:
        for name in config.profiles:
            view = await manager.launch(name, watch=True)
            started.append(view.run_id)
            print(f"{name}: launched run {view.run_id} (pid {view.pid}, port {view.port})", file=out, flush=True)
        # A stall is only a warning here: the demo's servers are simulated and keep loading.
        verdicts = await wait_all_ready(manager, started, timeout_s=READY_TIMEOUT_S, stop_at_stall=False,
                                        on_progress=show)
        for verdict in verdicts:
            show(verdict.view)
            if verdict.outcome == "timeout":
                print(f"not ready after {READY_TIMEOUT_S:.0f} s", file=out, flush=True)
                return 1
            if not verdict.ready:
                print(f"{verdict.view.profile}: FAILED: {verdict.reason}", file=out, flush=True)
                return 1

        workload = workload_from(config.sweep, WorkloadOverrides(levels=levels, requests_per_level=requests))
        printer = SweepPrinter(out)   # each level as `specmon sweep` prints it: no silent minute per profile

        def sweeping(u: ComparisonUpdate) -> None:
            if isinstance(u, SweepStarted):
                printer.prefix = f"{u.profile}: "
                print(f"{u.profile}: sweeping C={','.join(map(str, levels))}, {requests} requests per level", file=out,
                      flush=True)
            elif isinstance(u, SweepUpdated):
                printer.show(u.update)
            else:
                printer.end()
                print(f"{u.profile}: results in {u.result.path}", file=out, flush=True)

        comparison = await sweep_profiles([v.view for v in verdicts], workload, results_dir=results_dir,
                                          on_update=sweeping)

        print("", file=out)
        rows = [LevelRow.of_level(level).cells(r.label) for r in comparison.results for level in r.levels]
        print(table_text(LEVEL_COLUMNS, rows, out=out), file=out)
        for warning in comparison.warnings:
            print(f"warning: {warning}", file=out, flush=True)
        if comparison.failures:
            # The same rule as `specmon sweep`: a sweep of failures is no measurement, and no crossover either.
            print("specmon: demo failed: " + "; ".join(comparison.failures), file=sys.stderr, flush=True)
            return 1
        words = comparison.crossover_text()
        if words is not None:
            print(f"crossover: {words}", file=out, flush=True)
        return 0
    finally:
        for run_id in started:
            with contextlib.suppress(Exception):  # a run that already ended has nothing left to stop
                await manager.stop(run_id)
        await manager.close()
