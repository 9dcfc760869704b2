"""`specmon compare FILE FILE... [--metric throughput|goodput] [--json]`: sweeps side by side, ratios, crossover,
and a terminal chart.

The first file is the reference: ratios are each other file's output throughput (or goodput) divided by the
first's, and the crossover is where another file's curve crosses the first's. The x axis is the concurrency, or the
offered request rate when the files are open-loop sweeps (files of both kinds are refused together).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import plotext as plt

from specmon.commands._table import category_table, table_text
from specmon.errors import UserError
from specmon.model.charts.levelrow import rows_of, series_points
from specmon.model.experiments.bands import (
    GridVerdict,
    choose_baseline,
    grid_rows,
    grid_series,
    grid_verdict,
    sweeps_as_grid,
)
from specmon.model.experiments.experiment import STATE_FILE
from specmon.model.experiments.verdict import summarize
from specmon.model.logs.clean import escape_controls, one_line
from specmon.model.sweeps.compare import (
    METRIC_UNITS,
    METRICS,
    AlignedLevel,
    Crossover,
    align,
    compare_results,
    find_crossover,
    load_words,
    metric_value,
    sweep_mode,
)
from specmon.model.sweeps.formats import lacks_note
from specmon.model.sweeps.results import SweepResult
from specmon.sources.experimentfiles import experiment_runs, load_state
from specmon.sources.resultfiles import read_any_results, serve_grid
from specmon.ui.plot import draw_sweeps
from specmon.ui.rows import CrossoverMark


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "compare",
        help="compare sweep result files: throughput per level, ratio, crossover concurrency",
        description="Compare sweep result files level by level. The first file is the reference (e.g. the "
        "baseline); the crossover is the interpolated concurrency (or request rate, for open-loop sweeps) where "
        "another file's output throughput (or goodput) crosses it (where speculation stops paying).",
    )
    p.add_argument("--metric", choices=METRICS, default="throughput",
                   help="compare output tok/s (default) or goodput: requests/s meeting the sweeps' --slo targets")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="result files of `specmon sweep`, `vllm bench serve --save-result` (a file, or a directory "
                   "of them as one sweep), SGLang bench_serving (JSONL) or guidellm (benchmarks JSON); or one tuning "
                   "grid: an experiment directory with a grid, or a `vllm bench sweep serve` folder of several "
                   "server settings (each setting a series, and the best setting per load band)")
    p.add_argument("--baseline", metavar="NAME", help="a grid's setting to beat (its name or its settings, e.g. "
                   "max_num_seqs=64); default: the experiment's baseline, or the folder's first setting")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of table and chart")
    p.add_argument("--no-chart", action="store_true", help="table only")
    p.set_defaults(func=run)


def load_grid(paths: list[str], baseline: str | None) -> tuple[list[SweepResult], GridVerdict] | None:
    """One tuning grid's series (the baseline first) and its verdict, when `paths` is one: an experiment directory
    with a grid, or a `vllm bench sweep serve` folder of several server settings. None otherwise."""
    path = Path(paths[0])
    if len(paths) == 1 and ((path / STATE_FILE).is_file() or path.name == STATE_FILE):
        state = load_state(path)
        runs = experiment_runs(state)
        if state.spec.baseline is None:
            if baseline is not None:
                raise UserError(f"{path}: --baseline is for a tuning grid; this experiment has none")
            return None
        chosen = choose_baseline([r.profile for r in runs], baseline, state.spec.baseline)
        repeats: int | None = state.spec.repeats
    else:
        combinations = serve_grid(path) if len(paths) == 1 else []
        if not combinations:
            if baseline is not None:
                raise UserError("--baseline is for a tuning grid (an experiment directory with a grid, or a "
                                "`vllm bench sweep serve` folder of several server settings)")
            return None
        runs, chosen = sweeps_as_grid(combinations, baseline)
        repeats = None
    verdict = grid_verdict(summarize(runs, repeats).profiles, chosen)
    return grid_series(runs, chosen), verdict


def run(args: argparse.Namespace) -> int:
    grid = load_grid(args.files, args.baseline)
    sweeps = grid[0] if grid else [read_any_results(f) for f in args.files]
    for s in sweeps:
        for warning in s.warnings:
            print(f"specmon: warning: {one_line(warning, 20_000)}", file=sys.stderr)
    for note in filter(None, map(lacks_note, sweeps)):
        print(f"specmon: note: {one_line(note, 20_000)}", file=sys.stderr)
    metric = args.metric
    mode = sweep_mode(sweeps)
    rows = align(*(s.levels for s in sweeps))
    crossings = _crossings(sweeps, metric)
    warnings = compare_results(sweeps, metric).warnings
    if grid is not None:
        crossings = []   # a grid's answer is its bands, not each setting's crossover with the baseline
    if args.json:
        extra = {} if grid is None else {"grid": grid_json(grid[1])}
        print(json.dumps({**comparison_json(sweeps, rows, crossings, metric), **extra, "warnings": list(warnings)},
                         indent=2, allow_nan=False))
        return 0
    print(render_table(sweeps, rows, metric))
    # Only files that hold prompt categories get rows (another tool's file has none to show).
    by_category = category_table([(lb, s.levels) for lb, s in zip(_labels(sweeps), sweeps)
                                  if any(lv.categories for lv in s.levels)])
    if by_category is not None:
        print(by_category)
    accept = acceptance_table(sweeps, rows)
    if accept is not None:
        print(accept)
    for label, c in crossings:
        print(_crossing_text(sweeps[0].label, label, c, mode))
    for warning in warnings:
        print(f"warning: comparison confounded: {warning}")
    if grid is not None:
        bands, _ = grid_rows(grid[1])
        print(table_text(["load", "best", "over baseline", "ties"], bands))
        print(f"verdict (best output tok/s per load band, baseline {grid[1].baseline}): {grid[1].sentence}")
    if not args.no_chart:
        print(render_chart(sweeps, width=min(100, shutil.get_terminal_size((100, 24)).columns),
                           color=sys.stdout.isatty(), metric=metric))
    return 0


def grid_json(verdict: GridVerdict) -> dict[str, Any]:
    """A grid's verdict in compare's JSON: the baseline, the sentence and the bands."""
    return {"baseline": verdict.baseline, "verdict": verdict.sentence,
            "bands": [{"levels": list(b.levels), "best": b.leader, "ties": list(b.ties), "gain_pct": b.gain_pct,
                       "plus_minus_pct": b.plus_minus_pct} for b in verdict.bands]}


def _labels(sweeps: list[SweepResult]) -> list[str]:
    """Legend names, made unique (two sweeps of one profile get #2, #3)."""
    out: list[str] = []
    for s in sweeps:
        name = escape_controls(s.label)   # a file's name or its profile: never a control sequence on the terminal
        n = 2
        while name in out:
            name = f"{escape_controls(s.label)}#{n}"
            n += 1
        out.append(name)
    return out


def _crossings(sweeps: list[SweepResult], metric: str = "throughput") -> list[tuple[str, Crossover | None]]:
    labels = _labels(sweeps)
    return [(labels[i], find_crossover(sweeps[0].levels, s.levels, metric)) for i, s in enumerate(sweeps) if i > 0]


def _crossing_text(base: str, other: str, c: Crossover | None, mode: str = "concurrency") -> str:
    if c is None:
        return f"crossover {other} vs {base}: none in the measured range"
    lead = other if c.b_ahead_before else base
    trail = base if c.b_ahead_before else other
    return f"crossover {other} vs {base}: {load_words(c.concurrency, mode)} ({lead} ahead below, {trail} ahead above)"


def _x_name(sweeps: list[SweepResult]) -> str:
    return "rate" if sweep_mode(sweeps) == "rate" else "C"


def _value_text(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if metric == "throughput" else f"{v:.2f}"


def render_table(sweeps: list[SweepResult], rows: list[AlignedLevel], metric: str = "throughput") -> str:
    labels = _labels(sweeps)
    unit = "tok/s" if metric == "throughput" else "good/s"
    head = [_x_name(sweeps)] + [f"{lb} {unit}" for lb in labels] + [f"{lb}/{labels[0]}" for lb in labels[1:]]
    table = [head]
    for row in rows:
        cells = [f"{row.load:g}"]
        for lv in row.levels:
            cells.append("-" if lv is None else _value_text(metric, metric_value(lv, metric))
                         + _client_mark(lv.client.flag) + ("!" if lv.over_capacity else ""))
        for i in range(1, len(sweeps)):
            r = row.ratio(i, metric=metric)
            cells.append("-" if r is None else f"{r:.2f}x")
        table.append(cells)
    text = table_text(head, table[1:], align="right")
    if any(lv is not None and lv.client.bound for row in rows for lv in row.levels):
        text += "\n* client-bound level: the load generator was the bottleneck"
    skewed = [f"{label} {_x_name(sweeps)}={row.load:g} {flag}" for row in rows for label, lv in zip(labels, row.levels)
              if lv is not None and (flag := lv.client.flag) is not None and flag.startswith("SKEW")]
    if skewed:
        text += ("\n~ client SKEW: chunks waited that long (p99) for the load generator after arriving, a material "
                 "share of the ITL (" + "; ".join(skewed) + ")")
    if any(lv is not None and lv.over_capacity for row in rows for lv in row.levels):
        text += "\n! over capacity: the server did not keep up with the offered rate"
    return text


def _client_mark(flag: str | None) -> str:
    """A table cell's mark for its level's client flag: * client-bound, ~ SKEW (the figures are under the table)."""
    return "" if flag is None else "*" if flag == "BOUND" else "~"


def acceptance_table(sweeps: list[SweepResult], rows: list[AlignedLevel]) -> str | None:
    """Speculative acceptance per level and file, from each source a file holds: the accept length another tool
    recorded (vLLM's spec_decode_acceptance_length, SGLang's accept_length) and specmon's client tokens per chunk.
    None when no file holds any."""
    labels = _labels(sweeps)
    sources = [(lb, "accept length", "accept_length") for lb, s in zip(labels, sweeps)
               if any(lv.accept_length is not None for lv in s.levels)]
    sources += [(lb, "tok/chunk", "tokens_per_chunk") for lb, s in zip(labels, sweeps)
                if any(lv.tokens_per_chunk is not None for lv in s.levels)]
    if not sources:
        return None
    index = {lb: i for i, lb in enumerate(labels)}
    head = [_x_name(sweeps)] + [f"{lb} {what}" for lb, what, _ in sources]
    body = []
    for row in rows:
        cells = [f"{row.load:g}"]
        for lb, _, attr in sources:
            lv = row.levels[index[lb]]
            v = None if lv is None else getattr(lv, attr)
            cells.append("-" if v is None else f"{v:.2f}")
        body.append(cells)
    return ("speculative acceptance (accept length: as the file's tool recorded it; tok/chunk: specmon's client "
            "count, the accept length where a chunk is one verify step)\n" + table_text(head, body, align="right"))


def render_chart(sweeps: list[SweepResult], width: int = 100, height: int = 22, color: bool = False,
                 metric: str = "throughput") -> str:
    """The metric against the load (concurrency or request rate) for every sweep, as plotext text: the TUI's chart
    (a line and a symbol per sweep, log load axis ticked at the levels, round ticks, the first two sweeps'
    crossover marked where they meet)."""
    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("default" if color else "clear")
    labels = _labels(sweeps)
    series = [(label, series_points(rows_of(s.levels), metric)) for label, s in zip(labels, sweeps)]
    rate = sweep_mode(sweeps) == "rate"
    title = f"{METRIC_UNITS[metric]} vs {'request rate' if rate else 'concurrency'}"
    crossing = None
    if len(sweeps) == 2:
        x = find_crossover(sweeps[0].levels, sweeps[1].levels, metric)
        if x is not None:
            crossing = CrossoverMark(x.concurrency, *x.leaders(labels[0], labels[1]), mode="rate" if rate else "concurrency")
            title += f" (crossover {load_words(x.concurrency, 'rate' if rate else 'concurrency')})"
    plt.title(title)
    plt.xlabel("request rate (req/s)" if rate else "concurrency")
    draw_sweeps(plt, series, crossing, height=height - 4, width=width)   # less title, x ticks, labels, frame
    text = plt.build()
    plt.clear_figure()
    return text if color else plt.uncolorize(text)


def comparison_json(sweeps: list[SweepResult], rows: list[AlignedLevel],
                    crossings: list[tuple[str, Crossover | None]], metric: str = "throughput") -> dict[str, Any]:
    """The comparison as JSON: levels keyed by "concurrency" (or "rate" for open-loop sweeps), each file's output
    throughput and (when a file has it) goodput, its client flag ("BOUND", "SKEW 4.00ms" or null: see
    results.client_flag) with the chunk handling delay p99 in ms, the ratios and crossovers on `metric`."""
    labels = _labels(sweeps)
    x_key = "rate" if sweep_mode(sweeps) == "rate" else "concurrency"
    with_goodput = any(lv is not None and lv.goodput is not None for row in rows for lv in row.levels)
    # Where another tool's file records speculative acceptance: its accept length beside specmon's tokens per chunk.
    peer_accept = any(lv is not None and lv.accept_length is not None for row in rows for lv in row.levels)
    acceptance = ("accept_length", "tokens_per_chunk") if peer_accept else ()
    return {
        "files": [{"path": s.path, "label": lb, "model": s.meta.model, "url": s.meta.url} for s, lb in zip(sweeps, labels)],
        "mode": x_key,
        "metric": metric,
        "levels": [
            {x_key: row.load if x_key == "rate" else int(row.load),
             "output_throughput": [None if lv is None else lv.output_throughput for lv in row.levels],
             **({"goodput": [None if lv is None else lv.goodput for lv in row.levels]} if with_goodput else {}),
             "client": [None if lv is None else lv.client.flag for lv in row.levels],
             "handling_ms_p99": [None if lv is None else lv.client.handling_ms_p99 for lv in row.levels],
             **{key: [None if lv is None else getattr(lv, key) for lv in row.levels] for key in acceptance},
             "categories": [None if lv is None else {name: c.to_dict() for name, c in lv.categories.items()}
                            for lv in row.levels],
             "ratio": [row.ratio(i, metric=metric) for i in range(1, len(sweeps))]}
            for row in rows
        ],
        "crossover": [
            {"label": lb, x_key: None if c is None else c.concurrency,
             "ahead_below": None if c is None else (lb if c.b_ahead_before else labels[0])}
            for lb, c in crossings
        ],
    }
