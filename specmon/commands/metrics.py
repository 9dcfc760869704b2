"""`specmon metrics PROFILE|RUN`: the serving view of a READY server from its own /metrics: requests running and
waiting, KV-cache use, output tokens/s, prefix-cache hits, preemptions, speculative acceptance, and alerts.

Reads /metrics twice, one interval apart (rates need two reads), and prints the figures; `--follow` keeps reading
and prints a line per read (JSON lines with `--json`) until interrupted. A figure the server does not export is
"—" (null in JSON); a value no server can have (a ratio above 1, a negative count, 1e308) is left out and named.
Reaches a remote server through its host's SSH connection. Exit 1 when the server does not serve /metrics (SGLang
needs --enable-metrics), when a read gets no answer (its reason on stderr), or, following, once the server ended.

`--all`: every ready run known here (of every profiles file), hosts read at once, as a table with one row per run
(`--json`: a JSON object per line, one per run). A run that could not be read has its one-line reason in the row
(`error` in JSON) and exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from specmon.commands._args import positive_float
from specmon.commands._lifecycle import run_with_manager
from specmon.commands._table import Align, table_text
from specmon.errors import UserError
from specmon.model.runs.runstatus import RunStatus
from specmon.model.server.serving import ServingUpdate, figure_texts, update_of
from specmon.orchestration.inspect.serving import FleetReading, history_for, read_fleet, read_once, scraper_of, server_ending
from specmon.orchestration.runs.manager import RunManager


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("metrics", help="live server metrics of a ready run (running, waiting, KV, "
                                   "tok/s, acceptance)", description=__doc__)
    parser.add_argument("target", metavar="NAME|RUN", nargs="?", help="profile name (its latest run) or run id")
    parser.add_argument("--all", action="store_true", help="every ready run: a table, one row per run")
    parser.add_argument("--json", action="store_true",
                        help="print JSON (one object per line with --follow, or per run with --all)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep reading until interrupted")
    parser.add_argument("--interval", type=positive_float, metavar="S",
                        help="seconds between reads (default: the profile's metrics_interval_s, 1)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.all and (args.target is not None or args.follow):
        raise UserError("--all reads every ready run once: give no NAME|RUN and no --follow")
    if not args.all and args.target is None:
        raise UserError("name a profile or run, or give --all")
    return run_with_manager(args, lambda manager: show_all(manager, args) if args.all else show(manager, args))


def _line(update: ServingUpdate, as_json: bool) -> str:
    if as_json:
        return json.dumps(update.to_dict(), allow_nan=False)
    text = "  ".join(f"{label} {value}" for label, value in figure_texts(update.figures))
    ignored = update.ignored_text()
    return (f"{update.profile}: {text}" + "".join(f"  ⚠ {a}" for a in update.alerts)
            + ("" if ignored is None else f"  ({ignored})"))


async def show(manager: RunManager, args: argparse.Namespace) -> int:
    run_id = manager.index.find(args.target).run_id
    view = next((v for v in await manager.refresh() if v.run_id == run_id), None) or manager.view(run_id)
    if view.state != RunStatus.READY:
        raise UserError(f"{view.profile} ({run_id}) is {view.state}, not ready: no serving metrics to read")
    profile = manager.config.profiles.get(view.profile)
    interval = args.interval or (profile.metrics_interval_s if profile else 1.0)
    if interval <= 0:
        raise UserError(f"--interval must be > 0, got {interval}")
    history = history_for(profile)
    scraper = scraper_of(manager, view, interval)
    try:
        reads = 0
        while True:
            started = time.monotonic()
            note, _ = await read_once(scraper, history)
            reads += 1
            if note is not None:
                print(f"specmon: {view.profile}: {note}", flush=True)
                return 1
            if history.failing is not None and not args.follow:
                print(f"specmon: {view.profile}: /metrics did not answer: {history.failing}", file=sys.stderr, flush=True)
                return 1
            if history.failing is not None and await server_ending(manager, run_id):   # following: ends with it
                print(f"specmon: {view.profile}: the server ended", file=sys.stderr, flush=True)
                return 1
            if args.follow or reads >= 2:
                print(_line(update_of(view.profile, run_id, history, time.monotonic()), args.json), flush=True)
                if not args.follow:
                    return 0
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        await scraper.aclose()


def _fleet_row(reading: FleetReading) -> tuple[str, ...]:
    """A run's row of the --all table: the figures a fleet is watched by, then alerts or why it was not read."""
    update = reading.update
    figures = dict(figure_texts(update.figures))
    note = reading.error or "; ".join(update.alerts) or update.ignored_text() or ""
    if reading.error is not None:
        figures = dict.fromkeys(figures, "-")
    return (update.profile, reading.view.host, figures["running"], figures["waiting"], figures["KV"],
            figures["tok/s"], figures["accept"], note)


async def show_all(manager: RunManager, args: argparse.Namespace) -> int:
    readings = await read_fleet(manager, args.interval or 1.0)
    for reason in manager.unanswered.values():
        print(f"specmon: warning: {reason} (its runs are not read)", file=sys.stderr)
    if not readings:
        print("specmon: no ready run to read", file=sys.stderr)
        return 0
    if args.json:
        for reading in readings:
            print(json.dumps({**reading.update.to_dict(), "host": reading.view.host, "error": reading.error},
                             allow_nan=False))
    else:
        align: list[Align] = ["left", "left", "right", "right", "right", "right", "right", "left"]
        print(table_text(("PROFILE", "HOST", "RUN", "WAIT", "KV", "TOK/S", "ACCEPT", "NOTE"),
                         [_fleet_row(r) for r in readings], align=align))
    return 1 if any(r.error is not None for r in readings) else 0
