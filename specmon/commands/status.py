"""`specmon status [--json] [--host HOST [--adopt RUN_ID]]`: every known run, checked now (process alive? exit
code? log progress?). With --host: that host's runs, plus the runs found in its ~/.specmon/runs that this
specmon does not know (launched from another jump box, or before the local state was lost); --adopt takes one
of those into the local index so every command and the TUI can follow and stop it."""

from __future__ import annotations

import argparse
import dataclasses
import json

from specmon.commands._lifecycle import run_with_manager, status_json
from specmon.errors import UserError
from specmon.orchestration.runs import HostRun, RunManager
from specmon.orchestration.runview import RunView


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("status", help="list runs and their state", description=__doc__)
    parser.add_argument("--json", action="store_true",
                        help="a JSON list of {run_id, profile, host, state, pid, port, url, started_at, ready_at, "
                        "load_seconds, shards, kv_cache_tokens, exit_code, failure} (a multi-node run adds nodes: "
                        "the same for each node, with its node_rank); with --host an object "
                        "{runs: [...], adoptable: [{run_id, profile, port, launched_at, pid, running, exit_code}]}")
    parser.add_argument("--host", metavar="HOST",
                        help="only this host's runs, plus runs found on it that are unknown here (adoptable)")
    parser.add_argument("--adopt", metavar="RUN_ID", help="with --host: take this run found on the host into "
                        "the local index (then status, wait, logs, stop and the TUI follow it)")
    parser.set_defaults(func=run)


def _row(v: RunView, label: str | None = None) -> tuple[str, ...]:
    shards = f"{v.shards[0]}/{v.shards[1]}" if v.shards else "-"
    load = f"{v.load_seconds:.1f}s" if v.load_seconds is not None else "-"
    # A remote run's own loopback URL means nothing on this machine: say where it is instead.
    where = f"{v.host} 127.0.0.1:{v.port} (over SSH)" if v.host != "local" and v.url == \
        f"http://127.0.0.1:{v.port}" else v.url
    note = f"{v.failure.kind}: {v.failure.message}" if v.failure else (where if v.state == "ready" else "")
    if v.stalled:
        note = f"STALLED: {v.stall_reason}"
    elif v.node_rank is not None and not v.failure and v.state in ("launching", "loading"):
        note = v.phase or ""
    return (label or v.profile, v.run_id, v.state, str(v.pid or "-"), str(v.port), shards, load, note)


def _rows(v: RunView) -> list[tuple[str, ...]]:
    """A run's row, then (for a multi-node run) one indented row per node."""
    return [_row(v)] + [_row(node, f"  node {node.node_rank} {node.host}") for node in v.nodes]


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])


def _found_row(r: HostRun) -> tuple[str, ...]:
    state = "running" if r.running else f"ended (exit {r.exit_code})" if r.exit_code is not None else "gone"
    return (r.profile, r.run_id, state, str(r.pid or "-"), str(r.port), r.launched_at)


def run(args: argparse.Namespace) -> int:
    if args.adopt and not args.host:
        raise UserError("--adopt needs --host HOST (the host whose run directory holds the run)")

    async def body(manager: RunManager) -> int:
        if args.adopt:
            view = await manager.adopt(args.host, args.adopt)
            print(f"adopted {view.run_id} (profile {view.profile}) on {args.host}: {view.state}")
        views = await manager.refresh()
        found: list[HostRun] = []
        if args.host:
            views = [v for v in views if args.host in (v.host, *(node.host for node in v.nodes))]
            found = await manager.host_runs(args.host)
        if args.json:
            if args.host:
                print(json.dumps({"runs": [v.to_json() for v in views],
                                  "adoptable": [dataclasses.asdict(r) for r in found]}, indent=2))
            else:
                print(status_json(views))
            return 0
        if views:
            _table([("PROFILE", "RUN", "STATE", "PID", "PORT", "SHARDS", "LOAD", "")]
                   + [r for v in views for r in _rows(v)])
        elif not found:
            print("no runs" + (f" on {args.host}" if args.host else ""))
        if found:
            print(f"\non {args.host}, not known here (adopt with `specmon status --host {args.host} --adopt RUN`):")
            _table([("PROFILE", "RUN", "STATE", "PID", "PORT", "LAUNCHED")] + [_found_row(r) for r in found])
        return 0

    return run_with_manager(args, body)
