"""Numbers as people read them, shared by the TUI, the headless commands and the model's own messages. Pure."""

from __future__ import annotations

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
