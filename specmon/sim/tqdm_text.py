"""Progress-bar text exactly as tqdm renders it on a non-TTY stream (pure string functions)."""

from __future__ import annotations

# tqdm's Unicode bar charset: space, then eighth blocks up to the full block.
_CHARSET = " " + "".join(chr(c) for c in range(0x258F, 0x2587, -1))
_BAR_WIDTH = 10  # tqdm's bar width when the stream is not a terminal


def format_interval(seconds: float) -> str:
    """tqdm's MM:SS (or H:MM:SS) interval."""
    mins, secs = divmod(int(seconds), 60)
    hours, mins = divmod(mins, 60)
    return f"{hours:d}:{mins:02d}:{secs:02d}" if hours else f"{mins:02d}:{secs:02d}"


def _rate_and_remaining(n: int, total: int, elapsed: float) -> tuple[str, str]:
    rate = n / elapsed if n and elapsed > 0 else 0.0
    if not rate:
        return "?it/s", "?"
    rate_fmt = f"{1 / rate:5.2f}s/it" if rate < 1 else f"{rate:5.2f}it/s"
    return rate_fmt, format_interval((total - n) / rate)


def bar(fraction: float) -> str:
    """The 10-cell block bar for `fraction` in [0, 1]."""
    nsyms = len(_CHARSET) - 1
    full, part = divmod(int(max(0.0, min(1.0, fraction)) * _BAR_WIDTH * nsyms), nsyms)
    text = _CHARSET[-1] * full
    if full < _BAR_WIDTH:
        text += _CHARSET[part] + _CHARSET[0] * (_BAR_WIDTH - full - 1)
    return text


def completed_bar(desc: str, n: int, total: int, elapsed: float) -> str:
    """The shard-loading bar both servers use: `desc:  20% Completed | 13/64 [00:12<00:40,  1.05it/s]`."""
    rate, remaining = _rate_and_remaining(n, total, elapsed)
    pct = 100.0 * n / total if total else 0.0
    return f"{desc}: {pct:3.0f}% Completed | {n}/{total} [{format_interval(elapsed)}<{remaining}, {rate}]"


def default_bar(desc: str, n: int, total: int, elapsed: float) -> str:
    """tqdm's default layout: `desc:  17%|█▋        | 1/6 [00:16<01:22, 16.57s/it]`."""
    rate, remaining = _rate_and_remaining(n, total, elapsed)
    frac = n / total if total else 0.0
    return (
        f"{desc}: {100.0 * frac:3.0f}%|{bar(frac)}| {n}/{total} "
        f"[{format_interval(elapsed)}<{remaining}, {rate}]"
    )
