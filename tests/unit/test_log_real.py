"""Every real launch log in tests/fixtures/real-logs against its hand-checked summary.

The expected files in tests/fixtures/expected/ were written by reading each log (values and line numbers
checked by eye with `grep -n`), not by running the parser. `failure.message_contains` is a fragment of
the fatal message copied from the log. Each log is also fed in awkward chunk sizes: the answer must not
depend on where reads happen to split lines or UTF-8 characters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import FIXTURES

from specmon.model.runs.runstate import LogWatch, RunState, summary

LOGS = sorted((FIXTURES / "real-logs").glob("*.log"))
CONTRACT = ("server", "phase", "shards", "kv_cache_tokens", "ready", "spec_accept_len", "load_seconds")


def scan_bytes(data: bytes, chunk: int) -> RunState:
    watch = LogWatch()
    for i in range(0, len(data), chunk):
        watch.feed(data[i:i + chunk], 0.0)
    watch.close(0.0)
    return watch.state


def test_all_real_logs_are_fixtures_with_headers_and_expectations() -> None:
    assert len(LOGS) == 35
    for log in LOGS:
        assert log.read_text(encoding="utf-8").startswith("# source: https://"), log.name
        assert (FIXTURES / "expected" / f"{log.stem}.json").exists(), log.name


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
@pytest.mark.parametrize("chunk", [1 << 20, 4096, 7])
def test_real_log_summary(log: Path, chunk: int) -> None:
    expected = json.loads((FIXTURES / "expected" / f"{log.stem}.json").read_text())
    got = summary(scan_bytes(log.read_bytes(), chunk))
    for key in CONTRACT:
        assert got[key] == expected[key], f"{log.name}: {key}"
    want_failure = expected["failure"]
    if want_failure is None:
        assert got["failure"] is None, f"{log.name}: unexpected failure {got['failure']}"
    else:
        assert got["failure"] is not None, f"{log.name}: failure missing"
        assert got["failure"]["kind"] == want_failure["kind"]
        assert got["failure"]["line"] == want_failure["line"]
        assert want_failure["message_contains"] in got["failure"]["message"]
    # Extra fields that were checked by hand for this log.
    for key in set(expected) - set(CONTRACT) - {"failure"}:
        assert got[key] == expected[key], f"{log.name}: {key}"


def test_failure_context_ends_with_the_fatal_line() -> None:
    data = (FIXTURES / "real-logs" / "sglang-mistral-startup-warmup-fail-2468.log").read_bytes()
    state = scan_bytes(data, 4096)
    assert state.failure is not None
    assert state.last_lines[-1].startswith("AssertionError: res=<Response [502]>")
    # The context runs back through the traceback to the uvicorn lines before it.
    assert any("Initialization failed. warmup error" in line for line in state.last_lines)
    assert any("Uvicorn running on" in line for line in state.last_lines)
