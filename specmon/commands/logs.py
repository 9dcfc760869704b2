"""`specmon logs PROFILE|RUN_ID [-f] [-n N]`: the server log of a run (its latest run for a profile)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from specmon.commands._lifecycle import run_with_manager
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


def _write(batch: TailBatch) -> None:
    if batch.note:
        print(f"specmon: {batch.note}", file=sys.stderr, flush=True)
    if batch.data:
        sys.stdout.buffer.write(batch.data)
        sys.stdout.buffer.flush()


def run(args: argparse.Namespace) -> int:
    async def body(manager: RunManager) -> int:
        record = manager.find(args.target)
        ops = manager.ops(record.host)
        try:
            data, offset = await last_lines(ops.transport, record.log_path, max(0, args.lines))
        except TransportError as exc:
            print(f"specmon: error: {exc}", file=sys.stderr)
            return 2
        _write(TailBatch(data, 0, offset))
        if not args.follow:
            return 0
        tailer = LogTailer(ops.transport, record.log_path, offset)

        async def follow() -> None:
            async with contextlib.aclosing(tailer.follow()) as batches:
                async for batch in batches:
                    _write(batch)

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
        _write(await tailer.drain())
        return 0

    return run_with_manager(args, body)
