"""Comparing sweeps: align levels by load, throughput (or goodput) ratio per level, the crossover. Pure.

The question this answers: "at which concurrency does speculation stop paying?". With a baseline sweep `a` and a
speculative sweep `b`, `crossover(a, b)` is the concurrency where b's output throughput stops being above a's (or
starts being), linearly interpolated between the two measured levels that bracket the sign change.

A level's load is its x value (LevelResult.load): the concurrency of a closed-loop sweep, or the offered request
rate of an open-loop one; sweeps of the two kinds are not on one axis and are not compared (sweep_mode). The metric
compared is the output throughput, or the goodput (requests/s meeting the sweep's --slo targets).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specmon.errors import UserError
from specmon.model.logs.clean import one_line
from specmon.model.machine.env import EnvReport, confounds, diff_reports
from specmon.model.sweeps.results import LevelResult, SweepResult
from specmon.model.text.numbers import fmt_count

METRICS = ("throughput", "goodput")
METRIC_UNITS = {"throughput": "output tok/s", "goodput": "goodput req/s"}


def metric_value(level: LevelResult, metric: str = "throughput") -> float | None:
    """The compared figure of a level: output tok/s, or goodput req/s (None when swept without --slo)."""
    return level.output_throughput if metric == "throughput" else level.goodput


def sweep_mode(results: Sequence[SweepResult]) -> str:
    """The one mode ("concurrency" or "rate") of sweeps to compare; UserError naming the odd one out."""
    modes = {r.mode for r in results}
    if len(modes) > 1:
        rate = next(r for r in results if r.mode == "rate")
        closed = next(r for r in results if r.mode != "rate")
        raise UserError(f"compare: {rate.path or rate.label} is an open-loop request-rate sweep and "
                        f"{closed.path or closed.label} a concurrency sweep; their levels are not on one axis")
    return modes.pop() if modes else "concurrency"


def load_words(load: float, mode: str = "concurrency") -> str:
    """A point on the x axis in words: `C≈5.46`, or `≈4.2 req/s` in an open-loop comparison."""
    return f"C≈{load:.3g}" if mode != "rate" else f"≈{load:.3g} req/s"


@dataclass(frozen=True)
class AlignedLevel:
    """One load (concurrency or request rate) with each sweep's level there (None where that sweep did not run it)."""

    load: float
    levels: tuple[LevelResult | None, ...]

    def ratio(self, i: int = 1, base: int = 0, metric: str = "throughput") -> float | None:
        """The metric of sweep i divided by that of sweep `base`; None if either is missing or zero."""
        a, b = self.levels[base], self.levels[i]
        va = None if a is None else metric_value(a, metric)
        vb = None if b is None else metric_value(b, metric)
        if va is None or vb is None or va <= 0:
            return None
        return vb / va


@dataclass(frozen=True)
class Crossover:
    """Where sweep b's metric crosses sweep a's. `concurrency` is the load there: a request rate when the sweeps
    are open-loop."""

    concurrency: float
    b_ahead_before: bool   # True: b led below the crossover (speculation paid, then stopped paying)

    def leaders(self, a: str, b: str) -> tuple[str, str]:
        """(ahead below, ahead above) given the names of sweeps a and b."""
        return (b, a) if self.b_ahead_before else (a, b)


def crossover_words(concurrency: float, ahead_below: str, ahead_above: str, mode: str = "concurrency") -> str:
    """The crossover said in words, so a chart needs no legend-reading: "eagle3 ahead below C≈5.5, baseline
    ahead above". Names lose the prefix they share ("demo-")."""
    below, above = ahead_below, ahead_above
    shared = 0
    while shared < min(len(below), len(above)) and below[shared] == above[shared]:
        shared += 1
    cut = below.rfind("-", 0, shared) + 1  # only at a dash: "demo-eagle3" and "demo-baseline" -> "eagle3", "baseline"
    return f"{below[cut:]} ahead below {load_words(concurrency, mode)}, {above[cut:]} ahead above"


def align(*sweeps: Sequence[LevelResult]) -> list[AlignedLevel]:
    """All loads of all sweeps, ascending; a load run several times within a sweep (repeats: vLLM's --num-runs,
    appended files) stands at the mean of its throughputs (`repeat_spreads` says by how much they varied)."""
    by_x = [pool_repeats(levels) for levels in sweeps]
    all_x = sorted(set().union(*(m.keys() for m in by_x)))
    return [AlignedLevel(x, tuple(m.get(x) for m in by_x)) for x in all_x]


def pool_repeats(levels: Sequence[LevelResult]) -> dict[float, LevelResult]:
    """Each load's level; a repeated load's throughputs (output, request, goodput) are the means of its repeats."""
    groups: dict[float, list[LevelResult]] = {}
    for lv in levels:
        groups.setdefault(lv.load, []).append(lv)
    return {x: g[0] if len(g) == 1 else replace(
        g[-1], output_throughput=statistics.fmean(lv.output_throughput for lv in g),
        request_throughput=statistics.fmean(lv.request_throughput for lv in g),
        goodput=None if any(lv.goodput is None for lv in g) else statistics.fmean(lv.goodput or 0.0 for lv in g))
        for x, g in groups.items()}


def repeat_spreads(levels: Sequence[LevelResult]) -> list[str]:
    """Each repeated load in words: its output throughputs, their mean and sample standard deviation."""
    groups: dict[float, list[float]] = {}
    for lv in levels:
        groups.setdefault(lv.load, []).append(lv.output_throughput)
    mode = "rate" if any(lv.rate is not None for lv in levels) else "concurrency"
    return [f"{_at(x, mode)} ran {len(v)} times: output tok/s {', '.join(f'{t:.1f}' for t in v)} "
            f"(mean {statistics.fmean(v):.1f} ± {statistics.stdev(v):.1f})"
            for x, v in sorted(groups.items()) if len(v) > 1]


def _at(load: float, mode: str) -> str:
    return f"rate {load:g} req/s" if mode == "rate" else f"C={load:g}"


def find_crossover(a: Sequence[LevelResult], b: Sequence[LevelResult], metric: str = "throughput") -> Crossover | None:
    """The first load where b - a of the metric changes sign, over loads where both sweeps have a value.

    Linear interpolation in load between the bracketing levels; a level where both are exactly equal and
    the sign differs on either side is the crossover itself. None when one stays ahead throughout.
    """
    diffs: list[tuple[float, float]] = []
    for row in align(a, b):
        la, lb = row.levels
        va = None if la is None else metric_value(la, metric)
        vb = None if lb is None else metric_value(lb, metric)
        if va is not None and vb is not None:
            diffs.append((row.load, vb - va))
    prev: tuple[float, float] | None = None   # last level with a non-zero difference
    tie_at: float | None = None                # a level with exactly equal values since then
    for c, d in diffs:
        if d == 0:
            tie_at = tie_at if tie_at is not None else c
            continue
        if prev is not None and (prev[1] > 0) != (d > 0):
            c0, d0 = prev
            x = float(tie_at) if tie_at is not None else c0 + (c - c0) * d0 / (d0 - d)
            return Crossover(x, b_ahead_before=d0 > 0)
        prev, tie_at = (c, d), None
    return None


def crossover(a: Sequence[LevelResult], b: Sequence[LevelResult]) -> float | None:
    """The interpolated concurrency where b's output throughput crosses a's, or None if it never does."""
    x = find_crossover(a, b)
    return None if x is None else x.concurrency


# ---- confounds: what makes a comparison unfair ----------------------------------------------------------------
KV_TOKENS_APART = 0.10     # KV capacities further apart than this bound throughput at high concurrency differently
# Workload keys that change what a level measures; levels, warm-up and timeout do not. The seed does with a
# dataset: it picks which prompts a level of fewer requests than the set sends. The keys added later (open-loop
# arrival shape and cap, goodput targets, the dataset and its sampling) are compared with their defaults filled in,
# so files written before they existed do not differ from new ones by a missing key.
_WORKLOAD_KEYS = ("dataset_path", "input_len", "output_len", "api", "fixed_length", "temperature")
_WORKLOAD_DEFAULTS: Mapping[str, Any] = {"burstiness": 1.0, "max_concurrency": None, "slo": {}, "dataset": "random",
                                         "seed": 0, "input_range": 0.0, "output_range": 0.0,
                                         "output_from_dataset": False}


@dataclass(frozen=True)
class ComparedRun:
    """What a confounded-comparison check needs to know of one run or result file (None: not known)."""

    label: str
    mem_fraction_static: float | None = None
    kv_cache_tokens: int | None = None
    workload: Mapping[str, Any] | None = None       # a result's workload (a live server has none yet)
    client_bound: tuple[float, ...] = ()             # loads where the load generator was the bottleneck
    mode: str = "concurrency"                        # what the loads are: "concurrency" or "rate" (req/s)
    setup: EnvReport | None = None                   # environment, launch args, versions (when they were read)
    dataset_sha256: str | None = None                # the prompt file's content hash (an edited file differs)
    model: str | None = None                         # the served model, as the file names it

    @classmethod
    def of_result(cls, result: SweepResult) -> ComparedRun:
        """From a result file: the server facts in its meta line, its workload, its client-bound levels."""
        server = result.meta.server
        mem = server.get("mem_fraction")
        kv = server.get("kv_cache_tokens")
        return cls(
            label=result.label,
            mem_fraction_static=float(mem) if isinstance(mem, (int, float)) and not isinstance(mem, bool) else None,
            kv_cache_tokens=kv if isinstance(kv, int) and not isinstance(kv, bool) else None,
            # Another tool's file records its workload in its own terms: comparing it key by key would only
            # report the difference in vocabulary.
            workload=None if result.meta.tool else result.meta.workload,
            client_bound=tuple(lv.load for lv in result.levels if lv.client.bound),
            mode=result.mode,
            dataset_sha256=_sha(result.meta.dataset),
            model=result.meta.model,
        )


def _sha(dataset: Mapping[str, Any] | None) -> str | None:
    value = dataset.get("sha256") if dataset is not None else None
    return value if isinstance(value, str) else None


def confound_warnings(runs: Sequence[ComparedRun]) -> list[str]:
    """Why runs about to be compared are not a fair comparison; empty when nothing known differs.

    Model: runs that served different models (named in their files) measure the models, not the method.
    Memory settings: a speculative profile that reserved a different `mem_fraction_static`, or ended up with a KV
    cache more than 10% larger or smaller than its baseline's, is bounded differently at high concurrency.
    Workload: different prompt or output lengths (or API, prompts, temperature) measure different things.
    Client-bound levels measured the load generator, not the server.
    Set-up (where each run's `setup` was read): any environment variable of the GPU families, launch argument
    other than the speculative ones, or version that differs from the first run's (specmon.model.machine.env.confounds).
    """
    warnings: list[str] = []
    different_models = model_warning([(r.label, r.model) for r in runs])
    if different_models is not None:
        warnings.append(different_models)
    mems = [r.mem_fraction_static for r in runs if r.mem_fraction_static is not None]
    if len(set(mems)) > 1:
        warnings.append("mem_fraction_static " + " ≠ ".join(f"{v:g}" for v in mems))
    kvs = [r.kv_cache_tokens for r in runs if r.kv_cache_tokens is not None]
    if kvs and max(kvs) > min(kvs) * (1 + KV_TOKENS_APART):
        warnings.append("KV tokens " + " ≠ ".join(fmt_count(v) for v in kvs))
    workloads = [(r.label, r.workload) for r in runs if r.workload is not None]
    for key in (*_WORKLOAD_KEYS, *_WORKLOAD_DEFAULTS):
        values = [(label, w.get(key, _WORKLOAD_DEFAULTS.get(key))) for label, w in workloads]
        if len({repr(v) for _, v in values}) > 1:
            warnings.append(f"workload {key}: " + " ≠ ".join(f"{label} {v}" for label, v in values))
    hashes = [(r.label, r.dataset_sha256) for r in runs if r.dataset_sha256 is not None]
    if len({h for _, h in hashes}) > 1:
        warnings.append("dataset content (sha256): " + " ≠ ".join(f"{label} {h[:12]}" for label, h in hashes))
    base = runs[0] if runs else None
    for r in runs[1:]:
        if base is not None and base.setup is not None and r.setup is not None:
            warnings += [f"{r.label} vs {base.label}: {line}" for line in confounds(diff_reports(base.setup, r.setup))]
    for r in runs:
        if r.client_bound:
            where = ",".join(f"{x:g}" for x in r.client_bound)
            where = f"{where} req/s" if r.mode == "rate" else f"C={where}"
            warnings.append(f"{r.label}: client-bound at {where} (the load generator was the bottleneck)")
    return warnings


def model_warning(models: Sequence[tuple[str, str | None]]) -> str | None:
    """One line when the runs (label, served model; None or "" where the file names none) served different models:
    their throughputs measure different models, not a speculative method."""
    named = [(label, m) for label, m in models if m]
    if len({m for _, m in named}) < 2:
        return None
    # The names come from files and servers: shown on one line, no control sequence of theirs reaching a terminal.
    return "different models: " + " ≠ ".join(f"{one_line(label, 500)} {one_line(m, 500)}" for label, m in named)


@dataclass(frozen=True)
class Comparison:
    """Sweeps side by side: the results (the first is the reference), where the second crosses the first (on
    `metric`), and why the comparison may be unfair."""

    results: tuple[SweepResult, ...]
    crossover: Crossover | None
    warnings: tuple[str, ...]
    metric: str = "throughput"
    mode: str = "concurrency"

    @property
    def failures(self) -> tuple[str, ...]:
        """One line per sweep that measured nothing (SweepResult.failure): such a comparison has failed."""
        return tuple(f"{r.label}: {r.failure}" for r in self.results if r.failure is not None)

    def crossover_text(self) -> str | None:
        """Who leads on each side of the crossover, in words; "no crossover in C=a..b" when one side stays ahead;
        None with fewer than two sweeps."""
        if len(self.results) < 2:
            return None
        a, b = self.results[0].label, self.results[1].label
        if self.crossover is not None:
            return crossover_words(self.crossover.concurrency, *self.crossover.leaders(a, b), mode=self.mode)
        common = [row for row in align(self.results[0].levels, self.results[1].levels) if None not in row.levels]
        if not common:
            return f"no crossover: the sweeps share no {'request rate' if self.mode == 'rate' else 'concurrency level'}"
        lo, hi = common[0].load, common[-1].load
        span = f"{lo:g}..{hi:g} req/s" if self.mode == "rate" else f"C={lo:g}..{hi:g}"
        ratios = [r for r in (row.ratio(metric=self.metric) for row in common) if r is not None and r != 1]
        if not ratios:
            return f"no crossover in {span}"
        return f"no crossover in {span}: {b if ratios[0] > 1 else a} ahead throughout"


def compare_results(results: Sequence[SweepResult], metric: str = "throughput") -> Comparison:
    """The comparison of finished sweeps: crossover of the second against the first on `metric`, and confound
    warnings. UserError when the sweeps mix concurrency and request-rate levels."""
    mode = sweep_mode(results)
    cross = find_crossover(results[0].levels, results[1].levels, metric) if len(results) >= 2 else None
    warnings = confound_warnings([ComparedRun.of_result(r) for r in results]) if len(results) >= 2 else []
    if metric == "goodput":
        warnings += [f"{r.label}: no goodput (swept without --slo)" for r in results
                     if not any(lv.goodput is not None for lv in r.levels)]
    return Comparison(tuple(results), cross, tuple(warnings), metric, mode)
