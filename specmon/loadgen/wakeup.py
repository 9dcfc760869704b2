"""Waking a coroutine at an exact time: an open loop's sends go out to the tens of microseconds of their schedule.

The event loop's own timers cannot do it alone: uvloop (libuv) keeps time in whole milliseconds, rounds a delay to
the nearest one and counts it from the loop's clock as of the start of the pass, so a sleep ends up to a millisecond
early or late whatever the load (measured: send lateness p99 1.2 ms at 100 req/s, the loop 10 % busy). So the
wake-up is also a Linux timerfd set to the absolute due time on CLOCK_MONOTONIC (the clock of
`time.perf_counter_ns`), watched by the loop like a socket: it turns readable at the due time (measured idle: 54 us
late p50, 0.19 ms p99), and the loop's next look at its file descriptors wakes the waiting coroutine. The loop's
timer still counts where it is on time: in a busy pass it runs before the pass's socket reads, where the timerfd's
waiter runs after them.

One `Wakeup` serves one waiter at a time (an open loop has one arrival waiting at a time). Where there is no
timerfd (not Linux, or libc not loadable) it falls back to the loop's timers and a final yield-until-due, which
never wakes early but may be up to a millisecond late.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import time

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = getattr(os, "O_CLOEXEC", 0o2000000)
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not hasattr(os, "sched_getaffinity"):   # not Linux
        return None
    try:
        # The process's own symbols, libc's among them (ctypes.util.find_library would run ldconfig: ~17 ms)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes, libc.timerfd_create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec),
                                         ctypes.POINTER(_Itimerspec)]
        libc.timerfd_settime.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


class Wakeup:
    """`await wakeup.at(due_ns)` returns at `due_ns` (time.perf_counter_ns), never before. Close it when done."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        self._spec = _Itimerspec()
        self._libc = _libc()
        self._fd = -1
        self._rang = False   # the timerfd rang during the current wait
        if self._libc is not None:
            fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd >= 0:
                self._fd = fd
                self._loop.add_reader(fd, self._fired)

    @property
    def precise(self) -> bool:
        """Whether wake-ups come from the kernel's timer (else the loop's millisecond timers)."""
        return self._fd >= 0

    async def at(self, due_ns: int) -> None:
        if self._waiter is not None:
            raise RuntimeError("Wakeup.at: another coroutine is already waiting")
        if self._fd < 0:
            await _coarse(due_ns)
            return
        while due_ns > time.perf_counter_ns():
            self._waiter = self._loop.create_future()
            self._arm(due_ns)
            # The loop's own timer as well: it runs at the start of a loop pass, before the pass's socket reads,
            # where the timerfd is seen among them and its waiter runs after all of them. Whichever comes first at
            # or after the due time wakes the waiter. The loop's timer is set for the first whole millisecond at or
            # after the due time (its clock, libuv's or asyncio's, is CLOCK_MONOTONIC too): set for the due time
            # itself, uvloop's millisecond rounding had it go off early about half the time, a wake-up of the
            # process that did nothing but wait again for the timerfd.
            timer = self._loop.call_at(-(-due_ns // 1_000_000) / 1000, self._timer_fired, due_ns)
            self._rang = False
            try:
                await self._waiter
            finally:
                timer.cancel()
                self._waiter = None
                if not self._rang:   # a timerfd that rang is disarmed (one-shot); else a cancelled wait or the
                    self._arm(0)     # loop's timer woke it: disarmed, so no wake-up is left behind

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def _arm(self, due_ns: int) -> None:
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(due_ns, 1_000_000_000)
        assert self._libc is not None
        if self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:   # disarmed after it turned readable
            return
        self._rang = True
        self._wake()

    def _timer_fired(self, due_ns: int) -> None:
        if time.perf_counter_ns() >= due_ns:
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


async def _coarse(due_ns: int) -> None:
    """The loop's timers up to a millisecond before `due_ns`, then yield until it (never early)."""
    while (left := due_ns - time.perf_counter_ns()) > 0:
        await asyncio.sleep(left / 1e9 - 0.001 if left > 2_000_000 else 0)
