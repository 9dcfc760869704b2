"""`specmon launch PROFILE [--wait]`: start a server detached from specmon (it outlives this command)."""

from __future__ import annotations

import argparse
import sys

from specmon.commands._lifecycle import run_with_manager
from specmon.commands.wait import add_wait_options, wait_for
from specmon.orchestration.runs.manager import RunManager


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("launch", help="start a profile's server (detached)", description=__doc__)
    parser.add_argument("profile", metavar="PROFILE")
    parser.add_argument("--wait", action="store_true",
                        help="then wait like `specmon wait` (exit 0 ready, 1 failed, 3 stalled or timed out)")
    add_wait_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def body(manager: RunManager) -> int:
        view = await manager.launch(args.profile, watch=False)
        print(f"launched {view.profile} run {view.run_id} on {view.host} ({view.job or f'pid {view.pid}'}, "
              f"port {view.port}); "
              f"log: {view.log_path}", file=sys.stderr, flush=True)
        if not args.wait:
            print(view.run_id)
            return 0
        return await wait_for(manager, view.run_id, args)

    return run_with_manager(args, body)
