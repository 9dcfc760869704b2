"""`specmon forget RUN_ID|PROFILE ... | --older-than DAYS`: delete the records of ended runs.

Only specmon's own record goes (the run drops out of `status`); the run directory on the host, with its log,
stays. A run that may still be running is never forgotten: stop it first. A profile name means every ended
run of that profile launched from this profiles file; an unreadable record is forgotten by its run id.
"""

from __future__ import annotations

import argparse
import time

from specmon.commands._lifecycle import run_with_manager
from specmon.errors import UserError
from specmon.model.runs.record import RunRecord
from specmon.orchestration.runs.manager import RunManager


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("forget", help="delete the records of ended runs", description=__doc__)
    parser.add_argument("targets", nargs="*", metavar="RUN_ID|PROFILE")
    parser.add_argument("--older-than", type=float, metavar="DAYS",
                        help="every ended run of this profiles file started more than DAYS days ago")
    parser.set_defaults(func=run)


def _chosen(manager: RunManager, args: argparse.Namespace) -> tuple[list[RunRecord], list[str]]:
    records = manager.index.store.all()
    by_id = {r.run_id: r for r in records}
    broken = {u.run_id for u in manager.index.unreadable()}
    chosen: dict[str, RunRecord] = {}
    unreadable: list[str] = []
    for target in args.targets:
        if target in by_id:
            record = by_id[target]
            if not record.terminal:
                raise UserError(f"run {target} ({record.profile}) is {record.state}: stop it first")
            chosen[target] = record
        elif target in broken:
            unreadable.append(target)
        else:
            matches = [r for r in records if r.profile == target and manager.index.mine(r)]
            if not matches:
                raise UserError(f"no run of profile or run id {target!r} from {manager.config.source} is known")
            chosen.update((r.run_id, r) for r in matches if r.terminal)
    if args.older_than is not None:
        cutoff = time.time() - args.older_than * 86400
        chosen.update((r.run_id, r) for r in records if r.terminal and manager.index.mine(r) and r.started_at < cutoff)
    return list(chosen.values()), unreadable


def run(args: argparse.Namespace) -> int:
    if not args.targets and args.older_than is None:
        raise UserError("forget: name runs or profiles, or give --older-than DAYS")

    async def body(manager: RunManager) -> int:
        records, unreadable = _chosen(manager, args)
        for record in records:
            manager.index.store.forget(record.run_id)
        for run_id in unreadable:
            manager.index.store.forget(run_id)
        print(f"forgot {len(records) + len(unreadable)} run(s)")
        return 0

    return run_with_manager(args, body)
