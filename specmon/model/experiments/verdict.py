"""An experiment's results: per-level mean and spread over repeats, the crossover with its uncertainty, acceptance
vs concurrency, confound warnings and a verdict sentence. Pure.

- Spread is the sample standard deviation over the repeats of a level (None with one repeat); the chart draws it as
  error bars.
- The crossover is `compare.find_crossover` over the per-level means. Its uncertainty comes from shifting the
  challenger's curve by the combined spread, sqrt(sa^2 + sb^2), up and down and finding the crossover again; a
  shifted curve that no longer crosses bounds that side by the bracketing level. With one repeat there is no
  spread, and the uncertainty is half the bracket (the resolution of the levels).
- The baseline is the first profile whose server reports no speculation (else the first profile); the challenger
  the first other profile.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specmon.model.machine.env import EnvReport
from specmon.model.server.acceptance import DISAGREE_FRACTION, LevelAcceptance
from specmon.model.sweeps import compare
from specmon.model.sweeps.compare import ComparedRun, find_crossover
from specmon.model.sweeps.results import CategoryStats, LevelResult, SweepMeta, SweepResult, client_flag, pool_categories

MIN_REPEATS = 3


@dataclass(frozen=True)
class ProfileRuns:
    """What one profile of an experiment produced: its result files by pass, and the acceptance per level."""

    profile: str
    results: Sequence[tuple[int, SweepResult]]
    acceptance: Mapping[tuple[int, int], LevelAcceptance] = field(default_factory=dict)   # (pass, C) ->
    setup: Mapping[str, Any] = field(default_factory=dict)     # host, server, command, env (from the profile)


@dataclass(frozen=True)
class LevelSummary:
    """One concurrency of one profile over its repeats."""

    concurrency: int
    values: tuple[float, ...]            # output tok/s of each repeat
    client_bound: int = 0                # repeats the load generator flagged as client-bound
    skewed: int = 0                      # repeats flagged SKEW (chunks waited for the load generator)
    handling_ms_p99: float | None = None  # the longest of those waits (p99 of each skewed repeat)
    acceptance: LevelAcceptance | None = None    # each source averaged over the repeats that have it
    disagreeing: int = 0                 # repeats whose acceptance sources disagreed by > 10 %
    ttft_p50_ms: float | None = None
    tpot_p50_ms: float | None = None
    categories: Mapping[str, CategoryStats] = field(default_factory=dict)   # pooled over the repeats

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return math.fsum(self.values) / len(self.values)

    @property
    def client_flag(self) -> str | None:
        """The level's client flag over its repeats (results.client_flag): BOUND if any repeat was client-bound,
        else SKEW with the longest wait if any was skewed."""
        return client_flag(self.client_bound > 0, self.skewed > 0, self.handling_ms_p99)

    @property
    def spread(self) -> float | None:
        """Sample standard deviation over the repeats; None with fewer than two."""
        if len(self.values) < 2:
            return None
        m = self.mean
        return math.sqrt(math.fsum((v - m) ** 2 for v in self.values) / (len(self.values) - 1))


@dataclass(frozen=True)
class ProfileSummary:
    profile: str
    meta: SweepMeta | None
    levels: tuple[LevelSummary, ...]
    setup: Mapping[str, Any] = field(default_factory=dict)

    @property
    def speculative(self) -> bool:
        server = self.meta.server if self.meta is not None else {}
        return bool(server.get("speculative")) or any(
            lv.acceptance is not None and (lv.acceptance.log_accept_len is not None
                                           or lv.acceptance.file_accept_len is not None) for lv in self.levels)

    def level(self, concurrency: int) -> LevelSummary | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)


@dataclass(frozen=True)
class CrossoverEstimate:
    concurrency: float
    plus_minus: float
    bracket: tuple[int, int]             # the measured levels around it
    ahead_below: str                     # the profile faster below the crossover
    ahead_above: str
    from_spread: bool = True             # plus_minus from the repeats' spread; False: half the bracket (single runs)


@dataclass(frozen=True)
class ExperimentSummary:
    profiles: tuple[ProfileSummary, ...]
    baseline: str | None
    challenger: str | None
    crossover: CrossoverEstimate | None
    verdict: str
    warnings: tuple[str, ...]


def summarize_profile(runs: ProfileRuns) -> ProfileSummary:
    """Group a profile's level lines by concurrency (one value per repeat) with their acceptance."""
    meta = runs.results[0][1].meta if runs.results else None
    return summarize_passes(runs.profile, [(pass_no, result.levels) for pass_no, result in runs.results],
                            runs.acceptance, meta, runs.setup)


def summarize_passes(profile: str, passes: Sequence[tuple[int, Sequence[LevelResult]]],
                     acceptance: Mapping[tuple[int, int], LevelAcceptance] | None = None,
                     meta: SweepMeta | None = None, setup: Mapping[str, Any] | None = None) -> ProfileSummary:
    """A profile's finished levels by pass (an experiment's, before any file is read back) grouped by concurrency;
    `meta` is its result file's first line where one was read."""
    acceptance = acceptance or {}
    by_c: dict[int, list[tuple[int, LevelResult]]] = {}
    for pass_no, pass_levels in passes:
        for level in pass_levels:
            if level.requests_ok > 0:   # a level where every request failed measured no server
                by_c.setdefault(level.concurrency, []).append((pass_no, level))
    levels = []
    for c in sorted(by_c):
        entries = by_c[c]
        acc = [acceptance[(p, c)] for p, _ in entries if (p, c) in acceptance]
        levels.append(LevelSummary(
            concurrency=c,
            values=tuple(lv.output_throughput for _, lv in entries),
            client_bound=sum(1 for _, lv in entries if lv.client.bound),
            skewed=sum(1 for _, lv in entries if lv.client.skewed),
            handling_ms_p99=max((lv.client.handling_ms_p99 for _, lv in entries
                                 if lv.client.skewed and lv.client.handling_ms_p99 is not None), default=None),
            acceptance=_mean_acceptance(acc, [lv.tokens_per_chunk for _, lv in entries],
                                        [lv.accept_length for _, lv in entries]),
            disagreeing=sum(1 for a in acc if a.disagree),
            ttft_p50_ms=_mean([lv.ttft_ms.p50 for _, lv in entries]),
            tpot_p50_ms=_mean([lv.tpot_ms.p50 for _, lv in entries]),
            categories=pool_categories(lv for _, lv in entries),
        ))
    return ProfileSummary(profile, meta, tuple(levels), setup or {})


def summarize(runs: Sequence[ProfileRuns], repeats: int | None = None) -> ExperimentSummary:
    """The whole analysis of an experiment (or of plain sweep files grouped by profile)."""
    return summarize_profiles([summarize_profile(r) for r in runs], repeats)


def summarize_profiles(summaries: Sequence[ProfileSummary], repeats: int | None = None) -> ExperimentSummary:
    """The analysis of profiles already grouped by level: baseline and challenger, crossover, verdict, warnings."""
    profiles = tuple(summaries)
    base, challenger = _pick_pair(profiles)
    crossover = estimate_crossover(base, challenger) if base and challenger else None
    return ExperimentSummary(
        profiles=profiles,
        baseline=base.profile if base else None,
        challenger=challenger.profile if challenger else None,
        crossover=crossover,
        verdict=verdict_sentence(base, challenger, crossover) + skew_note(base, challenger, crossover),
        warnings=tuple(confound_warnings(profiles, repeats)),
    )


def skew_note(base: ProfileSummary | None, challenger: ProfileSummary | None,
              crossover: CrossoverEstimate | None) -> str:
    """What the verdict adds when a level it rests on was flagged SKEW (results.client_flag) in any repeat: the
    crossover rests on the measured levels around it, "faster at every level" on every shared level. "" if none."""
    if base is None or challenger is None:
        return ""
    common = sorted({lv.concurrency for lv in base.levels} & {lv.concurrency for lv in challenger.levels})
    resting = [c for c in common if c in crossover.bracket] if crossover is not None else common
    skewed = [f"{p.profile} C={c} {flag}" for c in resting for p in (base, challenger)
              if (lv := p.level(c)) is not None and (flag := lv.client_flag) is not None and flag.startswith("SKEW")]
    if not skewed:
        return ""
    return (f" (resting on levels flagged {'; '.join(skewed)}: chunks waited that long for the load generator, "
            "so their times may carry it)")


def _pick_pair(profiles: Sequence[ProfileSummary]) -> tuple[ProfileSummary | None, ProfileSummary | None]:
    measured = [p for p in profiles if p.levels]
    if len(measured) < 2:
        return (measured[0] if measured else None), None
    base = next((p for p in measured if not p.speculative), measured[0])
    challenger = next(p for p in measured if p is not base)
    return base, challenger


def _as_levels(summary: ProfileSummary, template: Mapping[int, LevelResult], shift: float = 0.0,
               spreads: Mapping[int, float] | None = None) -> list[LevelResult]:
    """LevelResults carrying the mean throughput (shifted by `shift` x the level's spread) for find_crossover."""
    out = []
    for lv in summary.levels:
        if lv.concurrency in template:
            bump = shift * (spreads or {}).get(lv.concurrency, 0.0)
            out.append(replace(template[lv.concurrency], output_throughput=lv.mean + bump))
    return out


def estimate_crossover(base: ProfileSummary, challenger: ProfileSummary) -> CrossoverEstimate | None:
    """Where the challenger's mean throughput crosses the baseline's, with an uncertainty (module docstring)."""
    common = sorted({lv.concurrency for lv in base.levels} & {lv.concurrency for lv in challenger.levels})
    if len(common) < 2:
        return None
    # find_crossover reads output_throughput of LevelResults: give it the means, on any level object of each C.
    template = {c: _template(c) for c in common}
    a = _as_levels(base, template)
    b = _as_levels(challenger, template)
    found = find_crossover(a, b)
    if found is None:
        return None
    x = found.concurrency
    below = [c for c in common if c <= x]
    above = [c for c in common if c >= x]
    bracket = (below[-1] if below else common[0], above[0] if above else common[-1])
    if bracket[0] == bracket[1]:   # a tie exactly at a measured level
        i = common.index(bracket[0])
        bracket = (common[max(0, i - 1)], common[min(len(common) - 1, i + 1)])
    spreads: dict[int, float] = {}
    for c in common:
        spread = combined_spread(base.level(c), challenger.level(c))
        if spread is None:
            spreads = {}
            break
        spreads[c] = spread
    if not spreads:
        plus_minus = (bracket[1] - bracket[0]) / 2.0
    else:
        ends: list[float] = []
        for shift in (1.0, -1.0):
            shifted = find_crossover(a, _as_levels(challenger, template, shift, spreads))
            if shifted is None:
                # Within the noise the curves do not cross: this side is bounded only by the measured levels.
                ends.append(common[-1] if (shift > 0) == found.b_ahead_before else common[0])
            else:
                ends.append(shifted.concurrency)
        plus_minus = max(abs(e - x) for e in ends)
    names = (challenger.profile, base.profile) if found.b_ahead_before else (base.profile, challenger.profile)
    return CrossoverEstimate(x, plus_minus, bracket, names[0], names[1], from_spread=bool(spreads))


def combined_spread(a: LevelSummary | None, b: LevelSummary | None) -> float | None:
    """The noise of a difference between two profiles' means at one level: sqrt(sa^2 + sb^2) of their spreads over
    the repeats (the crossover's error bar, and a tuning grid's ties); None where either has fewer than two."""
    da, db = (a.spread if a else None), (b.spread if b else None)
    return None if da is None or db is None else math.sqrt(da * da + db * db)


def _template(concurrency: int) -> LevelResult:
    from specmon.model.sweeps.results import ClientHealth, Stats

    return LevelResult(concurrency=concurrency, requests_ok=0, requests_failed=0, duration_s=0.0, output_tokens=0,
                       output_throughput=0.0, request_throughput=0.0, ttft_ms=Stats(), tpot_ms=Stats(),
                       itl_ms=Stats(), e2e_ms=Stats(), tokens_per_chunk=None, client=ClientHealth())


def crossover_bound(x: CrossoverEstimate) -> str:
    """The crossover's uncertainty in words: ± from the repeats' spread, or, where single runs give no spread, the
    measured levels it lies between (a ± of half that bracket read as precision it does not have: C≈4.23 (±6))."""
    if not x.from_spread:
        return f"somewhere between C={x.bracket[0]:g} and C={x.bracket[1]:g}: single runs, no spread to bound it closer"
    return f"±{x.plus_minus:.2g}"


def verdict_sentence(base: ProfileSummary | None, challenger: ProfileSummary | None,
                     crossover: CrossoverEstimate | None) -> str:
    """"X is faster up to C≈N (±M); Y beyond", or who leads throughout, or why there is no verdict."""
    if base is None or challenger is None:
        return "no verdict: fewer than two profiles have finished levels"
    if crossover is not None:
        return (f"{crossover.ahead_below} is faster up to {compare.load_words(crossover.concurrency)} "
                f"({crossover_bound(crossover)}); {crossover.ahead_above} beyond")
    common = sorted({lv.concurrency for lv in base.levels} & {lv.concurrency for lv in challenger.levels})
    if not common:
        return "no verdict: the profiles share no finished level"
    diffs = [challenger.level(c).mean - base.level(c).mean for c in common]  # type: ignore[union-attr]
    leader = challenger.profile if diffs[0] > 0 else base.profile
    other = base.profile if leader == challenger.profile else challenger.profile
    return f"{leader} is faster than {other} at every measured level (C={common[0]}..{common[-1]}); no crossover"


def confound_warnings(profiles: Sequence[ProfileSummary], repeats: int | None = None) -> list[str]:
    """What makes the comparison unfair or the numbers shaky: the comparison rule of specmon.model.sweeps.compare (memory,
    KV tokens more than 10 % apart, workload, client-bound levels, the profiles' environment), then what only an
    experiment knows (server versions, acceptance sources that disagree, too few repeats)."""
    out = compare.confound_warnings([ComparedRun(
        label=p.profile,
        mem_fraction_static=_number(p.meta.server.get("mem_fraction")) if p.meta else None,
        kv_cache_tokens=_integer(p.meta.server.get("kv_cache_tokens")) if p.meta else None,
        workload=p.meta.workload if p.meta else None,
        model=p.meta.model if p.meta else None,
        client_bound=tuple(lv.concurrency for lv in p.levels if lv.client_bound),
        setup=EnvReport(subject=f"profile {p.profile}", host=str(p.setup.get("host", "local")),
                        launch_env={str(k): str(v) for k, v in dict(p.setup.get("env") or {}).items()})
        if p.setup else None,
    ) for p in profiles if p.levels])
    out += _setup_differences(profiles)
    for p in profiles:
        for lv in p.levels:
            if lv.disagreeing and lv.acceptance is not None:
                srcs = ", ".join(f"{k} {v:.2f}" for k, v in lv.acceptance.sources.items())
                out.append(f"{p.profile} C={lv.concurrency}: acceptance sources disagree by more than "
                           f"{DISAGREE_FRACTION:.0%} ({srcs})")
    fewest = min((lv.n for p in profiles for lv in p.levels), default=None)
    if fewest is not None and fewest < MIN_REPEATS:
        planned = f" (planned {repeats})" if repeats is not None and repeats != fewest else ""
        out.append(f"only {fewest} repeat{'s' if fewest != 1 else ''} at some levels{planned}: too few for a "
                   f"trustworthy spread; use repeats >= {MIN_REPEATS}")
    return out


def _setup_differences(profiles: Sequence[ProfileSummary]) -> list[str]:
    out: list[str] = []
    metas = [(p.profile, p.meta) for p in profiles if p.meta is not None]
    for key, label in (("version", "server versions"),):
        values = {name: m.server.get(key) for name, m in metas if m.server.get(key) is not None}
        if len(set(map(str, values.values()))) > 1:
            out.append(f"{label} differ: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return out


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return math.fsum(known) / len(known) if known else None


def _mean_acceptance(items: Sequence[LevelAcceptance], tokens_per_chunk: Sequence[float | None],
                     file_accept: Sequence[float | None] = ()) -> LevelAcceptance | None:
    """Each field averaged over the repeats that have it; the client figure (and a peer file's accept length) from
    the level lines themselves."""
    client = _mean(tokens_per_chunk)
    recorded = _mean(file_accept)
    if not items:
        return None if client is None and recorded is None else LevelAcceptance(client_tokens_per_chunk=client,
                                                                                 file_accept_len=recorded)
    fields: dict[str, Any] = {}
    dicts = [a.to_dict() for a in items]
    for name in LevelAcceptance.__dataclass_fields__:
        values = [d[name] for d in dicts]
        if name in ("log_lines", "metrics_samples"):
            fields[name] = sum(values)
        elif name == "queue_max":
            known = [v for v in values if v is not None]
            fields[name] = max(known) if known else None
        else:
            fields[name] = _mean(values)
    fields["client_tokens_per_chunk"] = client
    fields["file_accept_len"] = recorded
    return LevelAcceptance(**fields)
