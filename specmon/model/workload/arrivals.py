"""Open-loop arrival schedules and the goodness-of-fit check for them. Pure, stdlib only.

A level at request rate R sends N requests at scheduled times t_1 < ... < t_N (seconds after the level starts).
The gaps are gamma-distributed with shape `burstiness` and scale 1/(R * burstiness), as `vllm bench serve` defines
them: burstiness 1 is a Poisson process (exponential gaps), below 1 burstier, above 1 more evenly spaced.

The gaps are then scaled so that they sum to exactly N/R, i.e. the schedule is the process conditioned on N arrivals
in N/R seconds. For a Poisson process that conditioning is exact (the arrival times are then sorted uniform points
on [0, N/R]) and leaves the gaps exponential in distribution; what it removes is the ~1/sqrt(N) luck in how long N
random gaps take, so the offered rate of every level is R and the achieved rate measures the generator alone.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Sequence


class Schedule:
    """One level's arrival schedule, drawn lazily: memory stays flat however many arrivals the level has.

    The gaps come from a generator seeded by (seed, rate, burstiness), drawn twice: once to sum them (`gap_sums`,
    in blocks, so the caller can stay responsive between blocks), once to give the times (`times`).
    """

    def __init__(self, n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> None:
        if not (0 < rate < math.inf) or not (0 < burstiness < math.inf):
            raise ValueError(f"rate and burstiness must be finite and > 0, got {rate}, {burstiness}")
        self.n, self.rate, self.burstiness = max(0, n), rate, burstiness
        self._key = f"arrivals:{seed}:{rate!r}:{burstiness!r}"

    def _gaps(self) -> Iterator[float]:
        rng = random.Random(self._key)
        shape, scale = self.burstiness, 1.0 / (self.rate * self.burstiness)
        for _ in range(self.n):
            yield rng.gammavariate(shape, scale)

    def gap_sums(self, block: int = 65536) -> Iterator[float]:
        """The sum of each block of `block` gaps, in order (their total is what `times` needs)."""
        gaps = self._gaps()
        while part := list(itertools.islice(gaps, block)):
            yield math.fsum(part)

    def times(self, total: float) -> Iterator[float]:
        """The send times, the gaps scaled so they add up to n/rate (`total`: the sum of gap_sums)."""
        if self.n < 1:
            return
        if not total > 0:   # every gap rounded to zero: an absurd burstiness the workload refuses anyway
            raise ValueError(f"burstiness {self.burstiness} draws gaps too small to schedule")
        scale = (self.n / self.rate) / total
        t = 0.0
        for i, gap in enumerate(self._gaps(), 1):
            t += gap * scale
            yield self.n / self.rate if i == self.n else t   # the last exact, whatever the running sum's rounding


def arrival_times(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """N scheduled send times (seconds from the level's start) at `rate` requests/s; the last is exactly n/rate.

    The same (n, rate, burstiness, seed) always gives the same schedule (Schedule's, as a list).
    """
    if n < 1:
        return []
    schedule = Schedule(n, rate, burstiness, seed)
    return list(schedule.times(math.fsum(schedule.gap_sums())))


# How much longer than the requests timed so far (the warm-up's, against an idle server) a level's requests may take
# under the level's own load. Measured (bench/loadgen_overhead.py --vs-reference, H100 host, 16 tokens a request):
# at 2,000-4,000 req/s, the server's busiest core at 50-87 %, in flight up to 1.7 times the warm-up's figure, and
# the runs that opened connections during the level (34-83 a run at 2,000 req/s) had lateness p99 28-76 ms against
# 0.4-6 ms in those that opened none. With this stretch 0 of 17 runs opened any.
LOAD_STRETCH = 2.0


def connections_needed(rate: float, request_s: float | None, n: int, cap: int | None, floor: int, most: int) -> int:
    """How many connections an open loop at `rate` should open before it starts, so that its sends do not open them.

    By Little's law `rate * request_s` requests are in flight on average (request_s: how long a request has taken
    so far, None when nothing is known yet), and more once the level's own load slows the server (LOAD_STRETCH);
    Poisson arrivals put that many plus a few standard deviations in flight at the busiest moment. Never fewer than
    `floor`, never more than `n` (the level's requests), the level's concurrency cap (0 or None: none) or `most`.
    """
    want = floor
    if request_s is not None and request_s > 0:
        mean = rate * request_s * LOAD_STRETCH
        want = max(floor, math.ceil(mean + 4.0 * math.sqrt(mean)))
    return max(1, min(want, n, cap or most, most))


def ks_exponential(samples: Sequence[float], rate: float) -> float:
    """Kolmogorov-Smirnov statistic D of `samples` against the exponential distribution with this rate."""
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        raise ValueError("no samples")
    d = 0.0
    for i, x in enumerate(xs):
        cdf = 1.0 - math.exp(-rate * max(0.0, x))
        d = max(d, (i + 1) / n - cdf, cdf - i / n)
    return d


def ks_critical(n: int, alpha: float = 0.01) -> float:
    """The asymptotic KS critical value for n samples at significance alpha (sqrt(-ln(alpha/2)/2) / sqrt(n))."""
    return math.sqrt(-math.log(alpha / 2.0) / 2.0) / math.sqrt(n)
