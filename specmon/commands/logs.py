"""`specmon logs PROFILE|RUN_ID [-f] [-n N]`: the server log of a run (its latest run for a profile)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from specmon.commands._lifecycle import run_with_manager
from specmon.model.clean import PrintableStream, printable
from specmon.orchestration.runs import RunManager
from specmon.sources.tailer import LogTailer, TailBatch, last_lines
from specmon.sources.transport import TransportError

CHECK_S = 0.5


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("logs", help="show (and follow) a run's server log", description=__doc__)
    parser.add_argument("target", metavar="PROFILE|RUN_ID")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the run ends")
    parser.add_argument("-n", "--lines", type=int, default=50, metavar="N", help="start with the last N lines (50)")
    parser.set_defaults(func=run)


class _Printer:
    """Writes log batches to stdout as printable text: a log's escape sequences never reach the terminal."""

    def __init__(self) -> None:
        self._stream = PrintableStream()

    def write(self, batch: TailBatch, final: bool = False) -> None:
        if batch.note:
            print(f"specmon: {printable(batch.note)}", file=sys.stderr, flush=True)
        text = self._stream.feed(batch.data, final)
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    async def body(manager: RunManager) -> int:
        record = manager.find(args.target)
        ops = manager.ops(record.host)
        try:
            data, offset = await last_lines(ops.transport, record.log_path, max(0, args.lines))
        except TransportError as exc:
            print(f"specmon: error: {exc}", file=sys.stderr)
            return 2
        printer = _Printer()
        printer.write(TailBatch(data, 0, offset), final=not args.follow)
        if not args.follow:
            return 0
        tailer = LogTailer(ops.transport, record.log_path, offset)

        async def follow() -> None:
            async with contextlib.aclosing(tailer.follow()) as batches:
                async for batch in batches:
                    printer.write(batch)

        task = asyncio.create_task(follow())
        try:
            while not record.terminal and record.pid is not None:
                info, _, _ = await ops.run_status(record.run_dir, record.pid)
                if info is None or not info.alive or info.starttime != record.starttime:
                    break
                await asyncio.sleep(CHECK_S)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        printer.write(await tailer.drain(), final=True)
        return 0

    return run_with_manager(args, body)
