"""Speculative acceptance of one sweep level from three sources side by side, and the server's own view of the
level (throughput, queue depth). Pure.

Sources (each is "tokens per verify step, including the bonus token", so 1.0 means nothing accepted):
- log:     the `accept len` / `accept rate` of the decode-batch lines (SGLang `Decode batch`, vLLM `SpecDecoding
           metrics`) written during the level, averaged (each line covers the same number of steps);
- metrics: Prometheus `/metrics`: SGLang's `sglang:spec_accept_length` / `sglang:spec_accept_rate` gauges sampled
           during the level and averaged; vLLM's counters as deltas over the level:
           1 + accepted_tokens / drafts, and accepted_tokens / draft_tokens for the rate;
- client:  the load generator's usage tokens per streamed chunk (a chunk carries one verify step's tokens).
They are flagged when they disagree by more than DISAGREE_FRACTION (largest / smallest - 1).

Server-side figures from `/metrics` over the level: output tokens/s as the generation-tokens counter's delta over
the window, and the queue depth (`sglang:num_queue_reqs`, `vllm:num_requests_waiting`) mean and max over samples.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DISAGREE_FRACTION = 0.10

SGLANG_ACCEPT_LEN = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"
VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
GENERATION_TOKENS = ("sglang:generation_tokens", "vllm:generation_tokens")
QUEUE = ("sglang:num_queue_reqs", "vllm:num_requests_waiting")
RUNNING = ("sglang:num_running_reqs", "vllm:num_requests_running")


def parse_metrics(text: str, only: Collection[str] | None = None) -> dict[str, list[float]]:
    """Prometheus text exposition -> metric name -> the values of its label sets.

    Counters are keyed without their `_total` suffix (vLLM exposes both spellings over versions). Samples with a
    `position` label (per-position acceptance) are left out: they are not totals. `only`: the names wanted (as
    keyed); every other line is passed over by one search for the lines that start so, before any is split (a real
    vLLM answer is mostly histogram buckets nobody here reads). A series repeated (the same name and labels) counts
    once, its first value: summing the repeats would multiply a figure.
    """
    out: dict[str, list[float]] = {}
    seen: set[tuple[str, str]] = set()
    lines = text.splitlines() if only is None else _lines_starting(frozenset(only)).findall("\n" + text)
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        if brace >= 0:
            close = line.rfind("}")
            if close < brace:
                continue
            name, labels, rest = line[:brace], line[brace + 1:close], line[close + 1:]
        else:
            name, _, rest = line.partition(" ")
            labels = ""
        if 'position="' in labels:
            continue
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        if name.endswith("_total"):
            name = name[: -len("_total")]
        if only is not None and name not in only:
            continue
        if (name, labels) in seen:
            continue
        seen.add((name, labels))
        out.setdefault(name, []).append(value)
    return out


@functools.lru_cache(maxsize=4)
def _lines_starting(names: frozenset[str]) -> re.Pattern[str]:
    """The lines that start with one of `names` (in a text with a newline put before it; the carriage return of a CRLF
    ending stays on the line, for `strip`): one search of the answer in C, where testing each of its lines in turn
    (most of them help, type and bucket lines) was the larger part of parsing it."""
    return re.compile("\n((?:" + "|".join(map(re.escape, sorted(names))) + ")[^\n]*)")


@dataclass(frozen=True)
class MetricsSample:
    """One scrape of /metrics: when (monotonic seconds) and what."""

    at: float
    values: Mapping[str, Sequence[float]]
    refused: tuple[str, ...] = ()   # values left out as impossible for their family, each as `name value`

    def total(self, name: str) -> float | None:
        """A counter summed over its label sets (ranks, engines); None when absent."""
        values = self.values.get(name)
        return math.fsum(values) if values else None

    def mean(self, name: str) -> float | None:
        """A gauge averaged over its label sets; None when absent."""
        values = self.values.get(name)
        return math.fsum(values) / len(values) if values else None

    def first_total(self, names: Iterable[str]) -> float | None:
        """The total of the first of `names` that this read has (see `total`)."""
        for name in names:
            if values := self.values.get(name):
                return math.fsum(values)
        return None

    def first_mean(self, names: Iterable[str]) -> float | None:
        """The mean of the first of `names` that this read has (see `mean`)."""
        for name in names:
            if values := self.values.get(name):
                return math.fsum(values) / len(values)
        return None


@dataclass(frozen=True)
class LogAcceptance:
    """An acceptance figure from one decode-batch log line."""

    accept_len: float | None
    accept_rate: float | None


@dataclass(frozen=True)
class LevelAcceptance:
    """One level's acceptance from each source, and the server's throughput and queue over the level."""

    log_accept_len: float | None = None
    log_accept_rate: float | None = None
    log_lines: int = 0
    metrics_accept_len: float | None = None
    metrics_accept_rate: float | None = None
    client_tokens_per_chunk: float | None = None
    server_tok_s: float | None = None
    queue_mean: float | None = None
    queue_max: float | None = None
    running_mean: float | None = None
    metrics_samples: int = 0
    file_accept_len: float | None = None   # the accept length another tool's result file recorded (vLLM, SGLang)

    @property
    def sources(self) -> dict[str, float]:
        """The accept-length figures that exist, by source name."""
        found = {"log": self.log_accept_len, "metrics": self.metrics_accept_len, "client": self.client_tokens_per_chunk,
                 "file": self.file_accept_len}
        return {k: v for k, v in found.items() if v is not None and v > 0}

    @property
    def disagreement(self) -> float | None:
        """Largest / smallest accept length minus 1 over the speculative sources; None with fewer than two.

        A server without speculation has no log or metrics figure, so its client 1.0 alone is never flagged.
        """
        values = list(self.sources.values())
        if len(values) < 2:
            return None
        return max(values) / min(values) - 1.0

    @property
    def disagree(self) -> bool:
        d = self.disagreement
        return d is not None and d > DISAGREE_FRACTION

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LevelAcceptance:
        fields = cls.__dataclass_fields__
        known: dict[str, Any] = {}
        for key, value in d.items():
            if key not in fields:
                continue
            if key in ("log_lines", "metrics_samples"):
                known[key] = int(value or 0)
            else:
                known[key] = None if value is None else float(value)
        return cls(**known)


@dataclass
class LevelWindow:
    """Collects what the server said during one level; `result()` turns it into a LevelAcceptance."""

    samples: list[MetricsSample] = field(default_factory=list)
    log: list[LogAcceptance] = field(default_factory=list)

    def add_sample(self, sample: MetricsSample) -> None:
        self.samples.append(sample)

    def add_log(self, accept_len: float | None, accept_rate: float | None) -> None:
        if accept_len is not None or accept_rate is not None:
            self.log.append(LogAcceptance(accept_len, accept_rate))

    def result(self, client_tokens_per_chunk: float | None) -> LevelAcceptance:
        lens = [x.accept_len for x in self.log if x.accept_len is not None]
        rates = [x.accept_rate for x in self.log if x.accept_rate is not None]
        m_len, m_rate = self._metrics_acceptance()
        first, last = (self.samples[0], self.samples[-1]) if self.samples else (None, None)
        server_tok_s = None
        if first is not None and last is not None and last.at > first.at:
            a, b = first.first_total(GENERATION_TOKENS), last.first_total(GENERATION_TOKENS)
            if a is not None and b is not None and b >= a:
                server_tok_s = (b - a) / (last.at - first.at)
        queue = [q for q in (s.first_total(QUEUE) for s in self.samples) if q is not None]
        running = [r for r in (s.first_total(RUNNING) for s in self.samples) if r is not None]
        return LevelAcceptance(
            log_accept_len=_mean(lens), log_accept_rate=_mean(rates), log_lines=len(self.log),
            metrics_accept_len=m_len, metrics_accept_rate=m_rate,
            client_tokens_per_chunk=client_tokens_per_chunk, server_tok_s=server_tok_s,
            queue_mean=_mean(queue), queue_max=max(queue) if queue else None, running_mean=_mean(running),
            metrics_samples=len(self.samples),
        )

    def _metrics_acceptance(self) -> tuple[float | None, float | None]:
        if not self.samples:
            return None, None
        first, last = self.samples[0], self.samples[-1]
        drafts = _delta(first, last, VLLM_DRAFTS)
        if drafts:   # vLLM: counters over the level
            accepted = _delta(first, last, VLLM_ACCEPTED)
            draft_tokens = _delta(first, last, VLLM_DRAFT_TOKENS)
            length = None if accepted is None else 1.0 + accepted / drafts
            rate = accepted / draft_tokens if accepted is not None and draft_tokens else None
            return length, rate
        # SGLang: gauges refreshed at each decode log; 0 before the first speculative batch, so zeros are skipped.
        lens = [v for v in (s.mean(SGLANG_ACCEPT_LEN) for s in self.samples) if v]
        rates = [v for v in (s.mean(SGLANG_ACCEPT_RATE) for s in self.samples) if v]
        return _mean(lens), _mean(rates)


def _delta(first: MetricsSample, last: MetricsSample, name: str) -> float | None:
    a, b = first.total(name), last.total(name)
    if a is None or b is None or b < a:   # absent, or the counter was reset (a restarted server)
        return None
    return b - a


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None
