"""The run-state reducer: phases, shard progress and rate, ETA, ready/failure rules, LogWatch."""

from __future__ import annotations

import dataclasses
import json

import pytest
from paths import FIXTURES

from specmon.model.logs import events as ev
from specmon.model.runs.runstate import (
    PHASES,
    SHARD_RATE_ALPHA,
    LogPhase,
    LogWatch,
    RunState,
    eta_seconds,
    reduce,
    summary,
)


def run(events: list[object], state: RunState | None = None, now: float = 0.0) -> RunState:
    state = state or RunState()
    for e in events:
        state = reduce(state, e, now)
    return state


def test_phases_in_launch_order() -> None:
    steps = [
        (ev.ServerDetected("sglang", line_no=1), "launching"),
        (ev.LoadStarted(21.6, line_no=2), "loading_weights"),
        (ev.ShardProgress(1, 2, line_no=3), "loading_weights"),
        (ev.WeightsLoaded(15.5, None, line_no=4), "loading_weights"),
        (ev.KVCache(tokens=46611, line_no=5), "allocating_kv"),
        (ev.GraphCapture(stage="begin", line_no=6), "capturing_graphs"),
        (ev.GraphCapture(3, 13, line_no=7), "capturing_graphs"),
        (ev.HttpUp(None, line_no=8), "warming_up"),  # SGLang: uvicorn up is only the start of warm-up
        (ev.HttpRequest("POST", "/generate", 200, line_no=9), "warming_up"),
        (ev.Ready(29.0, line_no=10), "ready"),
    ]
    state = RunState()
    seen = []
    for event, phase in steps:
        state = reduce(state, event, 5.0)
        seen.append(state.phase)
        assert state.phase == phase, event
    assert set(seen) == set(PHASES) - {"failed"}
    assert (state.ready, state.ready_evidence, state.load_seconds, state.kv_cache_tokens) == (True, "ready_line", 29.0,
                                                                                               46611)



def test_log_phases_are_typed_values_that_keep_their_words_for_json_and_read_well_on_screen() -> None:
    state = reduce(reduce(RunState(), ev.LoadStarted(21.6, line_no=1), 1.0), ev.ShardProgress(1, 2, line_no=2), 2.0)
    assert state.phase is LogPhase.LOADING_WEIGHTS and state.progress_phase is LogPhase.LOADING_WEIGHTS
    assert (summary(state)["phase"], json.dumps(summary(state)["phase"]), f"{state.phase}") == (
        "loading_weights", '"loading_weights"', "loading_weights")
    assert state.phase.label == "loading weights"
    assert [p.value for p in PHASES] == ["launching", "loading_weights", "allocating_kv", "capturing_graphs",
                                         "warming_up", "ready", "failed"]


def test_phase_never_goes_back_for_interleaved_ranks() -> None:
    state = run([ev.KVCache(tokens=10, line_no=1), ev.WeightsLoaded(1.0, None, line_no=2),
                 ev.ShardProgress(1, 2, line_no=3)])
    assert state.phase == "allocating_kv"


def test_vllm_startup_complete_is_ready_but_not_for_sglang() -> None:
    vllm = run([ev.ServerDetected("vllm"), ev.HttpUp(12.0)])
    assert (vllm.phase, vllm.ready, vllm.ready_evidence, vllm.load_seconds) == ("ready", True, "startup_complete", 12.0)
    sglang = run([ev.ServerDetected("sglang"), ev.HttpUp(12.0)])
    assert (sglang.phase, sglang.ready) == ("warming_up", False)


def test_serving_evidence() -> None:
    # SGLang: its warm-up requests are not evidence; a client's /v1 request or decode stats are.
    warm = run([ev.ServerDetected("sglang"), ev.HttpRequest("GET", "/get_model_info", 200),
                ev.HttpRequest("GET", "/health", 200)])
    assert warm.ready is False
    served = run([ev.ServerDetected("sglang"), ev.HttpRequest("POST", "/v1/chat/completions", 200)])
    assert (served.ready, served.ready_evidence, served.load_seconds) == (True, "serving", None)
    vllm = run([ev.ServerDetected("vllm"), ev.HttpRequest("GET", "/nope", 404)])
    assert vllm.ready is True
    stats = run([ev.DecodeStats(running_reqs=4, queue_reqs=1, token_usage=0.2, accept_len=2.5, gen_throughput=99.0)])
    assert (stats.ready, stats.running_reqs, stats.spec_accept_len, stats.gen_throughput) == (True, 4, 2.5, 99.0)


def test_load_seconds_from_the_callers_clock_when_it_knows_the_launch_time() -> None:
    state = RunState(started_at=100.0)
    state = reduce(state, ev.Ready(29.0), 160.5)
    assert (state.ready_at, state.load_seconds) == (160.5, 60.5)


def test_decode_stats_keep_the_last_values_and_fill_only_what_a_line_has() -> None:
    state = run([ev.DecodeStats(running_reqs=8, token_usage=0.1, accept_len=2.9, gen_throughput=171.0),
                 ev.DecodeStats(accept_len=2.58, accept_rate=0.5)])
    assert (state.running_reqs, state.token_usage, state.spec_accept_len, state.spec_accept_rate) == (8, 0.1, 2.58, 0.5)


def test_shards_keep_the_most_advanced_bar() -> None:
    state = run([ev.ShardProgress(161, 163), ev.ShardProgress(163, 163), ev.ShardProgress(163, 163),
                 ev.ShardProgress(0, 2), ev.ShardProgress(1, 2)])  # a drafter's small bar afterwards
    assert (state.shards_done, state.shards_total) == (163, 163)


def test_shard_rate_is_smoothed_from_tqdm_rates() -> None:
    state = run([ev.ShardProgress(1, 10, rate_per_s=2.0), ev.ShardProgress(2, 10, rate_per_s=1.0)])
    assert state.shard_rate == pytest.approx(SHARD_RATE_ALPHA * 1.0 + (1 - SHARD_RATE_ALPHA) * 2.0)


def test_shard_rate_from_arrival_times_when_the_bar_has_none() -> None:
    state = reduce(RunState(), ev.ShardProgress(1, 10), 100.0)
    state = reduce(state, ev.ShardProgress(3, 10), 104.0)
    assert state.shard_rate == pytest.approx(0.5)


def test_eta_from_shards_only() -> None:
    state = run([ev.ShardProgress(4, 10, rate_per_s=2.0)])
    assert eta_seconds(state, 0.0) == pytest.approx(3.0)


def test_eta_from_history_only_and_none_without_either() -> None:
    state = RunState(started_at=100.0)
    assert eta_seconds(state, 130.0) is None
    assert eta_seconds(state, 130.0, past_load_seconds=[100.0, 120.0, 90.0]) == pytest.approx(70.0)
    assert eta_seconds(state, 300.0, past_load_seconds=[100.0]) == 0.0  # overdue: history says "any moment"
    assert eta_seconds(RunState(), 0.0, past_load_seconds=[100.0]) is None  # no launch time: history can't help


def test_eta_blends_shards_and_history_by_load_progress() -> None:
    state = reduce(RunState(started_at=0.0), ev.ShardProgress(3, 4, rate_per_s=1.0), 10.0)
    shards, history, f = 1.0, 110.0, 0.75
    assert eta_seconds(state, 10.0, past_load_seconds=[120.0]) == pytest.approx(f * shards + (1 - f) * history)


def test_eta_after_weights_uses_history_and_is_zero_when_ready() -> None:
    state = run([ev.ShardProgress(4, 4, rate_per_s=1.0), ev.KVCache(tokens=5)], RunState(started_at=0.0))
    assert eta_seconds(state, 50.0) is None
    assert eta_seconds(state, 50.0, [80.0]) == pytest.approx(30.0)
    assert eta_seconds(reduce(state, ev.Ready(None), 60.0), 60.0, [80.0]) == 0.0
    failed = reduce(state, ev.LoggedError("oom", "CUDA out of memory"), 60.0)
    assert eta_seconds(failed, 60.0, [80.0]) is None


def test_failure_rules() -> None:
    header = ev.LoggedError("exception", "Scheduler hit an exception: Traceback", True, True, 3)
    exc = ev.LoggedError("model_not_found", "RuntimeError: Cannot find any model weights", True, False, 9)
    later = ev.LoggedError("exception", "RuntimeError: Engine core initialization failed.", True, False, 20)
    state = run([header])
    assert (state.phase, state.failure.line_no, state.failure.provisional) == ("failed", 3, True)
    state = run([header, exc, later])
    assert (state.failure.kind, state.failure.line_no, state.failure.provisional) == ("model_not_found", 9, False)
    # A plain traceback's exception line keeps the fatal mark of the header that opened it.
    plain = ev.LoggedError("exception", "ValueError: x", False, False, 5)
    assert run([header, plain]).failure.fatal is True
    # Once ready, only fatal failures count.
    ready = run([ev.Ready(None)])
    assert run([plain], ready).failure is None
    assert run([exc], ready).phase == "failed"


def test_reduce_is_pure() -> None:
    state = RunState(started_at=1.0)
    before = dataclasses.replace(state)
    reduce(state, ev.ShardProgress(1, 2, rate_per_s=1.0), 5.0)
    assert state == before


def test_logwatch_stamps_activity_and_keeps_a_tail() -> None:
    watch = LogWatch(started_at=10.0)
    watch.feed(b"line one\n\x1b[32mline two\x1b[0m\n", 11.0)
    assert watch.state.last_activity == 11.0
    assert watch.state.last_lines == ("line one", "line two")
    watch.feed(b"", 12.0)
    assert watch.state.last_activity == 11.0  # no bytes, no activity
    watch.feed(b"[2025-03-08 12:29:33] The server is fired up and ready to roll!\n", 40.0)
    assert (watch.state.ready, watch.state.load_seconds) == (True, 30.0)


def test_logwatch_freezes_last_lines_at_a_fatal_failure() -> None:
    watch = LogWatch()
    watch.feed(b"".join(f"noise {i}\n".encode() for i in range(30)), 1.0)
    watch.feed(b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", 2.0)
    watch.feed(b"shutting down\nbye\n", 3.0)
    lines = watch.state.last_lines
    assert len(lines) == 20
    assert lines[-1].startswith("torch.OutOfMemoryError") and lines[0] == "noise 11"


def test_last_lines_show_a_redrawn_bar_once_like_a_terminal() -> None:
    watch = LogWatch()
    watch.feed(b"before\n", 1.0)
    for n in range(1, 4):
        watch.feed(f"Loading safetensors checkpoint shards: {n}/3 [00:0{n}<00:00,  1.00it/s]\r".encode(), 1.0 + n)
        assert watch.state.last_lines == ("before", f"Loading safetensors checkpoint shards: {n}/3 [00:0{n}<00:00,  "
                                          "1.00it/s]")
    watch.feed(b"\nafter\n", 5.0)
    assert watch.state.last_lines == ("before", "Loading safetensors checkpoint shards: 3/3 [00:03<00:00,  1.00it/s]",
                                      "after")


def test_logwatch_reports_every_step_of_one_read() -> None:
    watch = LogWatch()
    steps: list[tuple[int | None, int | None]] = []
    bars = "".join(f"Loading safetensors checkpoint shards: {n * 33:3d}% Completed | {n}/3 [00:0{n}<00:00,  1.00it/s]\n"
                   for n in range(4))
    watch.feed(bars.encode(), 1.0, lambda before, after: steps.append((before.shards_done, after.shards_done)))
    assert steps == [(None, 0), (0, 1), (1, 2), (2, 3)]
    assert watch.state.shards_done == 3


def test_specmons_own_reads_are_not_the_servers_activity() -> None:
    """The serving view reads /metrics of every ready server each second (the health probe reads /health): the
    access lines that causes must not reset the card's 'log Ns ago' nor push the server's own lines out of the
    context kept for a failure, and must not change the state at all (each change repaints every card)."""
    watch = LogWatch(started_at=0.0)
    watch.feed(b"[2026-01-01 10:00:00] The server is fired up and ready to roll!\n", 1.0)
    before = watch.state
    own = (b'INFO:     127.0.0.1:50112 - "GET /metrics HTTP/1.1" 200 OK\n'
           b'INFO:     127.0.0.1:50114 - "GET /health HTTP/1.1" 200 OK\n')
    watch.feed(own, 5.0)
    assert watch.state == before and watch.state.last_activity == 1.0
    # A client's request is activity, and so is a batch that holds one beside the reads.
    watch.feed(own + b'INFO:     127.0.0.1:50200 - "POST /v1/completions HTTP/1.1" 200 OK\n', 9.0)
    assert watch.state.last_activity == 9.0 and "POST /v1/completions" in watch.state.last_lines[-1]


def test_settling_after_specmons_own_reads_changes_nothing() -> None:
    """A ready server's log pauses between the serving view's reads, and each pause is settled (the process
    check reads a tqdm bar waiting after its last `\r`): that must not bring the reads' access lines into the
    context kept for a failure either. Each such change is a new view of the run, and every card repaints."""
    watch = LogWatch(started_at=0.0)
    watch.feed(b"[2026-01-01 10:00:00] The server is fired up and ready to roll!\n", 1.0)
    before = watch.state
    watch.feed(b'INFO:     127.0.0.1:50112 - "GET /metrics HTTP/1.1" 200 OK\n', 5.0)
    assert watch.settle(6.0) == []
    assert watch.state == before and watch.state.last_lines[-1].endswith("ready to roll!")


def test_a_ready_servers_watch_reads_are_passed_over_unparsed_and_what_follows_reads_as_if_they_were_parsed() -> None:
    """Issue 37: a ready server's log grows by one access line a second (the serving view's /metrics read), and each
    was cleaned and matched against every signal. Once it is ready they are passed over, only counted: a real
    SGLang start, 200 reads in 50 feeds, then a real NCCL watchdog failure reads the same (its line number and kind)
    as when every line is parsed, and its context is the server's own lines, not the reads."""
    start = (FIXTURES / "real-logs" / "sglang-full-startup-tp4-ready-health-llms-in-clouds.log").read_bytes()
    crash = (FIXTURES / "real-logs" / "sglang-dsv3-shards-then-nccl-watchdog-3368.log").read_bytes().splitlines(True)[-3:]
    reads = [b"".join(b'[2026-01-01 10:00:%02d] INFO:     127.0.0.1:%d - "GET /metrics HTTP/1.1" 200 OK\n' % (s, 40000 + s)
                      for s in range(4)) for _ in range(50)]

    def fed(passing_over: bool) -> tuple[LogWatch, int]:
        watch, passed = LogWatch(started_at=0.0), 0
        pass_over = watch.parser.pass_over

        def counted(lines: int) -> bool:
            nonlocal passed
            done = passing_over and pass_over(lines)
            passed += lines if done else 0
            return done

        watch.parser.pass_over = counted   # type: ignore[method-assign]
        watch.feed(start, 1.0)
        assert watch.state.ready
        for i, data in enumerate(reads):
            watch.feed(data, 2.0 + i)
        for line in crash:
            watch.feed(line, 60.0)
        watch.close(61.0)
        return watch, passed

    parsed, none = fed(False)
    passed_over, passed = fed(True)
    assert (none, passed) == (0, 200)
    assert passed_over.parser.line_no == parsed.parser.line_no == start.count(b"\n") + 200 + len(crash) + 1
    failure = passed_over.state.failure
    assert failure is not None and failure.kind == "nccl" and "Watchdog caught collective" in failure.message
    assert failure == parsed.state.failure
    # The context kept for the failure is the server's own lines (parsed, the reads had pushed them out).
    context = passed_over.state.last_lines
    assert not any("GET /metrics" in line for line in context) and "ProcessGroupNCCL" in "".join(context)
    assert "max_total_num_tokens=" in "".join(context)
    assert sum("GET /metrics" in line for line in parsed.state.last_lines) > len(parsed.state.last_lines) // 2
