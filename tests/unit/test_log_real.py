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

from specmon.model.logs.signals import watch_reads_only
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


def test_the_access_lines_of_reads_that_watch_a_server_are_the_real_logs_health_checks_and_no_other_line() -> None:
    """A ready log that grows by these alone stays quiet, and its run's state unchanged (issue 37). In the real logs
    they are a load balancer's health checks (`sglang-full-startup-tp4-ready-health-llms-in-clouds.log`, 7 lines, counted with grep); their
    completions, model-info reads, tracebacks and every other line are not, nor are several lines with one of
    another kind among them."""
    watching = [line for log in LOGS for line in log.read_bytes().splitlines(keepends=True)
                if watch_reads_only(line if line.endswith(b"\n") else line + b"\n")]
    assert len(watching) == 7
    assert all(b'"GET /health HTTP/1.1" 200 OK' in line for line in watching)
    completion = b'[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    assert watch_reads_only(b"".join(watching))
    assert not watch_reads_only(b"".join(watching[:3]) + completion + b"".join(watching[3:]))
    assert watch_reads_only(watching[0].replace(b"200 OK", b"503 Service Unavailable"))   # whatever the answer
    assert not watch_reads_only(watching[0].replace(b"/health", b"/healthz"))
    assert not watch_reads_only(watching[0].rstrip(b"\n"))   # a line not ended yet: not known to be one
    # Uvicorn's colours (a server started with them forced): the level, the request line and the status.
    coloured = b'\x1b[32mINFO\x1b[0m:     127.0.0.1:51234 - "\x1b[1mGET /metrics HTTP/1.1\x1b[0m" \x1b[32m200 OK\x1b[0m\n'
    assert watch_reads_only(coloured)
