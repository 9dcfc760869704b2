"""The headless commands' tables, drawn by rich: columns sized to their contents, one line per row.

On a terminal a row never wraps: the last column (free text such as a note or a reason) is cut to the terminal's
width with an ellipsis, the others keep their width. Into a pipe or a file nothing is cut. No colour or style codes
are written.
"""

from __future__ import annotations

import io
import shutil
import sys
from collections.abc import Iterable, Sequence
from typing import Literal, TextIO

from rich.console import Console
from rich.table import Table

from specmon.model.logs.clean import escape_controls
from specmon.model.sweeps.results import LevelResult

Align = Literal["left", "right"]
GAP = 2                # blanks between columns
UNCUT_WIDTH = 10_000   # rich's width when nothing may be cut


def table_text(header: Sequence[str], rows: Iterable[Sequence[str]], *, align: Align | Sequence[Align] = "left",
               out: TextIO | None = None) -> str:
    """The table as text: a header line, then one line per row, trailing blanks cut.

    `align` is one alignment for every column or one per column. `out` is where the text will be printed (default
    stdout): its being a terminal decides whether the last column is cut to the terminal's width.
    """
    stream = sys.stdout if out is None else out
    isatty = getattr(stream, "isatty", None)
    # Cells hold strings from outside (GPU and process names, a host's meta.json, dataset categories): escaped.
    header = [escape_controls(title) for title in header]
    body = [tuple(escape_controls(cell) for cell in row) for row in rows]
    widths = [max([len(title), *(len(row[i]) for row in body)]) for i, title in enumerate(header)]
    if isatty is not None and isatty():
        room = shutil.get_terminal_size((120, 24)).columns - sum(widths[:-1]) - GAP * (len(widths) - 1)
        room = max(room, len(header[-1]), 1)
        body = [(*row[:-1], row[-1] if len(row[-1]) <= room else row[-1][: room - 1] + "…") for row in body]
    aligns = [align] * len(header) if isinstance(align, str) else list(align)
    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, GAP // 2), header_style=None)
    for title, justify in zip(header, aligns):
        table.add_column(title, justify=justify, no_wrap=True)
    for row in body:
        table.add_row(*row)
    buffer = io.StringIO()
    Console(file=buffer, width=UNCUT_WIDTH, color_system=None, force_terminal=False, highlight=False,
            emoji=False, markup=False).print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def category_table(series: Sequence[tuple[str, Sequence[LevelResult]]], out: TextIO | None = None) -> str | None:
    """Acceptance by prompt category: one row per sweep and level, one column per category; None without categories.

    `series` is (label, levels) per sweep; the label column is left out for a single sweep.
    """
    names = sorted({name for _, levels in series for lv in levels for name in lv.categories})
    if not names:
        return None
    labelled = len(series) > 1
    rate = any(lv.rate is not None for _, levels in series for lv in levels)
    head = (["sweep"] if labelled else []) + ["rate" if rate else "C"] + names
    rows = []
    for label, levels in series:
        for lv in levels:
            cells = [lv.categories.get(name) for name in names]
            x = str(lv.concurrency) if lv.rate is None else f"{lv.rate:g}"
            rows.append(([label] if labelled else []) + [x] + [
                "-" if c is None or c.tokens_per_chunk is None else f"{c.tokens_per_chunk:.2f}" for c in cells])
    first: list[Align] = ["left"] if labelled else []
    right: list[Align] = ["right"] * (len(names) + 1)
    return ("acceptance by prompt category (tokens per chunk: the accept length where a chunk is one verify step)\n"
            + table_text(head, rows, align=first + right, out=out))
