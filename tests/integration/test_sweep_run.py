"""The sweep runner end to end: generator child process, level lines as they finish, errors, cancel, dead server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from paths import SUPPORT
from sse_server import ServerState, serve
from test_ui_rows import view

from specmon.errors import UserError
from specmon.loadgen.workload import Workload
from specmon.model.sweeps.results import LevelResult
from specmon.model.sweeps.sweepstats import ProgressPhase, RequestRecord, SweepProgress, level_from_records
from specmon.orchestration.measure import sweep as sweeping
from specmon.orchestration.measure.comparison import (
    ComparisonUpdate,
    SweepFinished,
    SweepStarted,
    SweepUpdated,
    sweep_profiles,
)
from specmon.orchestration.measure.sweep import SweepNotice, SweepSpec, SweepUpdate, run_sweep
from specmon.sources.resultfiles import read_results

pytestmark = pytest.mark.slow



@pytest.fixture
async def server() -> AsyncIterator[tuple[ServerState, str]]:
    state = ServerState(tokens_per_chunk=2, interval_s=0.002)
    runner, port = await serve(state)
    yield state, f"http://127.0.0.1:{port}"
    await runner.cleanup()


def spec(url: str, out: Path, levels: tuple[int, ...] = (1, 3), requests: int = 6, output_len: int = 12,
         **kw: object) -> SweepSpec:
    wl = Workload(levels=levels, requests_per_level=requests, output_len=output_len, input_len=8,
                  warmup_requests=kw.pop("warmup", 1), timeout_s=kw.pop("timeout_s", 10.0))  # type: ignore[arg-type]
    return SweepSpec(url=url, workload=wl, out_path=out, **kw)  # type: ignore[arg-type]


def records(path: Path) -> list[RequestRecord]:
    return [RequestRecord.from_dict(json.loads(x)) for x in path.read_text().splitlines()]


def loadgen_children() -> list[int]:
    """Pids of live `python -m specmon.loadgen` processes started by this test process."""
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if b"specmon.loadgen" in cmd and ppid == me and stat.rsplit(")", 1)[1].split()[0] != "Z":
            out.append(int(entry))
    return out


async def test_sweep_writes_each_level_as_it_ends(server: tuple[ServerState, str], tmp_path: Path) -> None:
    state, url = server
    out = tmp_path / "r.jsonl"
    seen: list[SweepUpdate] = []
    lines_when_notified: list[int] = []

    def on_update(u: SweepUpdate) -> None:
        seen.append(u)
        if isinstance(u, LevelResult):
            lines_when_notified.append(len(out.read_text().splitlines()))

    result = await run_sweep(spec(url, out), on_update)
    assert lines_when_notified == [2, 3]           # the level line was on disk before anyone heard of it
    assert [lv.concurrency for lv in result.levels] == [1, 3]
    assert read_results(out).levels == result.levels
    assert result.meta.model == "fixture-model"    # auto-detected from /v1/models
    assert result.meta.server["kv_cache_tokens"] == 123456
    assert any(isinstance(u, SweepProgress) for u in seen)
    for lv in result.levels:
        assert lv.requests_ok == 6 and lv.requests_failed == 0
        assert lv.output_tokens == 6 * 12 and lv.tokens_per_chunk == 2.0
        assert lv.client.chunks == 6 * 6
        # The skew figures: how long chunks waited for their stream's code, and the largest burst of socket reads.
        assert lv.client.handling_ms_p99 is not None and lv.client.burst_max is not None and lv.client.burst_max >= 1
    # Every request, warm-up included, is in the records file; tokens match the server's usage exactly.
    recs = records(Path(result.meta.records or ""))
    assert len(recs) == 1 + 12 and sum(r.warmup for r in recs) == 1
    assert sum(r.output_tokens or 0 for r in recs) == state.completion_tokens
    # The level line is what its records say.
    again = level_from_records([r for r in recs if r.concurrency == 3 and not r.warmup])
    assert again.output_tokens == result.levels[1].output_tokens
    for key in ("mean", "p50", "p99"):
        assert getattr(again.ttft_ms, key) == pytest.approx(getattr(result.levels[1].ttft_ms, key), abs=1e-3)


async def test_a_named_model_needs_no_working_model_list(server: tuple[ServerState, str], tmp_path: Path) -> None:
    state, url = server
    state.models_status = 500
    with pytest.raises(UserError, match=r"/v1/models: HTTP 500.*pass --model"):
        await run_sweep(spec(url, tmp_path / "none.jsonl"))
    assert not (tmp_path / "none.jsonl").exists()
    result = await run_sweep(spec(url, tmp_path / "named.jsonl", model="fixture-model"))
    assert result.meta.model == "fixture-model"
    assert [lv.requests_ok for lv in result.levels] == [6, 6]


async def test_duration_mode_runs_each_level_for_its_time(server: tuple[ServerState, str], tmp_path: Path) -> None:
    state, url = server
    state.interval_s = 0.01
    wl = Workload(levels=(1, 4), duration_s=0.6, output_len=10, input_len=8, warmup_requests=1)
    progress: list[SweepProgress] = []
    result = await run_sweep(SweepSpec(url=url, workload=wl, out_path=tmp_path / "d.jsonl"),
                             lambda u: progress.append(u) if isinstance(u, SweepProgress) else None)
    for lv in result.levels:
        # Requests are issued for 0.6 s; those in flight then finish (about 0.1 s each) and count.
        assert 0.6 <= lv.duration_s < 1.5 and lv.requests_failed == 0
        assert lv.requests_ok >= 2 * lv.concurrency
    assert {p.phase for p in progress} == {"warmup", "level"}
    live = [p for p in progress if p.phase is ProgressPhase.MEASURING and p.concurrency == 4 and p.requests_done > 0]
    assert live and all(p.requests_target is None and p.duration_target_s == 0.6 and p.level_count == 2 for p in live)
    assert max(p.in_flight for p in live) == 4 and live[-1].output_tok_s > 0


async def test_a_duration_shorter_than_the_start_ramp_still_sends_one_full_wave(
        server: tuple[ServerState, str], tmp_path: Path) -> None:
    """Workers start 0.5 ms apart, so a 5 ms level at C=64 stopped issuing after ~10 of them and still reported
    itself as C=64; the first wave now always goes out whole."""
    state, url = server
    # Each stream lasts ~1.5 s, so the 64 starts overlap even when a busy box stretches them over several hundred
    # ms (at 0.05 s per token, 0.2 s streams, the first had ended before the last started: max_running 44-48).
    state.interval_s = 0.5
    wl = Workload(levels=(64,), duration_s=0.005, output_len=4, input_len=8, warmup_requests=0)
    result = await run_sweep(SweepSpec(url=url, workload=wl, out_path=tmp_path / "d.jsonl"))
    (lv,) = result.levels
    assert lv.requests_ok + lv.requests_failed >= 64 and lv.requests_failed == 0
    assert state.max_running == 64


async def test_errors_are_counted_by_kind_and_never_stop_the_sweep(server: tuple[ServerState, str], tmp_path: Path) -> None:
    state, url = server
    state.faults = ["", "http_400", "http_500", "malformed", "truncate", "abort", "no_done", "stall"]
    notices: list[str] = []
    result = await run_sweep(spec(url, tmp_path / "r.jsonl", levels=(4,), requests=16, warmup=0, timeout_s=0.5),
                             lambda u: notices.append(u.message) if isinstance(u, SweepNotice) else None)
    (lv,) = result.levels
    assert lv.requests_ok == 4 and lv.requests_failed == 12   # "no_done" streams finished: they count
    assert lv.errors == {"http_4xx": 2, "http_5xx": 2, "malformed_sse": 2, "timeout": 2, "truncated": 4}
    assert lv.output_tokens == 4 * 12
    assert any("12 requests failed" in n for n in notices)


async def test_cancel_keeps_finished_levels_and_stops_the_child(server: tuple[ServerState, str], tmp_path: Path) -> None:
    state, url = server
    state.interval_s = 0.02
    out = tmp_path / "r.jsonl"
    first_level = asyncio.Event()
    task = asyncio.ensure_future(run_sweep(
        spec(url, out, levels=(1, 2), requests=2, output_len=40, warmup=0),
        lambda u: first_level.set() if isinstance(u, LevelResult) else None))
    await asyncio.wait_for(first_level.wait(), 20)
    await asyncio.sleep(0.1)   # the second level is under way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(read_results(out).levels) == 1
    assert loadgen_children() == []


async def test_generator_crash_keeps_finished_levels(server: tuple[ServerState, str], tmp_path: Path) -> None:
    state, url = server
    state.interval_s = 0.02
    out = tmp_path / "r.jsonl"

    def on_update(u: SweepUpdate) -> None:
        if isinstance(u, LevelResult):
            for pid in loadgen_children():
                os.kill(pid, 9)
        raise RuntimeError("a broken view")   # must not end the sweep either

    with pytest.raises(UserError, match=r"load generator exited with code -9 .*1 finished level kept in"):
        await run_sweep(spec(url, out, levels=(1, 2), requests=2, output_len=10), on_update)
    assert [lv.concurrency for lv in read_results(out).levels] == [1]


# A stand-in for the generator (a real one never writes a broken message): it takes the spec, writes LINE, and waits
# for its stdin to close. Its command line names specmon.loadgen, so loadgen_children() sees it.
BROKEN_CHILD = "import sys  # specmon.loadgen\nsys.stdin.readline()\nprint(sys.argv[1], flush=True)\nsys.stdin.read()"


@pytest.mark.parametrize(("line", "says"), [
    ('{"type":"level"}', "a 'level' message without its field 'level'"),
    ('{"type":"level","level":{"concurrency":1}}', "a 'level' message with a bad field (level: requests_ok"),
    ('{"type":"progress","concurrency":1}', "a 'progress' message without its field 'level_index'"),
    ("[1]", "a line that is not a JSON object"),
])
async def test_a_broken_message_from_the_generator_ends_the_sweep_in_one_line(
        server: tuple[ServerState, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, says: str) -> None:
    """A message the generator wrote wrong (a level without its fields, a progress line cut short) ended the sweep
    with a KeyError, ValueError or AttributeError traceback; now it is one line naming the message and what is kept."""
    _, url = server
    monkeypatch.setattr(sweeping, "python_module", lambda module: (sys.executable, "-c", BROKEN_CHILD, line))
    with pytest.raises(UserError) as caught:
        await run_sweep(spec(url, tmp_path / "r.jsonl"))
    text = str(caught.value)
    assert text.startswith(f"load generator wrote {says}") and text.endswith(f"0 finished levels kept in {tmp_path / 'r.jsonl'}")
    assert "\n" not in text and loadgen_children() == []


async def test_several_profiles_report_as_one_stream_of_typed_updates(server: tuple[ServerState, str],
                                                                       tmp_path: Path) -> None:
    """The TUI and `demo --headless` follow a comparison through one stream: each profile's start, its progress,
    levels and notices, and its result, in that order, one profile after the other (three callbacks before)."""
    _, url = server
    stream: list[ComparisonUpdate] = []
    views = [view(profile=name, url=url) for name in ("a", "b")]
    comparison = await sweep_profiles(views, spec(url, tmp_path / "unused.jsonl").workload, results_dir=tmp_path,
                                      on_update=stream.append)
    for name, result in zip(("a", "b"), comparison.results, strict=True):
        mine = [u for u in stream if u.profile == name]
        assert mine[0] == SweepStarted(name) and mine[-1] == SweepFinished(name, result)
        levels = [u.update for u in mine[1:-1] if isinstance(u, SweepUpdated) and isinstance(u.update, LevelResult)]
        assert levels == list(result.levels) and [lv.concurrency for lv in levels] == [1, 3]
        assert any(isinstance(u, SweepUpdated) and isinstance(u.update, SweepProgress) for u in mine)
    assert [type(u) for u in stream].count(SweepStarted) == 2 and stream.index(SweepStarted("b")) > stream.index(
        SweepFinished("a", comparison.results[0]))


async def test_api_key_is_sent_but_never_written(server: tuple[ServerState, str], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    state, url = server
    monkeypatch.setenv("SPECMON_TEST_KEY", "sk-verysecret-0123456789")
    out = tmp_path / "r.jsonl"
    result = await run_sweep(spec(url, out, levels=(1,), requests=2, api_key_env="SPECMON_TEST_KEY"))
    assert state.auth_headers and set(state.auth_headers) == {"Bearer sk-verysecret-0123456789"}
    for path in (out, Path(result.meta.records or "")):
        text = path.read_text()
        assert "verysecret" not in text and "fixturesecret" not in text  # /server_info's api_key is redacted too
    with pytest.raises(UserError, match="not a valid environment variable"):
        await run_sweep(spec(url, tmp_path / "x.jsonl", api_key_env="BAD NAME"))


async def test_a_level_without_successes_stops_the_sweep(server: tuple[ServerState, str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    state, url = server
    state.faults = ["http_400"]
    monkeypatch.setenv("SPECMON_TEST_KEY", "plainsecretvalue")
    notices: list[str] = []
    result = await run_sweep(spec(url, tmp_path / "r.jsonl", levels=(1, 2, 4), api_key_env="SPECMON_TEST_KEY"),
                             lambda u: notices.append(u.message) if isinstance(u, SweepNotice) else None)
    assert [lv.concurrency for lv in result.levels] == [1]
    assert result.levels[0].errors == {"http_4xx": 6}
    (stop,) = [n for n in notices if "stopping the sweep" in n]
    assert "no request succeeded at C=1 (http_4xx 6; first: http_4xx: HTTP 400" in stop
    assert "plainsecretvalue" not in stop
    text = Path(result.meta.records or "").read_text()
    assert "bad request from <redacted>" in text and "plainsecretvalue" not in text


async def test_unreachable_server_is_one_clear_error(free_port: int, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=rf"127.0.0.1:{free_port}: cannot reach the server"):
        await run_sweep(spec(f"http://127.0.0.1:{free_port}", tmp_path / "r.jsonl"))
    assert not (tmp_path / "r.jsonl").exists()


@pytest.fixture
def server_process(free_port: int) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen([sys.executable, str(SUPPORT / "sse_server.py"), "--port", str(free_port), "--interval-s", "0.02"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc, f"http://127.0.0.1:{free_port}"
    proc.kill()
    proc.wait()


async def test_server_dying_mid_sweep_leaves_partial_results(server_process: tuple[subprocess.Popen[str], str],
                                                             tmp_path: Path) -> None:
    proc, url = server_process
    out = tmp_path / "r.jsonl"
    notices: list[str] = []

    def on_update(u: SweepUpdate) -> None:
        if isinstance(u, LevelResult) and u.concurrency == 1:
            proc.kill()   # the server crashes right after the first level
        if isinstance(u, SweepNotice):
            notices.append(u.message)

    result = await asyncio.wait_for(run_sweep(spec(url, out, levels=(1, 2, 4), requests=4, output_len=5), on_update), 60)
    levels = read_results(out).levels
    assert levels == result.levels
    assert levels[0].requests_ok == 4
    # C=2 started while the kill landed: its requests were refused, or cut if one went out on a kept-alive
    # connection just before (two suites at once on this box: both ran into 'truncated' there).
    assert levels[1].requests_ok == 0 and set(levels[1].errors) <= {"refused", "truncated"}
    # The sweep stops at the first level without a single success, instead of running on against nothing.
    assert [level.concurrency for level in levels] == [1, 2]
    [stopped] = [n for n in notices if "no request succeeded at C=2" in n]
    assert "stopping the sweep" in stopped and all(kind in stopped for kind in levels[1].errors)


async def test_records_on_a_full_disk_stop_with_a_warning_and_the_sweep_goes_on(
        server: tuple[ServerState, str], tmp_path: Path) -> None:
    """/dev/full answers every write with ENOSPC, as a full disk does: the generator died on its first records
    flush and the sweep lost every level; now the records stop with one warning and the levels are written."""
    _, url = server
    notices: list[str] = []
    sweep = dataclasses.replace(spec(url, tmp_path / "r.jsonl", levels=(1, 2), requests=4),
                                records_path=Path("/dev/full"))
    result = await run_sweep(sweep, lambda u: notices.append(u.message) if isinstance(u, SweepNotice) else None)
    assert [lv.requests_ok for lv in result.levels] == [4, 4]
    assert [lv.concurrency for lv in read_results(tmp_path / "r.jsonl").levels] == [1, 2]
    # The records warning comes once, and nothing else but what a busy box adds about the generator itself: a
    # level's SKEW caution (chunks waited for it after arriving) or its BOUND warning (two suites at once on this
    # box: "loop lag p99 11.479 ms, ... 0.02 s waiting for a CPU: the machine is busy").
    about_the_box = ("may carry that skew", "the load generator was the bottleneck")
    assert [n for n in notices if not any(text in n for text in about_the_box)] == [
        "/dev/full: per-request records stopped (No space left on device); level results are still written"]


@pytest.mark.timeout(120)
async def test_open_loop_opens_its_connections_before_its_clock_starts(free_port: int, tmp_path: Path) -> None:
    """A connection opened by a send costs the generator's loop ~0.3 ms and makes the sends around it late: at
    100 req/s of 1 s requests (~100 in flight, more than the 64 it used to open beforehand) the level opens every
    connection it needs before it starts, from how long the warm-up's requests took."""
    proc = subprocess.Popen([sys.executable, str(SUPPORT / "sse_server.py"), "--port", str(free_port), "--interval-s", "0.05"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        url = f"http://127.0.0.1:{free_port}"
        wl = Workload(levels=(1,), rates=(100.0,), requests_per_level=200, warmup_requests=2, output_len=20,
                      input_len=8, seed=3)
        result = await asyncio.wait_for(run_sweep(SweepSpec(url=url, workload=wl, out_path=tmp_path / "r.jsonl")), 90)
        with urllib.request.urlopen(url + "/stats") as resp:
            stats = json.load(resp)
    finally:
        proc.kill()
        proc.wait()
    (level,) = result.levels
    assert level.requests_ok == 200
    assert stats["opened_by_post"] == 0


def test_an_open_loop_send_goes_out_in_the_loop_pass_its_time_comes(free_port: int, tmp_path: Path) -> None:
    """Under uvloop a task made in one loop pass first runs in the next, after that pass's socket reads: an arrival
    that woke a dispatcher which then made the request's task went out a whole pass of reads late. Here every pass
    spends 3 ms on a read (a socket that is always readable): a send whose time comes just before a pass's timers
    now goes out at once, so the least late tenth are less late than one 3 ms read (p10 0.8 ms measured on a quiet
    box, 1.7 ms in a CI run whose passes took longer than the read); made in the pass after, every send waits out a
    whole read first (time.sleep sleeps at least its 3 ms), so not one of them can be under 3 ms late (p10 4.2-4.6 ms
    measured). Lateness counts to the moment the
    request's bytes go to the socket: before Python 3.12 aiohttp's body write (a task of its own) went out a pass
    after the send (p10 3.4-4.0 ms measured) until its first step was run at once (client._StampedRequest)."""
    import socket
    import time

    import uvloop

    from specmon.loadgen.runner import SweepRunner

    hog_read_ms = 3.0   # each loop pass's read: the least a send made a pass late can be late
    proc = subprocess.Popen([sys.executable, str(SUPPORT / "sse_server.py"), "--port", str(free_port), "--interval-s", "0.01"],
                            stdout=subprocess.PIPE, text=True)
    levels: list[LevelResult] = []

    async def main() -> None:
        hog, other = socket.socketpair()
        other.send(b"x")   # never read: the reader runs in every pass
        asyncio.get_running_loop().add_reader(hog.fileno(), time.sleep, hog_read_ms / 1000)
        wl = Workload(levels=(1,), rates=(40.0,), requests_per_level=120, warmup_requests=0, output_len=2, input_len=8)
        runner = SweepRunner(f"http://127.0.0.1:{free_port}", "fixture-model", wl,
                             lambda m: levels.append(m) if isinstance(m, LevelResult) else None,
                             records_path=str(tmp_path / "records.jsonl"))
        try:
            await runner.run()
        finally:
            asyncio.get_running_loop().remove_reader(hog.fileno())
            hog.close()
            other.close()

    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        uvloop.run(main())
    finally:
        proc.kill()
        proc.wait()
    (level,) = levels
    assert level.requests_ok == 120
    late = sorted(json.loads(line)["late_ms"] for line in (tmp_path / "records.jsonl").read_text().splitlines())
    assert late[len(late) // 10] < hog_read_ms, late[:: len(late) // 10]
