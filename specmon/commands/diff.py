"""`specmon diff A B [--json] [--all]`: what differs between two profiles or runs: environment (launch, start-up
injections, process, NCCL log), key launch arguments, versions and server facts. Exit code 1 when they differ."""

from __future__ import annotations

import argparse
import json

from specmon.commands._lifecycle import run_with_manager
from specmon.model.machine.env import diff_lines
from specmon.orchestration.inspect.environment import diff_targets
from specmon.orchestration.runs.manager import RunManager


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("diff", help="differences between two profiles or runs", description=__doc__)
    parser.add_argument("a", metavar="A", help="profile name or run id")
    parser.add_argument("b", metavar="B", help="profile name or run id")
    parser.add_argument("--all", action="store_true", help="compare every variable, not only the GPU families")
    parser.add_argument("--json", action="store_true",
                        help="{a, b, differences: [{section, key, a, b}]} with both reports")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def body(manager: RunManager) -> int:
        a, b, diffs = await diff_targets(manager, args.a, args.b, args.all)
        if args.json:
            print(json.dumps({"a": a.to_json(args.all), "b": b.to_json(args.all),
                              "differences": [{"section": d.section, "key": d.key, "a": d.a, "b": d.b}
                                              for d in diffs]}, indent=2))
        else:
            print("\n".join(diff_lines(a, b, diffs)))
            for note in dict.fromkeys(a.notes + b.notes):   # the same host's note comes from both sides
                print(f"note: {note}")
        return 1 if diffs else 0

    return run_with_manager(args, body)
