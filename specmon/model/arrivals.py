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

import math
import random
from collections.abc import Sequence


def arrival_times(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """N scheduled send times (seconds from the level's start) at `rate` requests/s; the last is exactly n/rate.

    The same (n, rate, burstiness, seed) always gives the same schedule.
    """
    if n < 1:
        return []
    if not (0 < rate < math.inf) or not (0 < burstiness < math.inf):
        raise ValueError(f"rate and burstiness must be finite and > 0, got {rate}, {burstiness}")
    rng = random.Random(f"arrivals:{seed}:{rate!r}:{burstiness!r}")
    gaps = [rng.gammavariate(burstiness, 1.0 / (rate * burstiness)) for _ in range(n)]
    scale = (n / rate) / math.fsum(gaps)
    times: list[float] = []
    t = 0.0
    for gap in gaps:
        t += gap * scale
        times.append(t)
    times[-1] = n / rate   # exact, whatever the rounding of the running sum
    return times


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
