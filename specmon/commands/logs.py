"""`specmon logs PROFILE|RUN_ID [-f] [-n N] [--node R]`: the server log of a run (its latest run for a profile;
every node's for a multi-node run)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from specmon.commands._args import nonneg_int
from specmon.commands._lifecycle import run_with_manager
from specmon.errors import UserError
from specmon.model.logs.clean import PrintableStream, printable
from specmon.model.runs.record import RunRecord
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.reconciler import process_ended
from specmon.orchestration.runs.view import node_prefix
from specmon.sources.tailer import LogTailer, TailBatch, last_lines
from specmon.sources.transport import TransportError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("logs", help="show (and follow) a run's server log", description=__doc__)
    parser.add_argument("target", metavar="PROFILE|RUN_ID")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the run ends")
    parser.add_argument("-n", "--lines", type=nonneg_int, default=50, metavar="N", help="start with the last N lines (50)")
    parser.add_argument("--node", type=int, metavar="R", help="a multi-node run: only node rank R's log (default: "
                        "every node's, each line starting with [node R])")
    parser.set_defaults(func=run)


class _Printer:
    """Writes log batches to stdout as printable text: a log's escape sequences never reach the terminal.

    With a prefix (a multi-node run's node, `[node R] `) every line starts with it."""

    def __init__(self, prefix: str = "") -> None:
        self._stream = PrintableStream()
        self._prefix = prefix

    def write(self, batch: TailBatch, final: bool = False) -> None:
        if batch.note:
            print(f"specmon: {self._prefix}{printable(batch.note)}", file=sys.stderr, flush=True)
        text = self._stream.feed(batch.data, final)
        if text and self._prefix:
            text = "".join(self._prefix + line for line in text.splitlines(keepends=True))
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()


def _targets(manager: RunManager, record: RunRecord, node: int | None) -> list[tuple[RunRecord, str]]:
    """The logs to show: a single run's, one node's (--node), or every node's with a `[node R] ` prefix."""
    nodes = manager.index.node_records(record)
    if node is None:
        return [(n, node_prefix(n.node_rank)) for n in nodes] or [(record, "")]
    if not nodes:
        raise UserError(f"run {record.run_id} (profile {record.profile}) has one node: leave out --node")
    if not 0 <= node < len(nodes):
        raise UserError(f"run {record.run_id} has nodes 0..{len(nodes) - 1}, not {node}")
    return [(nodes[node], "")]


async def _follow(manager: RunManager, record: RunRecord, offset: int, printer: _Printer) -> None:
    """Print new lines of one run's log until its process ends, then what is left."""
    tailer = LogTailer(manager.ops(record.host).transport, record.log_path, offset)

    async def follow() -> None:
        async with contextlib.aclosing(tailer.follow()) as batches:
            async for batch in batches:
                printer.write(batch)

    task = asyncio.create_task(follow())
    try:
        await process_ended(manager.ops(record.host), record)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    printer.write(await tailer.drain(), final=True)


def run(args: argparse.Namespace) -> int:
    async def body(manager: RunManager) -> int:
        targets = _targets(manager, manager.index.find(args.target), args.node)
        started = []
        for record, prefix in targets:
            ops = manager.ops(record.host)
            try:
                data, offset = await last_lines(ops.transport, record.log_path, args.lines)
            except TransportError as exc:
                print(f"specmon: error: {exc}", file=sys.stderr)
                return 2
            printer = _Printer(prefix)
            printer.write(TailBatch(data, 0, offset), final=not args.follow)
            started.append((record, offset, printer))
        if args.follow:
            await asyncio.gather(*(_follow(manager, record, offset, printer)
                                   for record, offset, printer in started))
        return 0

    return run_with_manager(args, body)
