"""The simulated engine: one asyncio scheduler loop doing continuous batching (see model.py).

The loop admits queued requests (FIFO, bounded by KV capacity and max running), sleeps until the
planned end of the step on an absolute deadline (so timer jitter never accumulates), then advances
every running request, pushing the step's token count into that request's queue. Per-step work is
O(batch) and allocation-free apart from the queue items, so one process keeps up with hundreds of streams.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from dataclasses import dataclass, field

from specmon.sim import model as throughput
from specmon.sim.logwriter import DecodeStats, LaunchLog

# When the loop falls this far behind its deadline (a stalled box), restart the clock instead of
# bursting through the missed steps.
_MAX_LAG_S = 0.25
# The last stretch before a step deadline is spent yielding in a loop instead of on a timer (costs ~0.5 ms
# of CPU per step, only while requests run).
_SPIN_S = 0.001


@dataclass(eq=False)
class Request:
    """One generation in flight."""

    number: int
    prompt_tokens: int
    target_tokens: int  # how many tokens this request will produce
    max_tokens: int
    reservation: int  # KV tokens counted for it while running
    accept_len: float  # mean tokens per step for this request (the model's, or its prompt category's)
    tokens: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    generated: int = 0
    steps: int = 0
    cancelled: bool = False


@dataclass
class Counters:
    """Lifetime totals (Prometheus counters) and step-timing statistics."""

    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    spec_verify_calls: int = 0  # request-steps in speculative mode (vLLM: drafts)
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    preemptions: int = 0  # running requests sent back to the queue because the cache was full
    steps: int = 0
    step_planned_s: float = 0.0
    step_actual_s: float = 0.0
    step_abs_error_s: float = 0.0
    steps_within_1pct: int = 0  # steps whose duration was within 1 % of the model's
    steps_within_5pct: int = 0


@dataclass(frozen=True)
class Snapshot:
    """Gauges at one instant."""

    running: int
    queued: int
    used_tokens: int
    kv_tokens: int
    last_gen_tps: float
    last_accept_len: float | None


class Engine:
    """Continuous-batching scheduler over a StepModel."""

    def __init__(self, step_model: throughput.StepModel, kv_tokens: int, spec_steps: int | None, log: LaunchLog,
                 decode_log_interval: int, new_token_ratio: float = 1.0) -> None:
        self.model = step_model
        self.kv_tokens = kv_tokens
        self.new_token_ratio = new_token_ratio
        self.spec_steps = spec_steps  # None without speculation
        self.log = log
        self.decode_log_interval = decode_log_interval
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.reserved = 0
        self.used_tokens = 0
        self.counters = Counters(spec_accepted_per_pos=[0] * (spec_steps or 0))
        self._numbers = itertools.count()
        self._wake = asyncio.Event()
        self._cancelled_waiting = False
        # interval bookkeeping for the periodic stats lines
        self._iv_start = 0.0
        self._iv_gen = 0
        self._iv_prompt = 0
        self._iv_steps = 0
        self._iv_request_steps = 0
        self._iv_accepted = 0
        self._iv_per_pos = [0] * (spec_steps or 0)
        self._last_gen_tps = 0.0
        self._last_accept_len: float | None = None

    # -- public API ---------------------------------------------------------------------
    def submit(self, prompt_tokens: int, target_tokens: int, max_tokens: int, accept_len: float | None = None) -> Request:
        """Queue a request; its tokens arrive on `request.tokens`, one item per step.

        `accept_len` overrides the model's tokens per step for this request (acceptance by prompt category).
        """
        n = next(self._numbers)
        req = Request(n, prompt_tokens, target_tokens, max_tokens,
                      throughput.kv_reservation(prompt_tokens, max_tokens, self.new_token_ratio),
                      self.model.tokens_per_step if accept_len is None else accept_len)
        self.counters.requests += 1
        self.counters.prompt_tokens += prompt_tokens
        self.waiting.append(req)
        self._wake.set()
        return req

    def cancel(self, req: Request) -> None:
        """The client is gone: drop the request (queued: before admission; running: at the next step)."""
        req.cancelled = True
        self._cancelled_waiting = True

    def snapshot(self) -> Snapshot:
        return Snapshot(len(self.running), sum(1 for r in self.waiting if not r.cancelled), self.used_tokens,
                        self.kv_tokens, self._last_gen_tps, self._last_accept_len)

    async def run(self) -> None:
        """The scheduler loop; runs until cancelled."""
        # perf_counter, not loop.time(): uvloop's loop clock is cached at millisecond resolution,
        # which would blur both the deadlines and the step-time measurement.
        clock = time.perf_counter
        deadline = step_start = clock()
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                deadline = step_start = clock()
                self._iv_start = self._iv_start or step_start
            prefill_tokens = self._admit()
            if not self.running:
                continue
            batch = len(self.running)
            planned = self.model.step_time(batch, prefill_tokens)
            deadline += planned
            # Event-loop timers fire up to ~1 ms late (millisecond polling), which is 3-10 % of a step:
            # sleep until just before the deadline, then yield-spin to it. Always yield at least once, even
            # when late, so the HTTP handlers get to write the last step's tokens.
            await asyncio.sleep(max(deadline - clock() - _SPIN_S, 0.0))
            while clock() < deadline:
                await asyncio.sleep(0)
            now = clock()
            self._record_step(planned, now - step_start)
            if now - deadline > _MAX_LAG_S:
                deadline = now
            step_start = now
            self._advance()
            if self.log.stats_by_steps and self._iv_steps >= self.decode_log_interval:
                self.log_stats(now)

    def log_stats(self, now: float) -> None:
        """Write one periodic stats line for the interval that ends now and start the next one."""
        elapsed = max(now - self._iv_start, 1e-9)
        self._last_gen_tps = self._iv_gen / elapsed
        accept_len = accept_rate = None
        drafted = 0
        per_pos: tuple[float, ...] = ()
        if self.spec_steps is not None and self._iv_request_steps:
            accept_len = self._iv_gen / self._iv_request_steps
            drafted = self._iv_request_steps * self.spec_steps
            accept_rate = self._iv_accepted / drafted
            per_pos = tuple(c / self._iv_request_steps for c in self._iv_per_pos)
            self._last_accept_len = accept_len
        snap = self.snapshot()
        self.log.stats(DecodeStats(
            running=snap.running, queued=snap.queued, used_tokens=snap.used_tokens, kv_tokens=self.kv_tokens,
            gen_tps=self._last_gen_tps, prompt_tps=self._iv_prompt / elapsed, accept_len=accept_len,
            accept_rate=accept_rate, accepted=self._iv_accepted, drafted=drafted, per_position=per_pos,
            interval_s=elapsed,
        ))
        self.log_stats_reset(now)

    def log_stats_reset(self, now: float) -> None:
        """Start a new stats interval at `now` (idle intervals are not logged, like vLLM at INFO)."""
        self._iv_start = now
        self._iv_gen = self._iv_prompt = self._iv_steps = self._iv_request_steps = self._iv_accepted = 0
        self._iv_per_pos = [0] * len(self._iv_per_pos)

    def busy_since_last_stats(self) -> bool:
        return bool(self._iv_gen or self._iv_prompt or self.running or self.waiting)

    # -- step internals -------------------------------------------------------------------
    def _admit(self) -> int:
        if self._cancelled_waiting:  # O(queue) only after a cancellation
            self.waiting = deque(r for r in self.waiting if not r.cancelled)
            self._cancelled_waiting = False
        n = throughput.admit_count([r.reservation for r in itertools.islice(self.waiting, 0, self.model.max_running)],
                                   len(self.running), self.reserved, self.kv_tokens, self.model.max_running)
        new_tokens = admitted = 0
        for _ in range(n):
            req = self.waiting[0]
            held = req.prompt_tokens + req.generated   # a preempted request's output so far is prefilled again
            # The reservation may count less than a request's output (new_token_ratio < 1): its tokens must fit in
            # the cache now too, or a request preempted by the last step would come straight back and overfill it.
            if self.running and self.used_tokens + held > self.kv_tokens:
                break
            self.waiting.popleft()
            self.running.append(req)
            self.reserved += req.reservation
            self.used_tokens += held
            new_tokens += held
            admitted += 1
        if not admitted:
            return 0
        n = admitted
        self._iv_prompt += new_tokens
        snap = self.snapshot()
        stats = DecodeStats(snap.running, snap.queued, snap.used_tokens, self.kv_tokens, 0.0, 0.0, None, None)
        self.log.prefill(n, new_tokens, stats, new_tokens / self.model.step_time(len(self.running), new_tokens))
        return new_tokens

    def _advance(self) -> None:
        max_per_step = self.model.max_tokens_per_step
        spec = self.spec_steps is not None
        still: list[Request] = []
        produced = 0
        for req in self.running:
            if req.cancelled:
                self._release(req)
                continue
            k = throughput.tokens_this_step(req.accept_len, max_per_step, req.steps, req.number,
                                            req.target_tokens - req.generated)
            req.steps += 1
            req.generated += k
            produced += k
            if spec:
                accepted = max(0, k - 1)
                self._iv_accepted += accepted
                for pos in range(min(accepted, len(self._iv_per_pos))):
                    self._iv_per_pos[pos] += 1
                    self.counters.spec_accepted_per_pos[pos] += 1
                self.counters.spec_accepted_tokens += accepted
            req.tokens.put_nowait(k)
            if req.generated >= req.target_tokens:
                self._release(req)
            else:
                still.append(req)
        batch = len(self.running)
        self.running = still
        self.used_tokens += produced
        self.counters.generation_tokens += produced
        self._iv_gen += produced
        self._iv_steps += 1
        self._iv_request_steps += batch
        if spec:
            self.counters.spec_verify_calls += batch
            self.counters.spec_draft_tokens += batch * (self.spec_steps or 0)
        self._preempt()

    def _preempt(self) -> None:
        """While the running requests' tokens outgrow the cache (only when admission counted less than their whole
        output), send the newest back to the head of the queue; the last one keeps running."""
        while self.used_tokens > self.kv_tokens and len(self.running) > 1:
            req = self.running.pop()
            self._release(req)
            left = max(0, req.max_tokens - req.generated)
            req.reservation = throughput.kv_reservation(req.prompt_tokens + req.generated, left, self.new_token_ratio)
            self.waiting.appendleft(req)
            self.counters.preemptions += 1

    def _release(self, req: Request) -> None:
        self.reserved -= req.reservation
        self.used_tokens -= req.prompt_tokens + req.generated

    def _record_step(self, planned: float, actual: float) -> None:
        c = self.counters
        c.steps += 1
        c.step_planned_s += planned
        c.step_actual_s += actual
        c.step_abs_error_s += abs(actual - planned)
        rel = abs(actual - planned) / planned
        c.steps_within_1pct += rel <= 0.01
        c.steps_within_5pct += rel <= 0.05
