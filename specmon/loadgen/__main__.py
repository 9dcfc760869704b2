"""Process entry of the load generator: `python -m specmon.loadgen`, started by specmon.orchestration.sweep.

Protocol (one JSON object per line, UTF-8):
- stdin, first line: {"url", "model", "workload": Workload.to_dict(), "records_path": str | null,
  "api_key_env": str | null}. The API key itself travels only in the environment variable named there.
  After that line stdin stays open; end-of-file (the parent went away) or SIGTERM/SIGINT stops the sweep:
  the level in progress is abandoned, finished levels have already been reported.
- stdout: {"type": "progress", ...SweepProgress}, {"type": "level", "level": LevelResult.to_dict()},
  {"type": "warning", "message"}, and last {"type": "done"}, {"type": "stopped"} or {"type": "fatal", "message"}.
The event loop is uvloop where available; nothing else runs in this process, so no UI work can shift a timestamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from typing import Any

from specmon.errors import UserError
from specmon.loadgen.runner import SweepRunner
from specmon.loadgen.workload import Workload


def _emit(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def _watch_stdin(main: asyncio.Task[Any]) -> None:
    """Cancel the sweep when the parent closes our stdin (or dies)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass
    main.cancel()


async def _main(spec: dict[str, Any]) -> int:
    workload = Workload.from_dict(spec["workload"])
    dataset = workload.load_dataset()
    key_env = spec.get("api_key_env")
    runner = SweepRunner(spec["url"], spec["model"], workload, _emit, spec.get("records_path"),
                         api_key=os.environ.get(key_env) if key_env else None, dataset=dataset)
    loop = asyncio.get_running_loop()
    main = loop.create_task(runner.run())
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
    watcher = loop.create_task(_watch_stdin(main))
    try:
        await main
    except asyncio.CancelledError:
        _emit({"type": "stopped"})
        return 0
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    _emit({"type": "done"})
    return 0


def main() -> int:
    line = sys.stdin.readline()
    try:
        spec = json.loads(line)
    except json.JSONDecodeError as exc:
        _emit({"type": "fatal", "message": f"bad spec line on stdin: {exc}"})
        return 2
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        return runner(_main(spec))
    except UserError as exc:
        _emit({"type": "fatal", "message": str(exc)})
        return 2


if __name__ == "__main__":
    sys.exit(main())
