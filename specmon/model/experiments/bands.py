"""A tuning grid's verdict: the best setting per load band, with its uncertainty from the repeats. Pure.

At each concurrency level the baseline and every variant measured there are ranked by mean output tok/s; the best,
and every other whose mean is within the noise of the best (`verdict.combined_spread`, the same error bar as the
A/B crossover's; none with single runs), are that level's winners. Adjacent levels with the same winners form a
band, which names its leader (the winner with the highest mean over the band), its gain over the baseline (the
mean of its per-level gains; ± the largest of their error bars, from the same combined spread) and its ties:

    C 1-4: steps=5 topk=4 (+18 % over baseline ±3); C 8-16: steps=3 topk=1 (+6 % ±2, tie: steps=1 topk=1);
    C >= 32: baseline
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specmon.errors import UserError
from specmon.model.experiments.experiment import ExperimentState
from specmon.model.experiments.verdict import (
    ExperimentSummary,
    LevelSummary,
    ProfileRuns,
    ProfileSummary,
    combined_spread,
    summarize,
)
from specmon.model.sweeps.results import SweepResult

BASELINE_LABEL = "baseline"


@dataclass(frozen=True)
class LevelWinners:
    """One level's best setting and the settings tied with it."""

    concurrency: int
    best: str
    ties: tuple[str, ...]                # other profiles within the noise of the best, best first
    gain_pct: float | None               # best over the baseline, %; None where the baseline is not measured
    plus_minus_pct: float | None         # the gain's error bar; None without repeats

    @property
    def winners(self) -> frozenset[str]:
        return frozenset((self.best, *self.ties))


@dataclass(frozen=True)
class Band:
    """Adjacent levels with the same winners."""

    levels: tuple[int, ...]
    leader: str
    ties: tuple[str, ...]
    gain_pct: float | None
    plus_minus_pct: float | None
    last: bool = False                   # reaches the highest measured level, after other bands


@dataclass(frozen=True)
class GridVerdict:
    baseline: str
    levels: tuple[LevelWinners, ...]
    bands: tuple[Band, ...]
    labels: dict[str, str]               # profile -> its short label (the variant's settings, or "baseline")

    @property
    def sentence(self) -> str:
        if not self.bands:
            return "no verdict: no level has a finished measurement"
        return "; ".join(band_text(b, self.labels) for b in self.bands)

    @property
    def brief(self) -> str:
        """The sentence without "over baseline" after each gain (an 80-column pane's two lines)."""
        if not self.bands:
            return self.sentence
        return "; ".join(band_text(b, self.labels, brief=True) for b in self.bands)


def label(profile: str, baseline: str) -> str:
    """`eagle3 steps=3 topk=4` -> `steps=3 topk=4`; the baseline -> `baseline`."""
    if profile == baseline:
        return BASELINE_LABEL
    head, _, settings = profile.partition(" ")
    return settings or head


def level_winners(concurrency: int, entries: Sequence[tuple[str, LevelSummary]],
                  baseline: LevelSummary | None) -> LevelWinners:
    """The best of `entries` (profile, its level) and those within the noise of it."""
    ranked = sorted(entries, key=lambda e: -e[1].mean)
    best_name, best = ranked[0]
    ties = tuple(name for name, lv in ranked[1:] if best.mean - lv.mean <= (combined_spread(best, lv) or 0.0))
    gain, pm = _gain(best, baseline) if best is not baseline else (None, None)
    return LevelWinners(concurrency, best_name, ties, gain, pm)


def _gain(level: LevelSummary, baseline: LevelSummary | None) -> tuple[float | None, float | None]:
    """(% over the baseline, its error bar in %) of one profile's level; Nones where it cannot be said."""
    if baseline is None or baseline.mean <= 0:
        return None, None
    spread = combined_spread(level, baseline)
    return (level.mean / baseline.mean - 1.0) * 100.0, None if spread is None else spread / baseline.mean * 100.0


def grid_verdict(profiles: Sequence[ProfileSummary], baseline: str) -> GridVerdict:
    """The bands of a grid's profiles (the baseline among them); see the module docstring."""
    base = next((p for p in profiles if p.profile == baseline), None)
    levels = sorted({lv.concurrency for p in profiles for lv in p.levels})
    winners = []
    for c in levels:
        entries = [(p.profile, lv) for p in profiles if (lv := p.level(c)) is not None]
        winners.append(level_winners(c, entries, base.level(c) if base else None))
    bands: list[Band] = []
    start = 0
    for i in range(1, len(winners) + 1):
        if i == len(winners) or winners[i].winners != winners[start].winners:
            bands.append(_band(winners[start:i], profiles, baseline, last=i == len(winners) and start > 0))
            start = i
    return GridVerdict(baseline, tuple(winners), tuple(bands), {p.profile: label(p.profile, baseline) for p in profiles})


def _band(run: Sequence[LevelWinners], profiles: Sequence[ProfileSummary], baseline: str, last: bool) -> Band:
    levels = tuple(w.concurrency for w in run)
    members = run[0].winners

    def band_mean(name: str) -> float:
        p = next(p for p in profiles if p.profile == name)
        return math.fsum(lv.mean for c in levels if (lv := p.level(c)) is not None) / len(levels)

    leader = max(sorted(members), key=band_mean)
    ties = tuple(sorted((m for m in members if m != leader), key=band_mean, reverse=True))
    if leader == baseline:
        return Band(levels, leader, ties, None, None, last)
    lead = next(p for p in profiles if p.profile == leader)
    base = next((p for p in profiles if p.profile == baseline), None)
    found = [_gain(lv, base.level(c) if base else None) for c in levels if (lv := lead.level(c)) is not None]
    gains = [g for g, _ in found if g is not None]
    pms = [pm for _, pm in found if pm is not None]
    return Band(levels, leader, ties, math.fsum(gains) / len(gains) if gains else None,
                max(pms) if pms else None, last)


def band_range(band: Band) -> str:
    lo, hi = band.levels[0], band.levels[-1]
    if band.last:
        return f"C >= {lo}"
    return f"C {lo}" if lo == hi else f"C {lo}-{hi}"


def band_text(band: Band, labels: dict[str, str], brief: bool = False) -> str:
    """`C 1-4: steps=5 topk=4 (+18 % over baseline ±3, tie: steps=3 topk=4)`; `brief`: `(+18 % ±3, ...)`."""
    leader = labels.get(band.leader, band.leader)
    notes = []
    if leader != BASELINE_LABEL and band.gain_pct is not None:
        pm = f" ±{band.plus_minus_pct:.2g}" if band.plus_minus_pct is not None else ""
        notes.append(f"{band.gain_pct:+.0f} %{'' if brief else ' over baseline'}{pm}")
    if band.ties:
        notes.append("tie: " + ", ".join(labels.get(t, t) for t in band.ties))
    return f"{band_range(band)}: {leader}" + (f" ({'; '.join(notes)})" if notes else "")


def with_grid_verdict(summary: ExperimentSummary, baseline: str | None) -> ExperimentSummary:
    """An experiment's summary with a tuning grid's verdict (the bands) in place of the A/B one (a crossover
    between the baseline and whichever variant came first says nothing about the grid); unchanged without a grid."""
    if baseline is None:
        return summary
    return replace(summary, verdict=grid_verdict(summary.profiles, baseline).sentence, challenger=None, crossover=None)


def experiment_summary(runs: Sequence[ProfileRuns], state: ExperimentState | None,
                       baseline: str | None = None) -> ExperimentSummary:
    """The summary every front end shows of an experiment's runs: the A/B verdict, or a tuning grid's bands where a
    baseline is given or its state names one (runs read from files alone have no state: A/B unless given one)."""
    return with_grid_verdict(summarize(runs, state.spec.repeats if state else None),
                             baseline if baseline is not None else state.spec.baseline if state else None)


def grid_rows(verdict: GridVerdict) -> tuple[list[list[str]], list[list[str]]]:
    """The report's two tables: per band (load, best, gain over baseline, ties) and per level (C, best, gain, ties)."""
    def gain(value: float | None, pm: float | None) -> str:
        return "–" if value is None else f"{value:+.1f} %" + (f" ± {pm:.2g}" if pm is not None else "")

    def names(profiles: Sequence[str]) -> str:
        return ", ".join(verdict.labels.get(p, p) for p in profiles) or "–"

    bands = [[band_range(b), verdict.labels.get(b.leader, b.leader), gain(b.gain_pct, b.plus_minus_pct), names(b.ties)]
             for b in verdict.bands]
    levels = [[str(w.concurrency), verdict.labels.get(w.best, w.best), gain(w.gain_pct, w.plus_minus_pct),
               names(w.ties)] for w in verdict.levels]
    return bands, levels


def choose_baseline(names: Sequence[str], wanted: str | None, default: str) -> str:
    """The grid's baseline among its profiles `names`: `wanted` (a whole name, or its settings as the verdict shows
    them), else `default`. UserError naming the settings for an unknown name."""
    if wanted is None:
        return default
    chosen = next((n for n in names if wanted in (n, label(n, ""))), None)
    if chosen is None:
        raise UserError(f"--baseline {wanted!r}: not a setting of this grid; one of: "
                        + ", ".join(repr(label(n, "")) for n in names))
    return chosen


def sweeps_as_grid(sweeps: Sequence[SweepResult], baseline: str | None) -> tuple[list[ProfileRuns], str]:
    """A grid read from another tool's files (a `vllm bench sweep serve` folder: one sweep per server setting, its
    repeats among its levels) as profile runs, and its baseline (`choose_baseline`; by default the first)."""
    names = [s.label for s in sweeps]
    return [ProfileRuns(s.label, [(1, s)]) for s in sweeps], choose_baseline(names, baseline, names[0])


def profile_series(runs: ProfileRuns) -> SweepResult | None:
    """One profile's passes as one sweep (its repeats as repeated levels, as compare shows them: each load's mean);
    None where nothing was measured."""
    if not runs.results:
        return None
    first = runs.results[0][1]
    levels = sorted((lv for _, r in runs.results for lv in r.levels), key=lambda lv: lv.load)
    return replace(first, meta=replace(first.meta, profile=runs.profile), levels=tuple(levels))


def grid_series(runs: Sequence[ProfileRuns], baseline: str) -> list[SweepResult]:
    """A grid's profiles as sweeps to compare, the baseline first (the reference of the ratios), each named by its
    settings as the verdict names it (the baseline by its own name)."""
    ordered = sorted(runs, key=lambda r: r.profile != baseline)
    return [replace(s, meta=replace(s.meta, profile=label(r.profile, "")))
            for r in ordered if (s := profile_series(r)) is not None]


def best_envelope(verdict: GridVerdict, profiles: Sequence[ProfileSummary]) -> list[tuple[int, float, str]]:
    """(C, the best setting's mean tok/s, the best setting) at every measured level: the grid's best envelope."""
    by_name = {p.profile: p for p in profiles}
    out = []
    for w in verdict.levels:
        lv = by_name[w.best].level(w.concurrency) if w.best in by_name else None
        if lv is not None:
            out.append((w.concurrency, lv.mean, w.best))
    return out
