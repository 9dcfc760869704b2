"""The GPU probe of one host: a long-lived `nvidia-smi --query-gpu=... -lms N` stream plus a slower poll of the
compute processes and the specmon run each belongs to, all through a Transport (so local and SSH hosts alike).

    probe = GpuProbe(transport, interval_s=1.0, apps_every_s=5.0, on_update=callback)
    probe.start()           # owns two tasks until `await probe.close()`
    probe.board             # specmon.model.machine.gpu.GpuBoard: latest sample, history, holders; `.error` when stale
    board = await snapshot(transport)   # one query + one apps poll, for `specmon gpus`

Contract:
- The stream is re-armed when it ends or fails (1 s, doubling to 30 s while it keeps failing; back to 1 s once
  a tick arrives). A stream silent for `silence_s` is taken as hung: it is ended (its process group killed by
  the transport) and re-armed; the board keeps the last numbers and says why they are stale.
- Missing nvidia-smi, a field nvidia-smi refuses, a dropped link: `board.error` says so in one line; nothing
  raises out of the probe's tasks.
- A process's run comes from the `SPECMON_RUN_ID` marker in its /proc/PID/environ (the lifecycle engine sets it
  on every server, and workers inherit it). nvidia-smi ignores CUDA_VISIBLE_DEVICES, so a run's GPUs are those
  its processes hold, by UUID.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from specmon.model.machine.gpu import (
    APPS_FIELDS,
    QUERY_FIELDS,
    ComputeApp,
    GpuBoard,
    QueryStream,
    SmiError,
    parse_apps,
    parse_query,
    parse_run_markers,
)
from specmon.sources import timelimit
from specmon.sources.transport import Transport, TransportError

log = logging.getLogger(__name__)

MISSING = 127
_NOT_FOUND = "command -v nvidia-smi >/dev/null 2>&1 || { echo 'nvidia-smi: not found on PATH'; exit 127; }; "
_QUERY = f"nvidia-smi --query-gpu={','.join(QUERY_FIELDS)} --format=csv,noheader,nounits"
# One round trip: the compute processes, then "PID [SPECMON_RUN_ID=...]" for each distinct pid.
_APPS = (
    _NOT_FOUND
    + f"out=$(nvidia-smi --query-compute-apps={','.join(APPS_FIELDS)} --format=csv,noheader,nounits 2>&1); rc=$?; "
    "printf '%s\\n' \"$out\"; echo '<<markers>>'; "
    "[ $rc -eq 0 ] && printf '%s\\n' \"$out\" | while IFS=, read -r _ pid _; do "
    "pid=$(echo $pid); case $pid in ''|*[!0-9]*) continue;; esac; "
    "r=$(tr '\\0' '\\n' < /proc/$pid/environ 2>/dev/null | grep -m1 '^SPECMON_RUN_ID='); echo \"$pid $r\"; "
    "done; exit $rc"
)


def stream_command(interval_s: float) -> str:
    """The shell command of the stream (stderr folded in so an error line reaches the parser)."""
    return f"{_NOT_FOUND}exec {_QUERY} -lms {max(100, int(interval_s * 1000))} 2>&1"


def _failure(host: str, code: int | None, detail: str) -> str:
    if code == MISSING:
        return f"{host}: nvidia-smi not found (no NVIDIA driver here?)"
    if code is None:
        return f"{host}: nvidia-smi stream lost (link dropped)"
    return f"{host}: nvidia-smi exited with status {code}" + (f": {detail}" if detail else "")


async def poll_apps(transport: Transport, timeout_s: float = 20.0) -> tuple[list[ComputeApp], dict[int, str | None]]:
    """The host's compute processes and pid -> SPECMON_RUN_ID. Raises SmiError/TransportError/TimeoutError."""
    result = await transport.run(_APPS, timeout=timeout_s)
    apps_text, _, markers = result.out.partition("<<markers>>")
    if result.exit_code == MISSING:
        raise SmiError(_failure(transport.host, MISSING, ""))
    if not result.ok:
        detail = apps_text.strip().splitlines()[-1] if apps_text.strip() else ""
        raise SmiError(_failure(transport.host, result.exit_code, detail))
    return parse_apps(apps_text), parse_run_markers(markers)


async def snapshot(transport: Transport, timeout_s: float = 20.0, history: int = 1) -> GpuBoard:
    """One query of every GPU and of the compute processes (for `specmon gpus`). Errors land in `board.error`
    (the GPUs could not be read) or `board.apps_error` (the holders could not), never as exceptions."""
    board = GpuBoard(history)
    try:
        result = await transport.run(_NOT_FOUND + _QUERY + " 2>&1", timeout=timeout_s)
        if not result.ok:
            lines = result.out.strip().splitlines()
            board.mark_stale(_failure(transport.host, result.exit_code, lines[-1] if lines else ""))
            return board
        board.add_tick({s.uuid: s for s in parse_query(result.out)}, time.monotonic())
    except TimeoutError:
        board.mark_stale(f"{transport.host}: nvidia-smi did not answer within {timeout_s:.0f} s (hung)")
        return board
    except (SmiError, TransportError) as exc:
        board.mark_stale(str(exc))
        return board
    try:
        apps, runs = await poll_apps(transport, timeout_s)
        board.set_apps(apps, runs)
    except TimeoutError:
        board.apps_error = f"{transport.host}: nvidia-smi compute-apps did not answer within {timeout_s:.0f} s"
    except (SmiError, TransportError) as exc:
        board.apps_error = str(exc)
    return board


class GpuProbe:
    """Keeps `board` current for one host. See the module docstring."""

    def __init__(self, transport: Transport, *, interval_s: float = 1.0, apps_every_s: float = 5.0,
                 silence_s: float | None = None, history: int = 120,
                 on_update: Callable[[], None] | None = None) -> None:
        self.transport = transport
        self.interval_s = interval_s
        self.apps_every_s = apps_every_s
        # Silence this long means hung: generous, since a loaded host can delay a tick by seconds.
        self.silence_s = silence_s if silence_s is not None else max(10.0, 5 * interval_s)
        self.board = GpuBoard(history)
        self.on_update = on_update
        self.restarts = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._gpus_seen: asyncio.Event | None = None   # set by the first tick: until then there is nothing to hold

    def start(self) -> None:
        """Start the stream and the apps poll (idempotent)."""
        if not self._tasks:
            self._gpus_seen = asyncio.Event()
            self._tasks = [asyncio.ensure_future(self._stream_loop()), asyncio.ensure_future(self._apps_loop())]

    async def close(self) -> None:
        """Cancel both tasks and wait until they have ended; the transport ends the nvidia-smi it started.
        (Their reads are time-limited through sources/timelimit, which never loses a cancellation.)"""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def _changed(self) -> None:
        if self.on_update is not None:
            try:
                self.on_update()
            except Exception:   # a front end's bug must not stop the probe
                log.exception("GPU probe subscriber failed")

    async def _stream_loop(self) -> None:
        backoff = 1.0
        while True:
            got_tick = await self._stream_once()
            self._changed()
            backoff = 1.0 if got_tick else min(backoff * 2, 30.0)
            await asyncio.sleep(backoff)
            self.restarts += 1

    async def _stream_once(self) -> bool:
        """Run one nvidia-smi stream until it ends, fails or hangs; True if any tick arrived."""
        host = self.transport.host
        parser = QueryStream()
        got_tick = False
        try:
            async with self.transport.stream(stream_command(self.interval_s)) as out:
                while True:
                    try:
                        chunk = await timelimit.wait_for(out.read_chunk(), self.silence_s)
                    except asyncio.TimeoutError:
                        self.board.mark_stale(f"{host}: nvidia-smi sent nothing for {self.silence_s:.0f} s "
                                              "(hung); restarting it")
                        return got_tick
                    if not chunk:
                        break
                    ticks = parser.feed(chunk)
                    for tick in ticks:
                        self.board.add_tick(tick, time.monotonic())
                        got_tick = True
                    if ticks:
                        assert self._gpus_seen is not None
                        self._gpus_seen.set()
                        self._changed()
            self.board.mark_stale(_failure(host, out.exit_code, parser.last_skipped))
        except SmiError as exc:
            self.board.mark_stale(f"{host}: {exc}")
        except TransportError as exc:
            self.board.mark_stale(str(exc))
        return got_tick

    async def _apps_loop(self) -> None:
        # A host without GPUs (a jump box, most often) gets no compute-apps query at all: one less process
        # started every apps_every_s, for as long as the TUI stays open.
        assert self._gpus_seen is not None
        await self._gpus_seen.wait()
        while True:
            try:
                apps, runs = await poll_apps(self.transport, timeout_s=max(20.0, 2 * self.apps_every_s))
                self.board.set_apps(apps, runs)
            except TimeoutError:
                self.board.apps_error = f"{self.transport.host}: nvidia-smi compute-apps hung; will retry"
            except (SmiError, TransportError) as exc:
                self.board.apps_error = str(exc)
            self._changed()
            await asyncio.sleep(self.apps_every_s)

