"""The load generator's wire protocol (specmon.loadgen.protocol): every message goes out and comes back as it was,
and a line that is no message is refused in one line saying what is wrong with it."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys

import pytest

from specmon.loadgen.protocol import (
    ChildSpec,
    Done,
    Fatal,
    Message,
    NotJson,
    ProtocolError,
    Ready,
    Start,
    Stopped,
    Tally,
    Warn,
    decode,
    encode,
)
from specmon.loadgen.workload import Workload
from specmon.model.sweeps.sweepstats import LevelAccumulator, ProgressPhase, RequestRecord, SweepProgress

RECORD = RequestRecord(concurrency=4, index=7, start_s=0.25, end_s=1.5, ok=True, ttft_ms=12.5, e2e_ms=1250.0,
                       chunks=3, output_tokens=9, prompt_tokens=16, itl_us=(20000, 21000), rate=8.0, late_ms=0.4)
PROGRESS = SweepProgress(5, 1, 3, ProgressPhase.MEASURING, 1.5, 10, 1, 40, None, 5, 123.4, 50.0, 2.5, 0.2, 0.3, rate=8.0, sent=12,
                         backlog=2, backlog_late_ms=3.5)


def _level() -> Message:
    acc = LevelAccumulator(4)
    acc.add(RECORD)
    return acc.result(1.25, 0.5, 3.0, "2026-12-05T12:00:00Z", cpu_wait_s=0.1, handling_ms_p99=0.2, burst_max=3)


@pytest.mark.parametrize("msg", [
    ChildSpec("http://127.0.0.1:1", "m", Workload(levels=(1, 4), rates=(2.0,), processes=2), "/tmp/r.jsonl", "KEY"),
    ChildSpec("http://127.0.0.1:1", "m", Workload(levels=(1,))),
    Ready(2), Start(2, 123_456_789_012), PROGRESS, RECORD, Warn("careful"), Done(), Stopped(), Fatal("broken"),
], ids=lambda m: type(m).__name__)
def test_every_message_comes_back_as_it_went(msg: Message) -> None:
    line = encode(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line) == msg


def test_a_progress_phase_travels_as_its_word_and_comes_back_as_the_typed_phase() -> None:
    line = encode(PROGRESS)
    assert b'"phase":"level"' in line   # the word older generators sent
    assert decode(line).phase is ProgressPhase.MEASURING   # type: ignore[union-attr]
    warmup = decode(line.replace(b'"phase":"level"', b'"phase":"warmup"'))
    assert isinstance(warmup, SweepProgress) and warmup.phase is ProgressPhase.WARMUP


def test_a_level_comes_back_as_the_results_file_holds_it() -> None:
    level = _level()
    back = decode(encode(level))
    assert encode(back) == encode(level)


def test_a_record_line_is_the_records_file_line() -> None:
    """Records travel from a part to its coordinator as the very line the records file holds: no "type", no copy."""
    assert b'"type"' not in encode(RECORD)


HOSTILE = ['quote " backslash \\ slash /', "new\nline\ttab\r\x00\x1f\x7f", "\u2028\u2029 é 漢字 \U0001F600",
           "\ud800 lone surrogate", "</script>", "", "null", "NaN"]
ODD_FLOATS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1e-7, 0.1 + 0.2, 2.5e-7, 1e16, 1e22, -1e300,
              sys.float_info.max, 123456.0000005, 0.0000005, 0.0000015]


def _as_json_reads_it(line: bytes) -> str:
    """What json reads from a line, written back (types kept: 1, 1.0 and true differ; NaN is NaN)."""
    return json.dumps(json.loads(line), sort_keys=True)


def _records() -> list[RequestRecord]:
    """Records as the generator makes them, and records holding what json has to escape or spell out itself."""
    usual = dataclasses.replace(RECORD, concurrency=0, status=200, rate=500.0, late_ms=0.1234567,
                                itl_us=tuple(range(10_000, 10_015)))
    out = [RECORD, usual, dataclasses.replace(usual, rate=None, late_ms=None), dataclasses.replace(usual, warmup=True),
           dataclasses.replace(usual, queued_ms=3.25), dataclasses.replace(usual, status=None, output_tokens=None),
           dataclasses.replace(usual, ok=False, error="timeout", detail="no data", ttft_ms=None, e2e_ms=None),
           dataclasses.replace(usual, itl_us=(True, 2)), dataclasses.replace(usual, itl_us=(1.5, math.nan)),
           dataclasses.replace(usual, itl_us=()), dataclasses.replace(usual, rate=500)]
    out += [dataclasses.replace(usual, category=text) for text in HOSTILE]
    out += [dataclasses.replace(usual, ok=False, error=text, detail=text) for text in HOSTILE]
    for name in ("start_s", "end_s", "ttft_ms", "e2e_ms", "rate", "late_ms", "queued_ms"):
        out += [dataclasses.replace(usual, **{name: x}) for x in ODD_FLOATS]
    rng = random.Random(7)
    for _ in range(2000):   # any float's rounding: 5 decimal orders either side of the rounded digit, and far out
        x = rng.uniform(-1, 1) * 10 ** rng.uniform(-12, 12)
        out.append(dataclasses.replace(usual, start_s=x, end_s=-x, ttft_ms=x, e2e_ms=x * 7, late_ms=x / 3))
    return out


def test_a_record_line_reads_back_as_what_json_writes_for_it() -> None:
    """The records file holds the values json.dumps would have written: every string escaped as json does, every
    number rounded as to_dict rounds it, non-finite floats spelled as json spells them."""
    for r in _records():
        line = encode(r)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert _as_json_reads_it(line) == _as_json_reads_it(json.dumps(r.to_dict()).encode()), r


@pytest.mark.parametrize(("line", "says"), [
    (b"Loading weights...\n", "a line that is not JSON: 'Loading weights...'"),
    (b"[1, 2]\n", "a line that is not a JSON object: '[1, 2]'"),
    (b'{"type": "levle"}\n', "a 'levle' message of no known type"),
    (b'{"type": 3}\n', "a 3 message of no known type"),
    (b'{"type": "level"}\n', "a 'level' message without its field 'level'"),
    (b'{"type": "level", "level": {"concurrency": 1}}\n', "a 'level' message with a bad field (level: requests_ok"),
    (b'{"type": "level", "level": [1]}\n', "a 'level' message with a bad field (level must be an object)"),
    (b'{"type": "progress", "concurrency": 1}\n', "a 'progress' message without its field 'level_index'"),
    (b'{"type": "progress", "concurrency": "x"}\n', "a 'progress' message with a bad field (concurrency must be"),
    (b'{"type": "progress", "concurrency": 1, "level_index": 0, "level_count": 1, "phase": "cooldown", '
     b'"elapsed_s": 1, "requests_done": 0, "requests_failed": 0, "in_flight": 0, "output_tok_s": 0}\n',
     "a 'progress' message with a bad field ('cooldown' is not a valid ProgressPhase)"),
    (b'{"type": "ready", "level": "2"}\n', "a 'ready' message with a bad field (level must be a whole number"),
    (b'{"type": "start", "level": 2}\n', "a 'start' message without its field 'at_ns'"),
    (b'{"type": "warning", "message": null}\n', "a 'warning' message with a bad field (message must be a string"),
    (b'{"type": "spec", "url": "u", "model": "m", "workload": 5}\n', "a 'spec' message with a bad field"),
    (b'{"type": "tally", "acc": []}\n', "a 'tally' message with a bad field (acc must be an object)"),
    (b'{"type": "tally", "acc": {"concurrency": 1}}\n', "a 'tally' message without its field 'rate'"),
    (b'{"concurrency": 1}\n', "a request record without its field 'i'"),
    (b'{"concurrency": "four", "i": 1, "start_s": 0, "end_s": 1, "ok": true}\n', "a request record with a bad field"),
])
def test_a_broken_line_is_refused_in_one_line_saying_what_is_wrong(line: bytes, says: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode(line)
    text = str(caught.value)
    assert says in text and "\n" not in text, text
    assert isinstance(caught.value, NotJson) == line.startswith(b"Loading")


def test_a_parts_tally_comes_back_with_the_figures_it_went_with() -> None:
    acc = LevelAccumulator(4, rate=8.0)
    for i in range(5):
        acc.add(dataclasses.replace(RECORD, index=i, ttft_ms=12.5 + i, late_ms=0.25 * i))
    back = decode(encode(Tally(acc, "http: 502 Bad Gateway")))
    assert isinstance(back, Tally) and back.first_error == "http: 502 Bad Gateway"
    assert back.acc.result(1.25, 0.5, 3.0) == acc.result(1.25, 0.5, 3.0)


def test_a_long_broken_line_is_shown_cut() -> None:
    with pytest.raises(ProtocolError, match=r"not JSON: 'xxxx+'\.\.\.$"):
        decode(b"x" * 10_000)
