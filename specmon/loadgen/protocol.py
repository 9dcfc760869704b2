"""The load generator's wire protocol: every line that passes between specmon and its generator processes.

One JSON object per line, UTF-8, each a message below; `encode` writes any of them and `decode` reads any of them
(nothing else in specmon parses these lines or their "type" field).

- specmon -> generator (`python -m specmon.loadgen`), stdin, first line: `ChildSpec` ({"type": "spec", ...}). The
  API key itself travels only in the environment variable it names. After that line stdin stays open; end-of-file
  (the parent went away) or SIGTERM/SIGINT stops the sweep.
- generator -> specmon, stdout: `SweepProgress` ({"type": "progress", ...}) about 4 times a second, `LevelResult`
  ({"type": "level", "level": {...}}) per finished level, `Warn` ({"type": "warning", "message"}), and last one of
  `Done`, `Stopped` or `Fatal` ({"type": "fatal", "message"}).
- Between a coordinator and its parts (specmon.loadgen.shards, `--part k/N`): a part gets the same `ChildSpec`,
  says `Ready` ({"type": "ready", "level"}) before each level, and takes `Start` ({"type": "start", "level",
  "at_ns"}) on stdin; it writes its request records on stdout as `RequestRecord` lines, which carry no "type" (the
  very line the records file holds, so the hot path writes each record once). After a level (not the warm-up) a
  part writes its `Tally` ({"type": "tally", "acc", "first_error"}: its LevelAccumulator, in pieces for a long
  level) and then its `LevelResult`: the coordinator merges the tallies and only copies the record lines.

A line that is not one of these raises ProtocolError, whose text says in one line what was wrong with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any, cast

from specmon.loadgen.workload import Workload, compact_json
from specmon.model.sweeps.results import LevelResult
from specmon.model.sweeps.sweepstats import LevelAccumulator, RequestRecord, SweepProgress


class ProtocolError(ValueError):
    """A line that is no message of this protocol; its text says what was wrong, in one line."""


class NotJson(ProtocolError):
    """A line that is not JSON at all (stray output from a library, say), as opposed to a broken message."""


@dataclass(frozen=True)
class ChildSpec:
    """What a generator process sends: the first line on its stdin."""

    url: str
    model: str
    workload: Workload
    records_path: str | None = None       # None: records are not written (a part's go to its stdout instead)
    api_key_env: str | None = None        # the environment variable holding the API key, if any


@dataclass(frozen=True)
class Ready:
    """A part has its connections open and its schedule drawn for `level` (1-based, the warm-up included)."""

    level: int


@dataclass(frozen=True)
class Start:
    """The coordinator to every part: start `level` at `at_ns` (time.perf_counter_ns, shared by the processes)."""

    level: int
    at_ns: int


@dataclass(frozen=True)
class Tally:
    """A part's share of a level (or a piece of it): its requests folded into a LevelAccumulator, and the first
    failed request's error."""

    acc: LevelAccumulator
    first_error: str | None = None


@dataclass(frozen=True)
class Warn:
    """A warning for the user; the sweep goes on."""

    message: str


@dataclass(frozen=True)
class Done:
    """The sweep ran to its end."""


@dataclass(frozen=True)
class Stopped:
    """The sweep was stopped (SIGTERM, SIGINT or end of stdin); finished levels were reported."""


@dataclass(frozen=True)
class Fatal:
    """The generator could not go on: `message` says why, in one line."""

    message: str


Message = (ChildSpec | Ready | Start | SweepProgress | LevelResult | RequestRecord | Tally | Warn | Done | Stopped
           | Fatal)
Emit = Callable[[Message], None]


def encode(msg: Message) -> bytes:
    """One message as its line, newline included."""
    d: dict[str, Any]
    if isinstance(msg, RequestRecord):
        return record_line(msg)
    if isinstance(msg, SweepProgress):
        d = {"type": "progress", **msg.to_dict()}
    elif isinstance(msg, LevelResult):
        d = {"type": "level", "level": msg.to_dict()}
    elif isinstance(msg, (Warn, Fatal)):
        d = {"type": "warning" if isinstance(msg, Warn) else "fatal", "message": msg.message}
    elif isinstance(msg, Tally):
        d = {"type": "tally", "acc": msg.acc.to_dict(), "first_error": msg.first_error}
    elif isinstance(msg, Ready):
        d = {"type": "ready", "level": msg.level}
    elif isinstance(msg, Start):
        d = {"type": "start", "level": msg.level, "at_ns": msg.at_ns}
    elif isinstance(msg, ChildSpec):
        d = {"type": "spec", "url": msg.url, "model": msg.model, "workload": msg.workload.to_dict(),
             "records_path": msg.records_path, "api_key_env": msg.api_key_env}
    else:
        d = {"type": "done" if isinstance(msg, Done) else "stopped"}
    return (compact_json(d) + "\n").encode("utf-8")


def record_line(r: RequestRecord) -> bytes:
    """A request record's line: `r.to_dict()` in compact JSON. An open loop's usual record (a success, its fields of the
    types the generator makes, its floats finite) is written out directly, 4.7 us against json's 7.7 (measured; once
    a request): json reads back the very values json.dumps wrote (a number rounded by "%.6f" is the float round(x, 6)
    gives, both correctly rounded), though the text may keep trailing zeros. Any other record goes through json."""
    values = (r.concurrency, r.index, r.start_s, r.end_s, r.status, r.ttft_ms, r.e2e_ms, r.chunks, r.output_tokens,
              r.prompt_tokens, r.rate, r.late_ms)
    category = r.category
    if (r.ok is True and r.warmup is False and not r.queued_ms and tuple(map(type, values)) == _USUAL_TYPES
            and math.isfinite(sum(cast("tuple[float, ...]", values))) and (category is None or type(category) is str)
            and bool not in map(type, r.itl_us)):
        try:
            gaps = ",".join(map(int.__repr__, r.itl_us))
        except TypeError:   # a gap that is no int
            return (compact_json(r.to_dict()) + "\n").encode("utf-8")
        line = _USUAL_LINE % (*values[:10], gaps, *values[10:])
        if category is not None:
            line += ',"category":' + encode_basestring_ascii(category)   # (json's own escaping)
        return (line + "}\n").encode("utf-8")
    return (compact_json(r.to_dict()) + "\n").encode("utf-8")


# The usual record's fields as to_dict has them, each number rounded as there ("rate" is not).
_USUAL_LINE = ('{"concurrency":%d,"i":%d,"start_s":%.6f,"end_s":%.6f,"ok":true,"status":%d,"ttft_ms":%.3f,'
               '"e2e_ms":%.3f,"chunks":%d,"output_tokens":%d,"prompt_tokens":%d,"itl_us":[%s],"rate":%r,"late_ms":%.3f')
_USUAL_TYPES = (int, int, float, float, int, float, float, int, int, int, float, float)


def decode(line: bytes | str) -> Message:
    """The message a line holds; ProtocolError (NotJson for a line that is not JSON) saying what is wrong."""
    try:
        d = json.loads(line)
    except ValueError:
        raise NotJson(f"a line that is not JSON: {_shown(line)}") from None
    if not isinstance(d, dict):
        raise ProtocolError(f"a line that is not a JSON object: {_shown(line)}")
    kind = d.get("type")
    read = _READERS.get(kind) if isinstance(kind, str) or kind is None else None
    what = "a request record" if kind is None else f"a {kind!r} message"
    if read is None:
        raise ProtocolError(f"{what} of no known type: {_shown(line)}")
    try:
        return read(d)
    except KeyError as exc:
        raise ProtocolError(f"{what} without its field {exc}: {_shown(line)}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ProtocolError(f"{what} with a bad field ({exc}): {_shown(line)}") from None


def _shown(line: bytes | str, most: int = 80) -> str:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.rstrip("\n")
    return repr(text[:most]) + ("..." if len(text) > most else "")


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string, got {type(value).__name__}")
    return value


def _whole(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{field} must be a whole number, got {value!r}")
    return value


def _spec(d: Mapping[str, Any]) -> ChildSpec:
    workload = d["workload"]
    if not isinstance(workload, Mapping):
        raise ValueError("workload must be an object")
    records, key_env = d.get("records_path"), d.get("api_key_env")
    return ChildSpec(_text(d["url"], "url"), _text(d["model"], "model"), Workload.from_dict(workload),
                     None if records is None else _text(records, "records_path"),
                     None if key_env is None else _text(key_env, "api_key_env"))


def _progress(d: Mapping[str, Any]) -> SweepProgress:
    for field in _PROGRESS_NEEDS:
        if not isinstance(d[field], (int, float)) or isinstance(d[field], bool):
            raise ValueError(f"{field} must be a number, got {d[field]!r}")
    return SweepProgress.from_dict(d)


_PROGRESS_NEEDS = ("concurrency", "level_index", "level_count", "elapsed_s", "requests_done", "requests_failed",
                   "in_flight", "output_tok_s")


def _level(d: Mapping[str, Any]) -> LevelResult:
    level = d["level"]
    if not isinstance(level, Mapping):
        raise ValueError("level must be an object")
    return LevelResult.from_dict(level)


def _tally(d: Mapping[str, Any]) -> Tally:
    acc, first_error = d["acc"], d.get("first_error")
    if not isinstance(acc, Mapping):
        raise ValueError("acc must be an object")
    return Tally(LevelAccumulator.from_dict(acc), None if first_error is None else _text(first_error, "first_error"))


_READERS: dict[str | None, Callable[[Mapping[str, Any]], Message]] = {
    None: RequestRecord.from_dict,
    "progress": _progress,
    "level": _level,
    "tally": _tally,
    "warning": lambda d: Warn(_text(d["message"], "message")),
    "ready": lambda d: Ready(_whole(d["level"], "level")),
    "start": lambda d: Start(_whole(d["level"], "level"), _whole(d["at_ns"], "at_ns")),
    "spec": _spec,
    "done": lambda d: Done(),
    "stopped": lambda d: Stopped(),
    "fatal": lambda d: Fatal(str(d["message"])),
}
