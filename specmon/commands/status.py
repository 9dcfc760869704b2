"""`specmon status [--json]`: every known run, checked now (process alive? exit code? log progress?)."""

from __future__ import annotations

import argparse

from specmon.commands._lifecycle import run_with_manager, status_json
from specmon.orchestration.runs import RunManager
from specmon.orchestration.runview import RunView


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("status", help="list runs and their state", description=__doc__)
    parser.add_argument("--json", action="store_true",
                        help="a JSON list of {run_id, profile, host, state, pid, port, url, started_at, ready_at, "
                        "load_seconds, shards, kv_cache_tokens, exit_code, failure}")
    parser.set_defaults(func=run)


def _row(v: RunView) -> tuple[str, ...]:
    shards = f"{v.shards[0]}/{v.shards[1]}" if v.shards else "-"
    load = f"{v.load_seconds:.1f}s" if v.load_seconds is not None else "-"
    note = f"{v.failure.kind}: {v.failure.message}" if v.failure else (v.url if v.state == "ready" else "")
    if v.stalled:
        note = f"STALLED: {v.stall_reason}"
    return (v.profile, v.run_id, v.state, str(v.pid or "-"), str(v.port), shards, load, note)


def run(args: argparse.Namespace) -> int:
    async def body(manager: RunManager) -> int:
        views = await manager.refresh()
        if args.json:
            print(status_json(views))
            return 0
        if not views:
            print("no runs")
            return 0
        rows = [("PROFILE", "RUN", "STATE", "PID", "PORT", "SHARDS", "LOAD", "")] + [_row(v) for v in views]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
        return 0

    return run_with_manager(args, body)
