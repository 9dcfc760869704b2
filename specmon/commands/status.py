"""`specmon status [--all] [--json] [--profile NAME] [--host HOST [--adopt RUN_ID]]`: runs and their state,
checked now.

By default: the runs launched from this profiles file that may still run, plus those started in the last
24 hours. `--all` lists every run specmon remembers, from every profiles file; `specmon forget` removes old
records. A state record that cannot be read is listed as `unreadable` and the others are still shown.
With --host: that host's runs, plus the runs found in its run directories that this specmon does not know
(launched from another jump box, or before the local state was lost); --adopt takes one of those into the
local index so every command and the TUI can follow and stop it.

A host that does not answer gets one line on stderr; its runs are listed as last recorded (NOTE: unchecked), the
others as checked now. Exit status: 0 when the runs were listed (some hosts may not have answered), 1 when no
host holding a run answered (nothing could be checked), 2 for a usage or profiles-file error, or a --host that
does not answer.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Collection

from specmon.commands._lifecycle import run_with_manager
from specmon.commands._table import table_text
from specmon.errors import UserError
from specmon.model.logs.clean import one_line
from specmon.model.runs.runstatus import STARTING
from specmon.model.text.secrets import redact_text, redact_value
from specmon.orchestration.runs.adoption import HostRun
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.store import Unreadable
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.view import RunView, unreadable_json

WINDOW_S = 24 * 3600     # ended runs older than this are listed only with --all
NOTE_CHARS = 72          # a failure reason longer than this is cut in the table (--json has it whole)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("status", help="list runs and their state", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true",
                        help="a JSON list of {run_id, profile, host, state, pid, port, url (null while a Slurm job has no node yet), started_at, ready_at, "
                        "load_seconds, shards, kv_cache_tokens, exit_code, failure, config, still_running (failed by the log while "
                        "the process still runs), and for a Slurm run slurm_job (its job id) and job (its state)}; an unreadable record "
                        "has state \"unreadable\" and its reason in \"error\"; a multi-node run adds nodes: the same for each "
                        "node, with its node_rank; with --host an object "
                        "{runs: [...], adoptable: [{run_id, profile, port, launched_at, pid, running, exit_code}]}")
    parser.add_argument("--all", action="store_true",
                        help="every remembered run, from every profiles file and of any age")
    # Also accepted before the command (`specmon --profile NAME status`), where it is a global option.
    parser.add_argument("--profile", metavar="NAME", default=argparse.SUPPRESS,
                        help="only the runs of this profile (of this profiles file)")
    parser.add_argument("--host", metavar="HOST",
                        help="only this host's runs, plus runs found on it that are unknown here (adoptable)")
    parser.add_argument("--adopt", metavar="RUN_ID", help="with --host: take this run found on the host into "
                        "the local index (then status, wait, logs, stop and the TUI follow it)")
    parser.set_defaults(func=run)


def _cut(text: str, limit: int = NOTE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row(v: RunView, mine: bool, label: str | None = None, unchecked: bool = False) -> tuple[str, ...]:
    shards = f"{v.shards[0]}/{v.shards[1]}" if v.shards else "-"
    load = f"{v.load_seconds:.1f}s" if v.load_seconds is not None else "-"
    note = ""
    if v.failure:
        note = _cut(redact_text(v.failure.text))
    if v.stalled:
        note = _cut(f"STALLED: {v.stall_reason}")
    elif v.node_rank is not None and not v.failure and v.state in STARTING:
        note = v.phase or ""
    elif v.job and v.active and not v.failure and v.job != f"job {v.slurm_job}":
        note = v.job
    if v.slurm_job is not None and v.node_rank is None:   # a multi-node run's nodes share its job
        note = f"job {v.slurm_job}" + (f": {note}" if note else "")
    note = _cut(note)
    if unchecked:
        note = "unchecked: its host did not answer" + (f"; {note}" if note else "")
    if not mine:
        note = (note + " " if note else "") + f"(from {v.config or 'an unknown profiles file'})"
    # A remote run's own loopback URL means nothing on this machine: say where it is instead. A queued Slurm job's
    # node (where its port will be) is not known yet.
    where = "pending (no node yet)" if v.url_pending else f"{v.host} 127.0.0.1:{v.port} (over SSH)" \
        if v.host != "local" and v.url == f"http://127.0.0.1:{v.port}" else v.url
    url = redact_value(where) if v.active and v.node_rank in (None, 0) else ""
    state = f"{v.state}, still running" if v.still_running else v.state
    return (label or v.profile, v.run_id, state, str(v.pid or "-"), str(v.port), shards, load, url, note)


def _rows(v: RunView, mine: bool, unanswered: Collection[str]) -> list[tuple[str, ...]]:
    """A run's row, then (for a multi-node run) one indented row per node."""
    return [_row(v, mine, unchecked=_unchecked(v, unanswered))] + [
        _row(node, mine, f"  node {node.node_rank} {node.host}", node.host in unanswered) for node in v.nodes]


def _unchecked(v: RunView, unanswered: Collection[str]) -> bool:
    return any(host in unanswered for host in (v.host, *(node.host for node in v.nodes)))


def _still_running(v: RunView, grace_s: float) -> str:
    """The line under the table for a run its log calls failed while its process runs on: what `stop` does."""
    return (f"run {v.run_id} ({v.profile}) {v.state} by its log, but its process is still running (pid {v.pid}, "
            f"port {v.port} may still be held): `specmon stop {v.run_id}` sends it SIGTERM, then SIGKILL after "
            f"{grace_s:.0f} s")


def _table(rows: list[tuple[str, ...]]) -> None:
    print(table_text(rows[0], rows[1:]))


def _found_row(r: HostRun) -> tuple[str, ...]:
    state = "running" if r.running else f"ended (exit {r.exit_code})" if r.exit_code is not None else "gone"
    return (r.profile, r.run_id, state, str(r.pid or "-"), str(r.port), r.launched_at)


def _unreadable_row(u: Unreadable) -> tuple[str, ...]:
    return ("?", u.run_id, "unreadable", "-", "-", "-", "-", "", _cut(f"{u.reason} ({u.path})", 2 * NOTE_CHARS))


def _json_of(v: RunView) -> dict[str, object]:
    data = v.to_json()
    if isinstance(data["url"], str):   # null while a queued Slurm job's node is not known
        data["url"] = redact_value(data["url"])
    failure = data["failure"]
    if isinstance(failure, dict):
        data["failure"] = {**failure, "message": redact_text(str(failure["message"]))}
    return data


def run(args: argparse.Namespace) -> int:
    if args.adopt and not args.host:
        raise UserError("--adopt needs --host HOST (the host whose run directory holds the run)")

    async def body(manager: RunManager) -> int:
        profile = getattr(args, "profile", None)
        if profile is not None:
            manager.config.profile(profile)   # an unknown name is a UserError naming the file
        if args.adopt:
            view = await manager.adopt(args.host, args.adopt)
            print(one_line(f"adopted {view.run_id} (profile {view.profile}) on {args.host}: {view.state}"))
        # A run found on a host and adopted belongs to no profiles file: --host lists every file's runs there.
        views = await manager.refresh(all_configs=args.all or bool(args.host))
        if profile is not None:
            views = [v for v in views if v.profile == profile and v.belongs_to(manager.index.config_key)]
        found: list[HostRun] = []
        if args.host:
            views = [v for v in views if args.host in (v.host, *(node.host for node in v.nodes))]
            found = await manager.host_runs(args.host)
        hidden = 0
        if not args.all:
            shown = [v for v in views if v.active or time.time() - v.started_at <= WINDOW_S]
            hidden = len(views) - len(shown)
            views = shown
        broken = manager.index.unreadable() if profile is None and not args.host else []
        for warning in manager.index.state_warnings:
            print(f"specmon: warning: {warning}", file=sys.stderr)
        unanswered = manager.unanswered
        for reason in unanswered.values():
            print(f"specmon: warning: {reason} (its runs are listed as last recorded)", file=sys.stderr)
        # Exit 1 when runs were to be checked and no host holding one answered: nothing here is known now.
        code = 1 if unanswered and views and all(_unchecked(v, unanswered) for v in views) else 0
        if args.json:
            runs = [_json_of(v) for v in views] + [unreadable_json(u.run_id, f"{u.reason} ({u.path})") for u in broken]
            if args.host:
                print(json.dumps({"runs": runs, "adoptable": [dataclasses.asdict(r) for r in found]}, indent=2))
            else:
                print(json.dumps(runs, indent=2))
            return code
        if views or broken:
            header = ("PROFILE", "RUN", "STATE", "PID", "PORT", "SHARDS", "LOAD", "URL", "NOTE")
            _table([header] + [r for v in views for r in _rows(v, v.belongs_to(manager.index.config_key), unanswered)]
                   + [_unreadable_row(u) for u in broken])
        elif not found:
            print("no runs" + (f" on {args.host}" if args.host else "")
                  + (f" (and {hidden} older: `specmon status --all`)" if hidden else ""))
        for v in (n for view in views for n in (view, *view.nodes) if n.still_running):
            print(_still_running(v, StopTimings().grace_s))
        if hidden and (views or broken):
            print(f"({hidden} run(s) ended over {WINDOW_S // 3600} h ago not shown: `specmon status --all` lists them, "
                  "`specmon forget` removes them)")
        if found:
            print(f"\non {args.host}, not known here (adopt with `specmon status --host {args.host} --adopt RUN`):")
            _table([("PROFILE", "RUN", "STATE", "PID", "PORT", "LAUNCHED")] + [_found_row(r) for r in found])
        return code

    return run_with_manager(args, body)
