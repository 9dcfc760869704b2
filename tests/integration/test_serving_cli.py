"""`specmon metrics NAME|RUN` against real sim servers: figures, JSON lines when following, and a server without
/metrics saying so."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from lifecycle_support import Cli
from lifecycle_support import profile_toml as _profile
from test_lifecycle_cli import cli  # noqa: F401  (the fixture: a private config, its runs stopped after)
from test_servermetrics import HOSTILE

pytestmark = pytest.mark.slow


def _load(port: int, n: int, max_tokens: int, stop: threading.Event) -> None:
    """`n` concurrent streams of completions against the sim until `stop`."""
    def one() -> None:
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                try:
                    client.post(f"http://127.0.0.1:{port}/v1/completions",
                                json={"prompt": "Hi", "max_tokens": max_tokens, "ignore_eos": True})
                except httpx.HTTPError:   # the server stopped at the test's end
                    return
    for _ in range(n):
        threading.Thread(target=one, daemon=True).start()


Line = dict[str, object]


def _follow_under_load(specmon: Cli, port: int, clients: int, until: Callable[[list[Line]], bool]) -> list[Line]:
    """`specmon metrics sim --json --follow` while `clients` streams of 400 tokens run against the sim: its lines
    until `until(lines)` holds, or a minute has passed."""
    stop = threading.Event()
    _load(port, clients, 400, stop)
    follow = subprocess.Popen(specmon.argv("metrics", "sim", "--json", "--follow"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        lines: list[Line] = []
        deadline = time.monotonic() + 60
        assert follow.stdout is not None
        while time.monotonic() < deadline and not until(lines):
            lines.append(json.loads(follow.stdout.readline()))
        return lines
    finally:
        stop.set()
        follow.terminate()
        follow.wait(10)


def test_metrics_once_and_following_under_load(cli: Cli, free_port: int) -> None:  # noqa: F811
    # A small batch (4) and KV (4000 tokens): 12 clients keep requests waiting and the KV cache busy.
    cli.config.write_text(_profile("sim", free_port, "--max-running-requests", "4", "--kv-tokens", "4000",
                                   load=0.5) + "metrics_interval_s = 0.3\n")
    assert cli("launch", "sim", "--wait").returncode == 0
    idle = cli("metrics", "sim")
    assert idle.returncode == 0, idle.stderr
    assert idle.stdout.startswith("sim: running 0  waiting 0  KV 0%  tok/s 0"), idle.stdout
    assert "accept —" in idle.stdout          # no speculation: absent, not 0

    lines = _follow_under_load(cli, free_port, 12, lambda lines: any(float(x["waiting"] or 0) > 0 for x in lines)
                               and any(float(x["tok_s"] or 0) > 0 for x in lines))  # type: ignore[arg-type]
    busy = [x for x in lines if float(x["running"] or 0) > 0]                      # type: ignore[arg-type]
    assert busy and max(float(x["running"]) for x in busy) <= 4                      # type: ignore[arg-type]
    assert any(float(x["waiting"] or 0) > 0 for x in lines)                         # type: ignore[arg-type]
    assert any(float(x["kv_pct"] or 0) > 0 for x in lines)                          # type: ignore[arg-type]
    assert set(lines[0]) >= {"running", "waiting", "kv_pct", "tok_s", "prefix_hit_pct", "preempt_per_s",
                             "accept_len", "alerts"}


def test_a_server_without_metrics_says_so(cli: Cli, free_port: int) -> None:  # noqa: F811
    cli.config.write_text(_profile("bare", free_port, "--no-metrics", load=0.5))
    assert cli("launch", "bare", "--wait").returncode == 0
    out = cli("metrics", "bare")
    assert out.returncode == 1
    assert out.stdout == "specmon: bare: no /metrics (HTTP 404); SGLang serves it only with --enable-metrics\n"
    missing = cli("metrics", "no-such-profile")
    assert missing.returncode == 2 and "no-such-profile" in missing.stderr


@pytest.mark.parametrize("flavor", ["sglang", "vllm"])
def test_preemptions_rise_past_kv_capacity_and_alert(cli: Cli, free_port: int, flavor: str) -> None:  # noqa: F811
    # Admission counts a twentieth of each request's 400 output tokens, so 8 clients outgrow the 2000-token cache
    # and the sim preempts (SGLang: retracts) the newest: the counter rises, and so does the alert.
    cli.config.write_text(_profile("sim", free_port, "--flavor", flavor, "--kv-tokens", "2000",
                                   "--new-token-ratio", "0.05", load=0.5) + "metrics_interval_s = 0.3\n")
    assert cli("launch", "sim", "--wait").returncode == 0
    def rising(lines: list[Line]) -> list[Line]:
        return [x for x in lines if any(str(a).startswith("preemptions rising") for a in x["alerts"])]  # type: ignore[attr-defined]

    lines = _follow_under_load(cli, free_port, 8, lambda lines: bool(rising(lines)))
    assert rising(lines), lines[-3:]
    assert float(rising(lines)[0]["preempt_per_s"]) > 0                              # type: ignore[arg-type]
    assert float(rising(lines)[0]["preemptions"]) >= 1                               # type: ignore[arg-type]


def _refuse_constant(name: str) -> object:
    raise AssertionError(f"{name} in JSON output")


def test_impossible_values_are_left_out_and_named(cli: Cli, free_port: int) -> None:  # noqa: F811
    """A server whose /metrics holds 1e308 twice, a negative queue and a series given twice: `specmon metrics` ended
    in an fsum OverflowError traceback; now the figures are absent, named, and the JSON is JSON."""
    hostile = cli.config.parent / "hostile.prom"
    hostile.write_text(HOSTILE)
    cli.config.write_text(_profile("sim", free_port, "--flavor", "vllm", "--metrics-from", str(hostile), load=0.5)
                          + "metrics_interval_s = 0.2\n")
    assert cli("launch", "sim", "--wait").returncode == 0
    plain = cli("metrics", "sim")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith("sim: running —  waiting —  KV —"), plain.stdout
    assert "inf" not in plain.stdout and "ignored impossible values: vllm:num_requests_running 1e+308" in plain.stdout
    line = json.loads(cli("metrics", "sim", "--json").stdout, parse_constant=_refuse_constant)
    assert (line["running"], line["waiting"], line["kv_pct"], line["preemptions"]) == (None, None, None, 2.0)
    assert "vllm:kv_cache_usage_perc 1e+308" in line["ignored"]
    for bad in ("nan", "inf", "0"):   # read without pause, or never (the CLI's one argument type refuses them)
        out = cli("metrics", "sim", "--interval", bad)
        assert out.returncode == 2 and "--interval" in out.stderr and "Traceback" not in out.stderr, (bad, out)


def test_a_metrics_answer_that_never_ends_is_refused_with_its_reason(cli: Cli, free_port: int) -> None:  # noqa: F811
    """/metrics streams without end: the read stops at MAX_BODY and says so (it printed "—" and exited 0)."""
    cli.config.write_text(_profile("sim", free_port, "--metrics-from", "/dev/zero", load=0.5))
    assert cli("launch", "sim", "--wait").returncode == 0
    out = cli("metrics", "sim")
    assert out.returncode == 1, out
    assert out.stderr == "specmon: sim: /metrics did not answer: answer over 4 MiB, not read\n"
