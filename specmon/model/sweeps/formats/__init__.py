"""Result files of other load generators, read into specmon's model and written in their formats: one adapter per
format (base.PeerFormat), registered here. Pure: reading files and folders from disk is specmon.sources.resultfiles's.

- vllm: `vllm bench serve --save-result` JSON, `--append-result` lines, a `vllm bench sweep serve` summary.json
  (a folder of them is read by specmon.sources.resultfiles); written as a sweep folder.
- sglang: SGLang `bench_serving` JSONL; written as such.
- flat: what vLLM's and SGLang's files share (one flat JSON object per run).
- guidellm: guidellm's benchmarks report (JSON, YAML or CSV); written as its JSON from the per-request records
  (guidellm_report builds that JSON).

The format is told from the content, never the file name. A level sits at its concurrency or, open loop, at its
offered rate with the cap as its concurrency (0 for none), as specmon's own open-loop levels. Definitions line up
with specmon's (specmon.model.sweeps.sweepstats) except guidellm's ITL (specmon's TPOT). What a file lacks is None
(shown as "-"); `lacks_note` says what, from the file's own levels; `PeerFormat.cannot_hold` names what a format has
no field for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specmon.errors import UserError
from specmon.model.sweeps.formats.base import EXPECTED, PeerFormat, check_run_count, lacked
from specmon.model.sweeps.formats.guidellm import Guidellm
from specmon.model.sweeps.formats.sglang import SglangBench
from specmon.model.sweeps.formats.vllm import VllmBench
from specmon.model.sweeps.results import SweepResult, is_specmon, results_from_text, torn_note
from specmon.model.text.textfile import loads

VLLM = VllmBench()
# In the order they are asked to claim a file's content: an object vLLM's keys mark is vLLM's, whatever else it has.
FORMATS: tuple[PeerFormat, ...] = (VLLM, SglangBench(), Guidellm())
BY_NAME = {f.name: f for f in FORMATS}
TOOL_NAMES = {f.name: f.tool for f in FORMATS}

Objects = list[tuple[int, Mapping[str, Any]]]


def parse_any_results(text: str, path: str) -> SweepResult:
    """Parse a result file's text in whichever supported format it is (specmon's or a registered one's).

    Bad or unknown content raises UserError naming the file (and line or field) and what was expected.
    """
    if is_specmon(text):
        return results_from_text(text, path)   # it keeps the levels before a torn last line
    check_run_count(max(text.count(mark) for mark in {f.run_mark for f in FORMATS}), path)
    for fmt in FORMATS:
        result = fmt.read_layout(text, path)
        if result is not None:
            return result
    fmt, objs, torn = detect(text, path)
    return fmt.read(objs, path, torn)


def detect(text: str, path: str) -> tuple[PeerFormat, Objects, tuple[str, ...]]:
    """Which format `text` is, its JSON objects with their line numbers (one, or one per line), and the note on a
    last line cut short (a JSONL whose append was interrupted: the whole lines before it are read)."""
    stripped = text.strip()
    if not stripped:
        raise UserError(f"{path}: empty file; expected {EXPECTED}")
    objs, torn = _objects(text, stripped, path)
    if not objs:
        alt = next((o for o in (f.other_syntax(stripped, path) for f in FORMATS) if o is not None), None)
        objs = [] if alt is None else [(1, alt)]
    report = next((f for f in FORMATS if not f.per_run and objs and f.claims(objs[0][1])), None)
    if report is not None:
        return report, objs, torn
    kinds = {next((f for f in FORMATS if f.per_run and f.claims(o)), None) for _, o in objs}
    if len(kinds) == 1:
        found = kinds.pop()
        if found is not None:
            return found, objs, torn
    raise UserError(f"{path}: not a result file specmon reads; expected {EXPECTED}")


def _objects(text: str, stripped: str, path: str) -> tuple[Objects, tuple[str, ...]]:
    """The JSON object of the file, or its objects one a line; none where it is neither."""
    objs: Objects = []
    torn: tuple[str, ...] = ()
    try:
        whole = loads(stripped)
        if isinstance(whole, dict):
            objs = [(1, whole)]
    except ValueError:
        lines = text.splitlines()
        last = max(n for n, line in enumerate(lines, 1) if line.strip())
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = loads(line)
            except ValueError:
                if objs and n == last and not text.endswith("\n"):
                    torn = (torn_note(path, n),)
                    break
                if objs:
                    raise UserError(f"{path}:{n}: not JSON; expected one JSON object per line") from None
                break
            if not isinstance(obj, dict):
                objs = []
                break
            objs.append((n, obj))
    return objs, torn


def lacks_note(result: SweepResult) -> str | None:
    """What a reader of `result` should know: which tool's file it was and what that file does not hold (computed
    from its levels)."""
    fmt = BY_NAME.get(result.meta.tool) if result.meta.tool is not None else None
    if fmt is None:
        return None
    return f"{result.path}: read as {fmt.tool} output; it has no {', '.join(lacked(result, fmt))} (shown as -)"
