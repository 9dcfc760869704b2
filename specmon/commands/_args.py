"""Argument types shared by the subcommands: a bad value is argparse's one-line error naming the option."""

from __future__ import annotations

import argparse
import math


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds, a rate): 0, negatives, nan and inf are refused, never waited on or written."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < v < math.inf:   # inf and nan would reach a result file as non-JSON numbers, or a wait of no end
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return v


def nonneg_int(text: str) -> int:
    """A whole number >= 0 (a count of lines or requests)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return v
