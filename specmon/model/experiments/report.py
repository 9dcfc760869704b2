"""An experiment's summary as JSON, CSV and Markdown (the `specmon experiment --json` object and `specmon report`).
Pure: the chart image is drawn by the report command and only named here.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

from specmon.model.experiments.bands import grid_rows, grid_verdict
from specmon.model.experiments.experiment import NOT_MEASURED, ExperimentState
from specmon.model.experiments.verdict import ExperimentSummary, LevelSummary, ProfileSummary, crossover_bound
from specmon.model.logs.clean import escape_controls
from specmon.model.server.acceptance import LevelAcceptance
from specmon.model.sweeps.compare import load_words

CSV_COLUMNS = ("profile", "concurrency", "repeats", "out_tok_s_mean", "out_tok_s_spread", "server_tok_s",
               "queue_mean", "queue_max", "accept_len_log", "accept_len_metrics", "tokens_per_chunk",
               "accept_disagree", "client_bound", "ttft_p50_ms", "tpot_p50_ms", "skewed", "handling_ms_p99")


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def level_to_dict(lv: LevelSummary) -> dict[str, Any]:
    return {"concurrency": lv.concurrency, "repeats": lv.n, "out_tok_s_mean": _r(lv.mean),
            "out_tok_s_spread": _r(lv.spread), "out_tok_s": [_r(v) for v in lv.values],
            "client_bound": lv.client_bound, "skewed": lv.skewed, "handling_ms_p99": _r(lv.handling_ms_p99),
            "accept_disagree": lv.disagreeing,
            "ttft_p50_ms": _r(lv.ttft_p50_ms), "tpot_p50_ms": _r(lv.tpot_p50_ms),
            "acceptance": None if lv.acceptance is None else lv.acceptance.to_dict(),
            "categories": {name: c.to_dict() for name, c in lv.categories.items()}}


def summary_to_dict(summary: ExperimentSummary, state: ExperimentState | None = None,
                    baseline: str | None = None) -> dict[str, Any]:
    """The JSON object of an experiment: verdict, crossover, per-profile levels, warnings (and state facts); a
    tuning grid's bands where it has a baseline (`baseline`, else the state's)."""
    baseline = baseline if baseline is not None else state.spec.baseline if state is not None else None
    x = summary.crossover
    out: dict[str, Any] = {
        "verdict": summary.verdict,
        "baseline": summary.baseline,
        "challenger": summary.challenger,
        "crossover": None if x is None else {
            "concurrency": _r(x.concurrency), "plus_minus": _r(x.plus_minus) if x.from_spread else None,
            "bracket": list(x.bracket),
            "ahead_below": x.ahead_below, "ahead_above": x.ahead_above},
        "warnings": list(summary.warnings),
        "profiles": [],
    }
    for p in summary.profiles:
        entry: dict[str, Any] = {"profile": p.profile, "speculative": p.speculative,
                                 "server": dict(p.meta.server) if p.meta else None,
                                 "model": p.meta.model if p.meta else None,
                                 "setup": dict(p.setup), "levels": [level_to_dict(lv) for lv in p.levels]}
        if state is not None:
            ps = state.profile(p.profile)
            entry.update(status=ps.status, attempts=ps.attempts, failure=ps.failure,
                         files=[f.to_dict() for f in ps.files])
        out["profiles"].append(entry)
    if baseline is not None:
        grid = grid_verdict(summary.profiles, baseline)
        out["grid"] = {"baseline": baseline, "bands": [
            {"levels": list(b.levels), "best": b.leader, "ties": list(b.ties), "gain_pct": _r(b.gain_pct),
             "plus_minus_pct": _r(b.plus_minus_pct)} for b in grid.bands]}
    if state is not None:
        out = {"name": state.spec.name, "status": state.status, "directory": str(state.directory),
               "state_file": str(state.path), "repeats": state.spec.repeats,
               "levels": list(state.spec.sweep.levels), **out,
               "steps": [s.to_dict() for s in state.steps]}
    return out


def summary_to_csv(summary: ExperimentSummary) -> str:
    """One row per profile and level (means over the repeats)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for p in summary.profiles:
        for lv in p.levels:
            a = lv.acceptance or LevelAcceptance()
            writer.writerow([_csv_text(p.profile), lv.concurrency, lv.n, _cell(lv.mean), _cell(lv.spread), _cell(a.server_tok_s),
                             _cell(a.queue_mean), _cell(a.queue_max), _cell(a.log_accept_len),
                             _cell(a.metrics_accept_len), _cell(a.client_tokens_per_chunk), lv.disagreeing,
                             lv.client_bound, _cell(lv.ttft_p50_ms), _cell(lv.tpot_p50_ms), lv.skewed,
                             _cell(lv.handling_ms_p99)])
    return buf.getvalue()


# A spreadsheet runs a cell that starts with one of these as a formula (`=HYPERLINK(...)` in a profile name).
_FORMULA_START = ("=", "+", "-", "@")


def _csv_text(text: str) -> str:
    """A text cell a spreadsheet shows as text (one that would start a formula is prefixed with `'`) and a terminal
    as text (controls shown as `\\xNN`: the CSV goes to stdout)."""
    text = escape_controls(text)
    return "'" + text if text.startswith(_FORMULA_START) else text


_MD_SPECIAL = re.compile(r"([\\`*_\[\]|])")


def _md(text: object) -> str:
    """Text from a file or a server (a profile or model name, a warning quoting them) as inert Markdown inline text:
    on one line (a newline would start a heading or a list), HTML escaped (`<script>` stays text), and emphasis,
    code, link and table characters backslash-escaped."""
    one = escape_controls(str(text))
    html = one.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", html)


def _code(text: object) -> str:
    """Text shown in a Markdown code span: on one line, no backtick to end the span early."""
    return escape_controls(str(text)).replace("`", "'")


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _num(value: float | None, fmt: str = ".1f") -> str:
    return "–" if value is None else format(value, fmt)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _setup_lines(p: ProfileSummary) -> list[str]:
    server: Mapping[str, Any] = p.meta.server if p.meta else {}
    facts = []
    for key, label in (("kind", "server"), ("version", "version"), ("kv_cache_tokens", "KV tokens"),
                       ("mem_fraction", "mem fraction"), ("tp_size", "TP"), ("speculative", "speculative")):
        if server.get(key) is not None:
            value = server[key]
            if isinstance(value, Mapping):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            facts.append(f"{label} {_md(value)}")
    lines = [f"- **{_md(p.profile)}**" + (f" ({_md(p.meta.model)})" if p.meta and p.meta.model else "") +
             (": " + "; ".join(facts) if facts else "")]
    command = p.setup.get("command")
    if command:
        lines.append("  `" + _code(" ".join(str(c) for c in command)) + "`" +
                     (f" on {_md(p.setup.get('host'))}" if p.setup.get("host") else ""))
    env = p.setup.get("env")
    if env:
        lines.append("  env: " + ", ".join(f"`{_code(f'{k}={v}')}`" for k, v in dict(env).items()))
    return lines


def _grid_lines(summary: ExperimentSummary, baseline: str) -> list[str]:
    """A tuning grid's verdict as tables: the best setting per load band, then per level (bands.py)."""
    bands, levels = grid_rows(grid_verdict(summary.profiles, baseline))
    lines = ["## Best setting per load band", "",
             f"By mean output tok/s; gain over the baseline ({baseline}) ± the repeats' combined spread; a tie is "
             "within that spread of the best.", ""]
    lines += _table(["load", "best", "over baseline", "ties"], bands)
    lines += ["", "Per level:", ""]
    lines += _table(["C", "best", "over baseline", "ties"], levels)
    return lines + [""]


def summary_to_markdown(summary: ExperimentSummary, image: str | None = None,
                        state: ExperimentState | None = None, title: str | None = None,
                        baseline: str | None = None) -> str:
    """The report: setup of each profile, throughput table (mean ± spread), acceptance, warnings, verdict; a tuning
    grid's band and level tables where it has a baseline (`baseline`, else the state's)."""
    baseline = baseline if baseline is not None else state.spec.baseline if state is not None else None
    name = title or (f"Experiment {state.spec.name}" if state else "Sweep comparison")
    lines = [f"# {_md(name)}", "", f"**Verdict:** {_md(summary.verdict)}", ""]
    if state is not None:
        lines += [f"{len(state.spec.sweep.levels)} levels × {state.spec.repeats} repeats per profile; "
                  f"started {state.created_at}, {state.status}.", ""]
        for profile in state.spec.profiles:
            ps = state.profile(profile)
            if ps.status in NOT_MEASURED:
                lines += [f"- **{_md(profile)} was not measured** ({ps.status} after {ps.attempts} launch "
                          f"attempt{'s' if ps.attempts != 1 else ''}): {_md(ps.failure)}"]
        lines.append("")
    if image:
        lines += [f"![output throughput vs concurrency]({image})", ""]
    if baseline is not None:
        lines += _grid_lines(summary, baseline)
    lines += ["## Setup", ""]
    for p in summary.profiles:
        lines += _setup_lines(p)
    lines += ["", "## Output throughput (tok/s, mean ± spread over repeats)", ""]
    concurrencies = sorted({lv.concurrency for p in summary.profiles for lv in p.levels})
    head = ["C"] + [_md(p.profile) for p in summary.profiles]
    rows = []
    for c in concurrencies:
        row = [str(c)]
        for p in summary.profiles:
            lv = p.level(c)
            if lv is None:
                row.append("–")
            else:
                spread = f" ± {lv.spread:.1f}" if lv.spread is not None else ""
                flag = "" if lv.client_flag is None else " (client-bound)" if lv.client_bound else f" ({lv.client_flag})"
                row.append(f"{lv.mean:.1f}{spread} (n={lv.n}){flag}")
        rows.append(row)
    lines += _table(head, rows)
    if any(lv.skewed and not lv.client_bound for p in summary.profiles for lv in p.levels):
        lines += ["", "SKEW: at that level chunks waited that long (p99, the longest over the repeats) for the load "
                      "generator's code after arriving, a material share of the ITL: its chunk times may carry it."]
    x = summary.crossover
    if x is not None:
        lines += ["", f"Crossover: {load_words(x.concurrency)} ({crossover_bound(x)}); measured levels around it "
                      f"{x.bracket[0]} and {x.bracket[1]}: {_md(x.ahead_below)} ahead below, {_md(x.ahead_above)} "
                      "ahead above."]
    lines += ["", "## Acceptance and server view per level", "",
              "Accept length from the decode-batch log lines, from /metrics, the client's tokens per chunk (and, for "
              "another tool's result file, the accept length it recorded) "
              "(flagged when they disagree by more than 10 %); server throughput and queue depth from /metrics.", ""]
    # Another tool's file brings its own accept length (vLLM, SGLang): a column beside specmon's three sources.
    from_file = any(lv.acceptance is not None and lv.acceptance.file_accept_len is not None
                    for p in summary.profiles for lv in p.levels)
    head = ["profile", "C", "log", "metrics", "client tok/chunk"] + (["file's tool"] if from_file else []) + [
        "server tok/s", "client tok/s", "queue mean/max"]
    # The sources' agreement gets a column only where some level's sources disagree (an empty column said nothing).
    flagged = any(lv.disagreeing for p in summary.profiles for lv in p.levels)
    rows = []
    for p in summary.profiles:
        for lv in p.levels:
            a = lv.acceptance or LevelAcceptance()
            queue = "–" if a.queue_mean is None else f"{a.queue_mean:.1f}/{_num(a.queue_max, '.0f')}"
            rows.append([_md(p.profile), str(lv.concurrency), _num(a.log_accept_len, ".2f"), _num(a.metrics_accept_len, ".2f"),
                         _num(a.client_tokens_per_chunk, ".2f")]
                        + ([_num(a.file_accept_len, ".2f")] if from_file else [])
                        + [_num(a.server_tok_s), f"{lv.mean:.1f}", queue]
                        + (["DISAGREE" if lv.disagreeing else "agree"] if flagged else []))
    lines += _table(head + (["sources"] if flagged else []), rows)
    names = sorted({name for p in summary.profiles for lv in p.levels for name in lv.categories})
    if names:
        lines += ["", "## Acceptance by prompt category", "",
                  "The client's tokens per chunk over each category's requests (pooled over the repeats): the accept "
                  "length where the server streams one chunk per verify step.", ""]
        rows = []
        for p in summary.profiles:
            for lv in p.levels:
                cells = [lv.categories.get(name) for name in names]
                rows.append([_md(p.profile), str(lv.concurrency)]
                            + ["–" if c is None else _num(c.tokens_per_chunk, ".2f") for c in cells])
        lines += _table(["profile", "C", *map(_md, names)], rows)
    lines += ["", "## Warnings", ""]
    lines += [f"- {_md(w)}" for w in summary.warnings] or ["- none"]
    lines.append("")
    return "\n".join(lines)
