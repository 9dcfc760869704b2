"""Process entry of the load generator: `python -m specmon.loadgen`, started by specmon.orchestration.measure.sweep.

Protocol (one JSON object per line, UTF-8):
- stdin, first line: {"url", "model", "workload": Workload.to_dict(), "records_path": str | null,
  "api_key_env": str | null}. The API key itself travels only in the environment variable named there.
  After that line stdin stays open; end-of-file (the parent went away) or SIGTERM/SIGINT stops the sweep:
  the level in progress is abandoned, finished levels have already been reported.
- stdout: {"type": "progress", ...SweepProgress}, {"type": "level", "level": LevelResult.to_dict()},
  {"type": "warning", "message"}, and last {"type": "done"}, {"type": "stopped"} or {"type": "fatal", "message"}.
- A workload with `processes` > 1 is sent by that many parts, this process coordinating them (loadgen.shards);
  a part (`--part k/N`) also writes {"type": "ready", "level"} and its request records on stdout, and takes
  {"start", "level"} lines on stdin.
The event loop is uvloop where available; nothing else runs in this process, so no UI work can shift a timestamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from specmon.errors import UserError
from specmon.loadgen.runner import Part, SweepRunner
from specmon.loadgen.shards import ShardedSweep, part_of
from specmon.loadgen.workload import Workload

EXIT_GRACE_S = 3.0   # after a stop, how long the sweep has to end in order before the process just exits
EXIT_STOPPED = 3


def _emit(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class _Stopper:
    """Stops the sweep on SIGTERM/SIGINT or end of stdin, whatever the process is doing at that moment.

    The signal handler is a plain Python one (it runs between two bytecodes even while the loop is busy building a
    level) and stdin is watched from a thread (it sees the parent go away without the loop's help). Either asks the
    loop to cancel the sweep, and arms a last-resort exit EXIT_GRACE_S later, in case the loop never gets to it:
    the generator never outlives the specmon that started it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, main: asyncio.Task[Any],
                 on_line: Callable[[bytes], None] | None = None) -> None:
        self._loop, self._main, self._on_line = loop, main, on_line
        self._armed = threading.Lock()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _sig, _frame: self.stop())
        threading.Thread(target=self._watch_stdin, name="stdin-eof", daemon=True).start()

    def stop(self) -> None:
        if not self._armed.acquire(blocking=False):
            return
        timer = threading.Timer(EXIT_GRACE_S, os._exit, (EXIT_STOPPED,))
        timer.daemon = True
        timer.start()
        with contextlib.suppress(RuntimeError):   # the loop has closed: the process is ending anyway
            self._loop.call_soon_threadsafe(self._main.cancel)

    def _watch_stdin(self) -> None:
        # os.read, not sys.stdin: a daemon thread blocked inside a buffered reader's lock aborts the interpreter's
        # exit. The parent sends nothing after the spec line (a coordinator sends its parts their start lines, handed
        # to the loop); anything else is read and dropped.
        pending = b""
        with contextlib.suppress(OSError, RuntimeError):   # RuntimeError: the loop has closed
            while data := os.read(0, 4096):
                if self._on_line is None:
                    continue
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    self._loop.call_soon_threadsafe(self._on_line, line)
        self.stop()


async def _main(spec: dict[str, Any], part: tuple[int, int] | None) -> int:
    loop = asyncio.get_running_loop()
    starts: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    main = loop.create_task(_sweep(spec, part, starts))
    _Stopper(loop, main, None if part is None else lambda line: starts.put_nowait(json.loads(line)))
    try:
        await main
    except asyncio.CancelledError:
        _emit({"type": "stopped"})
        return 0
    _emit({"type": "done"})
    return 0


async def _sweep(spec: dict[str, Any], part: tuple[int, int] | None, starts: asyncio.Queue[dict[str, Any]]) -> None:
    await asyncio.sleep(0)   # the stop handlers are in place before any work is built
    workload = Workload.from_dict(spec["workload"])
    if workload.processes > 1 and part is None:
        await ShardedSweep(spec, workload, _emit).run()
        return
    dataset = workload.load_dataset()
    key_env = spec.get("api_key_env")

    async def start_together(level: int) -> int:
        _emit({"type": "ready", "level": level})
        while (msg := await starts.get()).get("level") != level:
            pass
        return int(msg["start"])

    runner = SweepRunner(spec["url"], spec["model"], workload, _emit, spec.get("records_path"),
                         api_key=os.environ.get(key_env) if key_env else None, dataset=dataset,
                         part=None if part is None else Part(part[0], part[1], start_together),
                         records_fd=None if part is None else sys.stdout.fileno())
    await runner.run()


def main() -> int:
    part = None
    if sys.argv[1:2] == ["--part"] and len(sys.argv) == 3:
        part = part_of(sys.argv[2])
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
        return runner(_main(spec, part))
    except UserError as exc:
        _emit({"type": "fatal", "message": str(exc)})
        return 2


if __name__ == "__main__":
    sys.exit(main())
