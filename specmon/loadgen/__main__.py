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
import threading
from typing import Any

from specmon.errors import UserError
from specmon.loadgen.runner import SweepRunner
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

    def __init__(self, loop: asyncio.AbstractEventLoop, main: asyncio.Task[Any]) -> None:
        self._loop, self._main = loop, main
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
        # exit. The parent sends nothing after the spec line; whatever comes is read and dropped.
        with contextlib.suppress(OSError):
            while os.read(0, 4096):
                pass
        self.stop()


async def _main(spec: dict[str, Any]) -> int:
    loop = asyncio.get_running_loop()
    main = loop.create_task(_sweep(spec))
    _Stopper(loop, main)
    try:
        await main
    except asyncio.CancelledError:
        _emit({"type": "stopped"})
        return 0
    _emit({"type": "done"})
    return 0


async def _sweep(spec: dict[str, Any]) -> None:
    await asyncio.sleep(0)   # the stop handlers are in place before any work is built
    workload = Workload.from_dict(spec["workload"])
    dataset = workload.load_dataset()
    key_env = spec.get("api_key_env")
    runner = SweepRunner(spec["url"], spec["model"], workload, _emit, spec.get("records_path"),
                         api_key=os.environ.get(key_env) if key_env else None, dataset=dataset)
    await runner.run()


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
