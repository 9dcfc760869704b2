"""The simulated server's throughput model: pure, deterministic, stdlib only.

Continuous batching
    One scheduler advances every *running* request by one decode step at a time. A step
    over a batch of ``b`` running requests takes

        t(b) = base_s + slope_s * b  (+ prefill_s_per_token * prompt tokens admitted this step)

    so per-request speed falls and total throughput rises as the batch grows, saturating
    at ``max_running`` requests (the simulated CUDA-graph / ``--max-running-requests``
    bound). The prefill term is tiny by default (a 1000-token prompt adds 10 ms to one step).

KV capacity
    Each admitted request reserves ``prompt_tokens + max_tokens`` KV tokens until it
    finishes. Requests are admitted first-in first-out while the reservation fits in
    ``kv_tokens`` and fewer than ``max_running`` are running; the rest queue (``#queue-req``).
    A request larger than the whole cache is admitted only into an empty batch, so it
    cannot block the queue forever.

    With ``--new-token-ratio R`` below 1 admission counts only ``R x max_tokens`` of each
    request's output (SGLang's ``new_token_ratio``; vLLM V1 admits by the tokens a request
    holds now). The cache is then overcommitted: when the running requests' tokens outgrow
    it, the newest are preempted (SGLang: retracted) back to the head of the queue, freeing
    their KV, and counted; readmitted, they prefill their prompt and output so far again.

Speculative decoding (EAGLE-3)
    Each step (draft + verify) yields ``accept_len`` tokens per request on average, at a
    heavier per-step cost (larger base and steeper slope: drafting and verifying scale with
    the batch). Per request and step the integer token count (1 .. draft tokens) follows a
    deterministic pattern, floor(n*accept_len + phase + bounded jitter) differenced, whose
    long-run mean is exactly ``accept_len``; each request has its own phase and jitter so a
    batch does not move in lock step. One SSE chunk then carries several tokens.

Tuning settings (the knobs a tuning grid varies; reference: 3 draft steps, top-k 1, memory fraction 0.88)
    ``--accept-len`` is the accept length at the reference. It fixes a per-draft-token acceptance
    rate r (1 + r + r^2 + r^3 = accept_len); top-k K raises it slightly, r_K = 1 - (1 - r)/K^0.2;
    N draft steps then accept 1 + r_K + ... + r_K^N tokens per step: more steps, more tokens, with
    diminishing returns. Each step costs more with more steps and a wider top-k: the per-step base
    grows as 0.85 + 0.05 N (drafting) and by 5 % per extra top-k branch, the per-request slope as
    (N + 1)/4 (verifying N + 1 tokens per request) and by 20 % per extra branch. So deep drafts win
    at low load and shallow ones at high load. ``--mem-fraction-static F`` sets the KV cache unless
    ``--kv-tokens`` gives it outright: the weights hold half the memory, so the cache is 400,000
    tokens x (F - 0.5)/(0.88 - 0.5), and a smaller fraction admits fewer requests at once
    (queueing at high load).

Calibration
    The defaults reproduce the shape of a real measurement (one GPU server, ~1k-token
    outputs): baseline ~93 tok/s per request at concurrency 1, saturating near ~770 tok/s
    total; EAGLE-3 (accept_len 3.0) ~96 tok/s at concurrency 1, saturating near ~350 tok/s.
    ``calibrate()`` turns those four figures (plus ``max_running`` and the tokens per step)
    into ``base_s`` / ``slope_s``: speculation wins only at concurrency 1, so the crossover is
    at low concurrency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_MAX_RUNNING = 24
BASELINE_C1_TPS = 93.0
BASELINE_SATURATED_TPS = 770.0
EAGLE3_C1_TPS = 96.0
EAGLE3_SATURATED_TPS = 350.0
DEFAULT_ACCEPT_LEN = 3.0
DEFAULT_PREFILL_S_PER_TOKEN = 1e-5
REFERENCE_STEPS = 3            # --accept-len and the step costs are calibrated at 3 draft steps, top-k 1
REFERENCE_MEM_FRACTION = 0.88  # the default cache (without --kv-tokens) is sized at this memory fraction
WEIGHTS_FRACTION = 0.5         # the share of GPU memory the weights hold: a fraction at or below it leaves no cache


@dataclass(frozen=True)
class StepModel:
    """Cost of one decode step and what it yields."""

    base_s: float
    slope_s: float
    tokens_per_step: float  # mean tokens per request per step (accept_len; 1.0 without speculation)
    max_running: int
    prefill_s_per_token: float = DEFAULT_PREFILL_S_PER_TOKEN
    max_tokens_per_step: int = 1  # draft tokens + 1 bonus (spec_steps + 1); 1 without speculation

    def step_time(self, batch: int, prefill_tokens: int = 0) -> float:
        """Seconds one step takes with `batch` running requests and `prefill_tokens` newly admitted."""
        return self.base_s + self.slope_s * batch + self.prefill_s_per_token * prefill_tokens

    def per_request_tps(self, batch: int) -> float:
        """Decode tokens per second seen by one request in a steady batch of `batch`."""
        return self.tokens_per_step / self.step_time(max(1, batch))

    def total_tps(self, concurrency: int) -> float:
        """Steady-state total decode tokens/s with `concurrency` closed-loop clients."""
        batch = max(1, min(concurrency, self.max_running))
        return batch * self.per_request_tps(batch)


def calibrate(c1_tps: float, saturated_tps: float, max_running: int, tokens_per_step: float) -> tuple[float, float]:
    """(base_s, slope_s) such that t(1) gives `c1_tps` and a full batch gives `saturated_tps`."""
    t1 = tokens_per_step / c1_tps
    t_full = max_running * tokens_per_step / saturated_tps
    if max_running <= 1:
        return t1, 0.0
    slope = (t_full - t1) / (max_running - 1)
    return t1 - slope, slope


def baseline_model(max_running: int = DEFAULT_MAX_RUNNING) -> StepModel:
    """The default non-speculative model (~93 tok/s at C=1, ~770 tok/s saturated)."""
    base, slope = calibrate(BASELINE_C1_TPS, BASELINE_SATURATED_TPS, DEFAULT_MAX_RUNNING, 1.0)
    return StepModel(base_s=base, slope_s=slope, tokens_per_step=1.0, max_running=max_running)


def eagle3_model(accept_len: float = DEFAULT_ACCEPT_LEN, max_running: int = DEFAULT_MAX_RUNNING,
                 spec_steps: int = REFERENCE_STEPS, step_cost: float = 1.0, topk: int = 1) -> StepModel:
    """The default EAGLE-3 model. Step costs are fixed (calibrated at the default accept_len, at the reference
    steps and top-k) and scaled by `step_cost` (a cheaper draft model or faster verify) and by `step_costs` (the
    steps and top-k), so a higher `accept_len` gives proportionally more tokens per step and a lower `step_cost`
    keeps speculation ahead to a higher concurrency. `accept_len` is the one at these steps and top-k
    (`tuned_accept_len` derives it from the reference's)."""
    base, slope = calibrate(EAGLE3_C1_TPS, EAGLE3_SATURATED_TPS, DEFAULT_MAX_RUNNING, DEFAULT_ACCEPT_LEN)
    base_x, slope_x = step_costs(spec_steps, topk)
    return StepModel(base_s=base * step_cost * base_x, slope_s=slope * step_cost * slope_x,
                     tokens_per_step=accept_len, max_running=max_running, max_tokens_per_step=spec_steps + 1)


def step_costs(steps: int, topk: int) -> tuple[float, float]:
    """(base, slope) of a step with `steps` draft steps and top-k `topk`, times the reference's (module docstring)."""
    return (0.85 + 0.05 * steps) * (1 + 0.05 * (topk - 1)), (steps + 1) / 4 * (1 + 0.2 * (topk - 1))


def acceptance_rate(reference_accept_len: float) -> float:
    """The per-draft-token acceptance rate r with 1 + r + ... + r^REFERENCE_STEPS = `reference_accept_len`."""
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if sum(mid ** i for i in range(REFERENCE_STEPS + 1)) < reference_accept_len:
            low = mid
        else:
            high = mid
    return low


def tuned_accept_len(reference_accept_len: float, steps: int, topk: int) -> float:
    """The accept length with `steps` draft steps and top-k `topk`, from the one at the reference (3 steps, top-k
    1): unchanged there, more with more steps (diminishing) and slightly more with a wider top-k."""
    if (steps, topk) == (REFERENCE_STEPS, 1):
        return reference_accept_len
    r = 1.0 - (1.0 - acceptance_rate(reference_accept_len)) / topk ** 0.2
    return min(float(steps + 1), math.fsum(r ** i for i in range(steps + 1)))


def kv_tokens_for(kv_tokens: float, mem_fraction: float) -> int:
    """The KV cache at memory fraction `mem_fraction` when it holds `kv_tokens` at the reference fraction: the
    weights hold WEIGHTS_FRACTION of the memory, the cache what the fraction leaves above them (at least 1)."""
    return max(1, round(kv_tokens * (mem_fraction - WEIGHTS_FRACTION) / (REFERENCE_MEM_FRACTION - WEIGHTS_FRACTION)))


def _jitter(seed: int, n: int) -> float:
    """Deterministic pseudo-random value in [-1, 1) for (request, step); 0 at step 0."""
    if n == 0:
        return 0.0
    h = (n * 2654435761 + seed * 97531 + 12345) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 2246822519) & 0xFFFFFFFF
    h ^= h >> 13
    return h / 2**31 - 1.0


def request_phase(seed: int) -> float:
    """Deterministic per-request phase in [0, 1) (golden-ratio sequence)."""
    return (seed * 0.6180339887498949) % 1.0


def cumulative_tokens(accept_len: float, max_per_step: int, steps: int, seed: int) -> int:
    """Tokens a request has after `steps` steps: floor(steps*accept_len + phase + spread*jitter).

    The bounded jitter spreads per-step counts over 1..max_per_step (as real acceptance varies) while
    the long-run mean stays exactly `accept_len`; the spread is small enough that every step yields
    at least 1 and at most `max_per_step` tokens.
    """
    spread = max(0.0, min(accept_len - 1.0, max_per_step - accept_len)) / 2.0
    return math.floor(steps * accept_len + request_phase(seed) + spread * _jitter(seed, steps))


def tokens_this_step(accept_len: float, max_per_step: int, step_index: int, seed: int, remaining: int) -> int:
    """Tokens one request gets at its `step_index`-th step (0-based), capped by `remaining`."""
    k = cumulative_tokens(accept_len, max_per_step, step_index + 1, seed) - cumulative_tokens(
        accept_len, max_per_step, step_index, seed)
    return max(0, min(k, remaining))


def kv_reservation(prompt_tokens: int, max_tokens: int, new_token_ratio: float = 1.0) -> int:
    """KV tokens a request is counted as holding when it is admitted: its prompt and `new_token_ratio` of the
    tokens it may still produce (1: all of them, so the running requests never outgrow the cache)."""
    return prompt_tokens + math.ceil(new_token_ratio * max_tokens)


def admit_count(
    queued_reservations: list[int], running: int, reserved: int, kv_tokens: int, max_running: int
) -> int:
    """How many requests at the head of the FIFO queue can start now (first-in first-out, no skipping)."""
    n = 0
    for need in queued_reservations:
        if running + n >= max_running:
            break
        fits = reserved + need <= kv_tokens
        if not fits and (running + n) > 0:
            break
        reserved += need
        n += 1
    return n


def count_prompt_tokens(text: str) -> int:
    """The sim's tokenizer: one token per whitespace-separated word, at least 1."""
    return max(1, len(text.split()))


def natural_length(prompt_key: int, max_tokens: int, min_tokens: int) -> int:
    """Completion length when `ignore_eos` is false: a deterministic "EOS" point.

    Between half and all of `max_tokens` (chosen from `prompt_key`, e.g. a CRC of the prompt),
    never below `min_tokens`.
    """
    if max_tokens <= 1:
        return max(max_tokens, min(min_tokens, max_tokens))
    half = max_tokens // 2
    length = half + prompt_key % (max_tokens - half + 1)
    return max(min(length, max_tokens), min(min_tokens, max_tokens))
