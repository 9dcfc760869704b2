"""Goodput service-level objectives: `ttft:500,tpot:50,e2el:2000` (milliseconds, any subset). Pure, stdlib only.

A request is good when it succeeded and meets every target given: TTFT <= ttft, TPOT <= tpot, E2E latency <= e2el
(the DistServe definition `vllm bench serve --goodput` uses). A request with fewer than two output tokens has no TPOT
and meets a TPOT target, as in vLLM. A level's goodput is its good requests per second of level duration; its good
share is good requests over all measured requests, failed ones included (a failure never meets a target).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

SLO_KEYS = ("ttft", "tpot", "e2el")


def parse_slo(text: str) -> dict[str, float]:
    """`ttft:500,tpot:50` -> {"ttft": 500.0, "tpot": 50.0}; ValueError in one line for a bad key or value."""
    out: dict[str, float] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition(":")
        key = key.strip().lower()
        if not sep:
            raise ValueError(f"{part!r} is not KEY:MS (e.g. ttft:500)")
        if key not in SLO_KEYS:
            raise ValueError(f"unknown target {key!r} (known: {', '.join(SLO_KEYS)})")
        if key in out:
            raise ValueError(f"{key} given twice")
        try:
            ms = float(value)
        except ValueError:
            raise ValueError(f"{key}: {value.strip()!r} is not a number of milliseconds") from None
        if not 0 < ms < math.inf:
            raise ValueError(f"{key}: must be a finite number of milliseconds > 0, got {value.strip()!r}")
        out[key] = ms
    if not out:
        raise ValueError("give at least one target, e.g. ttft:500,tpot:50")
    return out


def check_slo(slo: Mapping[str, object]) -> dict[str, float]:
    """An SLO mapping read back from a file or the child's spec line, checked like parse_slo; ValueError if bad."""
    text = ",".join(f"{k}:{v}" for k, v in slo.items())
    return parse_slo(text) if slo else {}


def meets_slo(slo: Mapping[str, float], ttft_ms: float | None, tpot_ms: float | None, e2e_ms: float | None) -> bool:
    """Whether one successful request meets every target in `slo` (a missing TPOT meets its target)."""
    ttft = slo.get("ttft")
    if ttft is not None and (ttft_ms is None or ttft_ms > ttft):
        return False
    tpot = slo.get("tpot")
    if tpot is not None and tpot_ms is not None and tpot_ms > tpot:
        return False
    e2el = slo.get("e2el")
    return e2el is None or (e2e_ms is not None and e2e_ms <= e2el)


def slo_text(slo: Mapping[str, float]) -> str:
    """The targets as typed: `ttft:500,tpot:50`."""
    return ",".join(f"{k}:{v:g}" for k, v in slo.items())
