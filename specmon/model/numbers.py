"""Numbers as people read them, shared by the TUI, the headless commands and the model's own messages, and a
sweep level as the row of the comparison table that both the TUI's Sweep pane and `demo --headless` show. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping

NA = "—"


def fmt_count(n: float | None) -> str:
    """A count a person can read at a glance: `950`, `12.3k`, `1.25M`."""
    if n is None:
        return NA
    value = float(n)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            scaled = value / limit
            return f"{scaled:.3g}{suffix}" if scaled < 100 else f"{scaled:.0f}{suffix}"
    return f"{value:.0f}"


def counted(n: int, noun: str) -> str:
    """`1 finished level`, `2 finished levels`: a count and its noun (plural by an `s`)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fmt_number(value: float | None, digits: int = 1) -> str:
    """A fixed-point number, NA when unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NA
    return f"{value:,.{digits}f}"


def fmt_shards(done: int | None, total: int | None) -> str:
    """`5/8` shards, or NA before the loader said how many there are."""
    if not total:
        return NA
    return f"{done or 0}/{total}"


def _stat(level: Mapping[str, object], key: str, field: str) -> float | None:
    block = level.get(key)
    if isinstance(block, Mapping):
        value = block.get(field)
        return float(value) if isinstance(value, (int, float)) else None
    return None


LEVEL_COLUMNS: tuple[str, ...] = ("series", "C", "out tok/s", "ITL p99", "tok/chunk", "TTFT p50", "TPOT p50", "client")


def level_cells(series: str, level: Mapping[str, object]) -> tuple[str, ...]:
    """One row of the sweep table from a result-file level record (see specmon sweep's JSONL contract).

    A record with `"live": true` is the level still running (its figures are running estimates).
    """
    client = level.get("client")
    bound = isinstance(client, Mapping) and bool(client.get("bound"))
    skewed = isinstance(client, Mapping) and bool(client.get("skewed"))
    # Another tool's file (guidellm, vLLM, SGLang) records no client health (no chunk, no CPU): nothing to call "ok".
    unrecorded = isinstance(client, Mapping) and client.get("chunks") == 0 and not client.get("cpu_s")
    tpc = level.get("tokens_per_chunk")
    if isinstance(tpc, Mapping):  # some writers keep a distribution; the mean is what the table shows
        tpc = tpc.get("mean")
    throughput = level.get("output_throughput")
    rate = level.get("rate")
    if level.get("live"):
        status = "live"
    elif level.get("over_capacity"):
        status = "OVER"      # open loop: the server did not keep up with the offered rate
    elif level.get("behind"):
        status = "BEHIND"    # open loop: the generator did not keep its schedule
    else:
        status = "BOUND" if bound else "SKEW" if skewed else NA if unrecorded else "ok"
    return (
        series,
        f"{rate:g}/s" if isinstance(rate, (int, float)) else str(level.get("concurrency", NA)),
        fmt_number(float(throughput) if isinstance(throughput, (int, float)) else None),
        fmt_ms(_stat(level, "itl_ms", "p99")),
        fmt_number(float(tpc) if isinstance(tpc, (int, float)) else None, 2),
        fmt_ms(_stat(level, "ttft_ms", "p50")),
        fmt_ms(_stat(level, "tpot_ms", "p50")),
        status,
    )


def fmt_ms(value: float | None) -> str:
    """Milliseconds with a sensible precision: `8.41ms`, `143ms`, `1.20s`."""
    if value is None:
        return NA
    if value >= 1000:
        return f"{value / 1000:.2f}s"
    if value >= 100:
        return f"{value:.0f}ms"
    return f"{value:.2f}ms"
