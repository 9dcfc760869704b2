"""What vLLM's and SGLang's benchmark files share: one flat JSON object per run. Pure.

Keys (vLLM's; SGLang's where its adapter names others): `completed`, `duration`, `total_input_tokens`,
`total_output_tokens`, `output_throughput`, `request_throughput`, `mean/median/pNN_{stem}_ms`, `max_concurrency`,
`request_rate` ("inf" or a number). A run sits at its concurrency (`max_concurrency`; a run sent all at once with no
cap, request rate inf, at its whole request count) or, for an open-loop run (a finite `request_rate`), at its offered
rate with the cap as its concurrency (0 for none), as specmon's own open-loop levels. Runs of the first run's
workload are kept (repeats included); the others, and an open-loop sweep's uncapped `inf` end, are left out and said.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from specmon.errors import UserError
from specmon.model.logs.clean import one_line
from specmon.model.sweeps.compare import repeat_spreads
from specmon.model.sweeps.formats.base import (
    Located,
    PeerFormat,
    axis_workload,
    cap,
    count,
    located,
    num,
    opt,
    positive,
    shown,
)
from specmon.model.sweeps.results import ClientHealth, LevelResult, Stats, SweepMeta, SweepResult

# What makes two runs one workload (a file appending runs of other datasets or lengths holds several sweeps).
SERVE_KEY = "serve_combination"   # a `vllm bench sweep serve` folder's server parameters (its SERVE- name)
_WORKLOAD_KEYS = ("dataset_name", "random_input_len", "random_output_len", "random_range_ratio", "model_id",
                  SERVE_KEY)
_RANDOM_LENGTHS = ("random_input_len", "random_output_len", "random_range_ratio")
# The latency metrics, by specmon's name (each format's `stems` gives its key stem for each).
METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


class FlatRunFormat(PeerFormat):
    """A format of one flat object per run; a subclass names its keys."""

    per_run = True
    run_mark = '"output_throughput"'
    out_folder = False
    stems: ClassVar[Mapping[str, str]]   # specmon's latency metric -> the format's key stem
    total_key: ClassVar[str]             # total token throughput
    concurrency_key: ClassVar[str | None] = None   # achieved concurrency (Little's law)
    goodput_key: ClassVar[str | None] = None
    accept_length_key: ClassVar[str]
    accept_rate_key: ClassVar[str | None] = None    # a percentage

    def claims(self, obj: Mapping[str, Any]) -> bool:
        return "output_throughput" in obj or "mean_ttft_ms" in obj

    def model(self, o: Mapping[str, Any]) -> Any:
        """The served model a run names."""
        return o.get("model_id")

    def labels(self, o: Mapping[str, Any]) -> dict[str, str]:
        """A run's string labels that tell workloads apart (what vLLM's `--metadata k=v` adds): none by default."""
        return {}

    def failed(self, o: Mapping[str, Any], completed: int, where: str) -> int | None:
        """A run's failed requests; None where the format counts only completed ones."""
        return None

    def derived(self, runs: Sequence[Located]) -> list[str]:
        """The figures a file lacks that were derived exactly from its counts (said with the results)."""
        said = []
        if any(o.get("request_throughput") is None for _, o in runs):
            said.append("request throughput derived as completed / duration (the file has none)")
        if any(o.get(self.total_key) is None for _, o in runs):
            said.append("total throughput derived as (input + output tokens) / duration (the file has none)")
        return said

    def read(self, objs: Sequence[tuple[int, Mapping[str, Any]]], path: str, torn: tuple[str, ...]) -> SweepResult:
        return self.result(located(objs, path), path, torn=torn)

    def result(self, runs: Sequence[Located], path: str, label: str | None = None,
               torn: tuple[str, ...] = ()) -> SweepResult:
        """One sweep from runs (each with the place an error about it names), labelled `label` or the file's stem."""
        per_run = self._per_run_labels([o for _, o in runs])
        same, other = self._first_workload(runs, per_run)
        kept, at_once = _open_loop_end(same)
        levels = _one_axis([(where, self.level(o, where)) for where, o in kept], path)
        first = kept[0][1]
        workload = axis_workload(levels)
        for key in ("dataset_name", "random_input_len", "random_output_len", "num_prompts", "backend", "burstiness"):
            if first.get(key) is not None:
                workload[key] = first[key]
        meta = SweepMeta(url="", model=shown(self.model(first)), workload=workload,
                         profile=label or Path(path).stem, created_at=_vllm_date(first.get("date")), tool=self.name)
        notes = (torn + tuple(self.derived(kept)) + _repeats(levels) + _per_run_said(kept, per_run)
                 + self._other_workloads(first, other, per_run) + at_once)
        # The notes quote the file's own labels and models: no control sequence of theirs may reach a terminal.
        return SweepResult(path=path, meta=meta, levels=tuple(levels), notes=tuple(one_line(n, 20_000) for n in notes))

    def level(self, o: Mapping[str, Any], where: str) -> LevelResult:
        completed = count(o, "completed", where)
        failed = self.failed(o, completed, where)
        duration = positive(o, "duration", where)
        out_tokens = count(o, "total_output_tokens", where)
        in_tokens = count(o, "total_input_tokens", where, default=0)
        rate = _rate(o, where)
        limit = cap(o, where)
        sent = _sent(o, completed, failed, where)
        if rate is None and limit is None and sent < 1:
            raise UserError(f"{where}: no max_concurrency, no request rate and no request: no level to place")
        # With no request completed, vLLM writes 0.0 for every latency (the mean of nothing): absent, not zero.
        stats = {name: _flat_stats(o, self.stems[name], where) if completed else Stats() for name in METRICS}
        # SGLang's 0.4-era lines have no request or total throughput: both are exactly derivable (`derived` says so).
        request_tput = opt(o, "request_throughput", where)
        total_tput = opt(o, self.total_key, where)
        return LevelResult(
            # Sent all at once with no cap (rate inf), a run's concurrency is its whole request count.
            concurrency=limit or (0 if rate is not None else sent), rate=rate,
            requests_ok=completed, requests_failed=failed, duration_s=duration,
            output_tokens=out_tokens, output_throughput=num(o, "output_throughput", where),
            request_throughput=completed / duration if request_tput is None else request_tput,
            ttft_ms=stats["ttft_ms"], tpot_ms=stats["tpot_ms"], itl_ms=stats["itl_ms"], e2e_ms=stats["e2e_ms"],
            tokens_per_chunk=None, client=ClientHealth(), input_tokens=in_tokens,
            total_throughput=(in_tokens + out_tokens) / duration if total_tput is None else total_tput,
            achieved_concurrency=None if self.concurrency_key is None else opt(o, self.concurrency_key, where),
            goodput=None if self.goodput_key is None else opt(o, self.goodput_key, where),
            accept_length=opt(o, self.accept_length_key, where),
            accept_rate=None if self.accept_rate_key is None else _percent(o, self.accept_rate_key, where),
        )

    def latency_keys(self, lv: LevelResult) -> dict[str, float | None]:
        """A level's latencies under the format's keys (vLLM's names for a run with --metric-percentiles 90,99;
        SGLang writes these and more)."""
        out: dict[str, float | None] = {}
        for name in METRICS:
            s, stem = getattr(lv, name), self.stems[name]
            out |= {f"mean_{stem}_ms": s.mean, f"median_{stem}_ms": s.p50, f"p90_{stem}_ms": s.p90,
                    f"p99_{stem}_ms": s.p99}
        return out

    # --- which runs are one workload ------------------------------------------------------------------------
    def _workload_key(self, o: Mapping[str, Any], per_run: frozenset[str]) -> tuple[Any, ...]:
        # The random lengths shape the load only when the prompts are random (SGLang and vLLM write their defaults
        # beside any other dataset, and specmon's export writes a prompt set's real mean lengths there, level by
        # level).
        random = not isinstance(o.get("dataset_name"), str) or o["dataset_name"].startswith("random")
        return tuple(o.get(k) if random or k not in _RANDOM_LENGTHS else None for k in _WORKLOAD_KEYS) \
            + self._metadata(o, per_run)

    def _per_run_labels(self, objs: Sequence[Mapping[str, Any]]) -> frozenset[str]:
        """The labels that stamp a run rather than shape its load: named so (timestamp, run_id, host...), or, in a
        file of three runs or more, with a value of its own on every run (a label that groups no two runs describes
        runs, not a workload; with two, `deployment=a` and `deployment=b` are as likely two workloads)."""
        names = {k for o in objs for k in self.labels(o) if k not in _OWN_STRINGS and k not in _WORKLOAD_KEYS}
        per_run = {k for k in names if _PER_RUN_NAME.fullmatch(k)}
        if len(objs) > 2:
            for k in names - per_run:
                values = [o.get(k) for o in objs]
                if None not in values and len(set(values)) == len(values):
                    per_run.add(k)
        return frozenset(per_run)

    def _metadata(self, o: Mapping[str, Any], per_run: frozenset[str] = frozenset()) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in self.labels(o).items() if k not in per_run))

    def _first_workload(self, runs: Sequence[Located], per_run: frozenset[str]) \
            -> tuple[list[Located], list[Located]]:
        """The runs of the first run's workload, and the others (another dataset, lengths or model: not its
        repeats)."""
        key = self._workload_key(runs[0][1], per_run)
        return ([r for r in runs if self._workload_key(r[1], per_run) == key],
                [r for r in runs if self._workload_key(r[1], per_run) != key])

    def _other_workloads(self, first: Mapping[str, Any], other: Sequence[Located],
                         per_run: frozenset[str]) -> tuple[str, ...]:
        if not other:
            return ()
        shared = set(self._metadata(first, per_run))
        what = "; ".join(f"{where}: "
                         + " ".join([*(str(o.get(k)) for k in _WORKLOAD_KEYS if o.get(k) is not None),
                                     *(f"{k}={v}" for k, v in self._metadata(o, per_run) if (k, v) not in shared)])
                         for where, o in other)
        return (f"left out {len(other)} run(s) of another workload than the first line's (dataset, lengths, model, "
                f"--metadata; not repeats of it: put them in a file of their own to compare them): {what}",)


# vLLM's string-valued keys that differ between the runs of one sweep (the rest, and what `--metadata k=v` adds, are
# the same for every run of it: `deployment=base` and `deployment=kvcache` are two sweeps, not repeats).
PER_RUN_STRINGS = ("date", "request_rate")
# A label named as a stamp of one run (when, where, which attempt) never makes another workload, whatever its value.
_PER_RUN_NAME = re.compile(r"(time|timestamp|ts|date|datetime|(start|end)_?time|started|finished|run|run_?(id|name|no)|"
                           r"id|uuid|host|hostname|node|node_?name|machine|pod|job|job_?id|repeat|iteration|iter|"
                           r"trial|attempt|(git_)?commit)", re.IGNORECASE)
# vLLM's own string keys: they name the API and model used, part of the workload however they vary.
_OWN_STRINGS = ("endpoint_type", "backend", "label", "model_id", "tokenizer_id")


def _per_run_said(runs: Sequence[Located], per_run: frozenset[str]) -> tuple[str, ...]:
    """Which per-run labels differed between the runs kept (they are not another workload: said, not acted on)."""
    differed = sorted(k for k in per_run if len({str(o.get(k)) for _, o in runs}) > 1)
    if not differed:
        return ()
    return (f"runs kept as one workload although these labels differ from run to run (a run's stamp, not its load): "
            f"{', '.join(differed)}",)


def _open_loop_end(runs: list[Located]) -> tuple[list[Located], tuple[str, ...]]:
    """An open-loop sweep's runs without its uncapped `inf` end (`--request-rate 10,30,inf`): that run sent every
    request at once, a point on no request-rate axis; it is left out and said. A capped `inf` run is closed loop (a
    concurrency), and a file mixing those with open-loop runs stays refused."""
    def uncapped_inf(o: Mapping[str, Any], where: str) -> bool:
        return _rate(o, where) is None and cap(o, where) is None

    if not any(_rate(o, where) is not None for where, o in runs):
        return runs, ()
    ends = [(where, o) for where, o in runs if uncapped_inf(o, where)]
    if not ends:
        return runs, ()
    said = ", ".join(where for where, _ in ends)
    return [r for r in runs if r not in ends], (
        f"left out {len(ends)} run(s) at request rate inf with no max_concurrency ({said}): every request sent at "
        "once, no point on the request-rate axis of the other runs",)


def _repeats(levels: Sequence[LevelResult]) -> tuple[str, ...]:
    """Loads run more than once (vLLM's --num-runs, appended files): kept, and said with their spread."""
    said = repeat_spreads(levels)
    return (f"repeats kept: {'; '.join(said)}; compare shows each load's mean",) if said else ()


def _one_axis(levels: Sequence[tuple[str, LevelResult]], path: str) -> list[LevelResult]:
    """The levels in order of load; UserError when open-loop and fixed-concurrency runs are mixed."""
    rated = [where for where, lv in levels if lv.rate is not None]
    if rated and len(rated) < len(levels):
        fixed = next(where for where, lv in levels if lv.rate is None)
        raise UserError(f"{path}: mixes open-loop runs ({rated[0]}: a request rate) and fixed-concurrency runs "
                        f"({fixed}: request_rate inf); their levels are not on one axis, compare them as two files")
    return sorted((lv for _, lv in levels), key=lambda lv: lv.load)


def _sent(o: Mapping[str, Any], completed: int, failed: int | None, where: str) -> int:
    """How many requests a run sent: completed + failed where known, else its num_prompts, else those completed."""
    if failed is not None:
        return completed + failed
    return count(o, "num_prompts", where) if o.get("num_prompts") is not None else completed


def _percent(o: Mapping[str, Any], key: str, where: str) -> float | None:
    v = opt(o, key, where)
    if v is not None and v > 100:
        raise UserError(f"{where}: {key} is {v:g}; expected a percentage from 0 to 100")
    return None if v is None else v / 100.0


def _rate(o: Mapping[str, Any], where: str) -> float | None:
    """The run's offered request rate; None for one sent all at once ("inf", or SGLang's replayed "trace")."""
    if o.get("ramp_up_strategy") is not None:
        raise UserError(f"{where}: a ramp-up run (ramp_up_strategy {o['ramp_up_strategy']!r}) has no one request "
                        "rate to place it at")
    rate = o.get("request_rate")
    if rate is None or rate in ("inf", "trace"):
        return None
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise UserError(f"{where}: request_rate must be a number > 0 or \"inf\", got {rate!r}")
    return None if math.isinf(rate) else float(rate)


def _flat_stats(o: Mapping[str, Any], stem: str, where: str) -> Stats:
    p50 = opt(o, f"median_{stem}_ms", where)
    return Stats(opt(o, f"mean_{stem}_ms", where), p50 if p50 is not None else opt(o, f"p50_{stem}_ms", where),
                 opt(o, f"p90_{stem}_ms", where), opt(o, f"p99_{stem}_ms", where))


def _vllm_date(v: Any) -> str:
    # vLLM writes its local time as %Y%m%d-%H%M%S (zone unknown): ISO-8601 without a zone.
    m = re.fullmatch(r"(\d{4})(\d\d)(\d\d)-(\d\d)(\d\d)(\d\d)", v) if isinstance(v, str) else None
    return "{}-{}-{}T{}:{}:{}".format(*m.groups()) if m else ""

