"""The serving view's parser on real /metrics captures (tests/fixtures/metrics, see SOURCES.md): each figure
equals the capture's, for SGLang and for vLLM's V0 and V1 names; families a server does not export are absent."""

from __future__ import annotations

import json
import time

import pytest
from paths import FIXTURES

from specmon.model.server import serving
from specmon.model.server.acceptance import MetricsSample, parse_metrics
from specmon.model.server.serving import (
    FAMILIES,
    PREEMPT_CLEAR_S,
    SPARK_FIGURES,
    SPARK_SLICES,
    ServingHistory,
    Thresholds,
    figure_texts,
    figures,
    read_sample,
    spark_slices,
    update_of,
)
from specmon.model.text.numbers import sparkline

CAPTURES = FIXTURES / "metrics"


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


def test_sglang_capture_under_load() -> None:
    f = figures(read_sample(capture("sglang-llama31-8b-production-metrics.prom"), 0.0))
    assert f.running == 162.0 and f.waiting == 2826.0
    assert f.kv_pct == pytest.approx(28.0)                       # sglang:token_usage 0.28
    assert f.tok_s == pytest.approx(86.50814177726902)          # sglang:gen_throughput on a single read
    assert f.prefix_hit_pct == pytest.approx(0.7507552643049313)  # sglang:cache_hit_rate 0.0075...
    # This SGLang exports no retraction counter and no speculative gauges: absent, not 0.
    assert f.preemptions is None and f.preempt_per_s is None
    assert f.accept_len is None and f.accept_rate is None


def test_vllm_v0_capture_old_names() -> None:
    f = figures(read_sample(capture("vllm-v0-aibrix-qwen25-coder.prom"), 0.0))
    assert (f.running, f.waiting) == (0.0, 0.0)
    assert f.kv_pct == 0.0                       # vllm:gpu_cache_usage_perc
    assert f.preemptions == 0.0                  # vllm:num_preemptions_total
    assert f.prefix_hit_pct is None              # gpu_prefix_cache_hit_rate -1.0: prefix caching off
    assert f.tok_s is None                       # no throughput gauge in 0.7, and a rate needs two reads
    assert f.accept_len is None


def test_vllm_v1_capture_new_names() -> None:
    f = figures(read_sample(capture("vllm-v1-kserve-llama-idle.prom"), 0.0))
    assert (f.running, f.waiting, f.kv_pct, f.preemptions) == (0.0, 0.0, 0.0, 0.0)   # vllm:kv_cache_usage_perc
    assert f.prefix_hit_pct is None              # 0 hits of 0 queries is no hit rate
    assert f.accept_len is None


def test_vllm_v1_spec_capture_acceptance() -> None:
    f = figures(read_sample(capture("vllm-v1-spec-dgx-spark.prom"), 0.0))
    assert f.accept_len == pytest.approx(1 + 7.268642e06 / 2.04363e06)
    assert f.accept_rate == pytest.approx(7.268642e06 / 1.0218118e07)
    # the trimmed capture holds no scheduler families: absent
    assert f.running is None and f.waiting is None and f.kv_pct is None


def test_only_the_needed_families_are_parsed() -> None:
    text = capture("sglang-llama31-8b-production-metrics.prom")
    everything = parse_metrics(text)
    kept = read_sample(text, 0.0).values
    assert set(kept) <= FAMILIES
    assert "sglang:time_per_output_token_seconds_bucket" in everything
    assert not any("bucket" in name for name in kept)


def test_parsing_a_large_capture_is_cheap() -> None:
    # A real vLLM answer is tens of kB, mostly histogram buckets: all four captures, repeated 20 times (~0.4 MB).
    text = "".join(capture(p.name) for p in sorted(CAPTURES.glob("*.prom"))) * 20
    t0 = time.process_time()
    for _ in range(10):
        read_sample(text, 0.0)
    per_read = (time.process_time() - t0) / 10
    assert per_read < 0.05, f"{per_read * 1000:.1f} ms per read of {len(text)} bytes"


def sample(at: float, **values: float) -> MetricsSample:
    return MetricsSample(at, {k: [v] for k, v in values.items()})


def test_rates_come_from_counters_between_two_reads() -> None:
    a = sample(10.0, **{"vllm:generation_tokens": 1000.0, "vllm:num_preemptions": 2.0,
                        "vllm:prefix_cache_queries": 100.0, "vllm:prefix_cache_hits": 50.0})
    b = sample(12.0, **{"vllm:generation_tokens": 1600.0, "vllm:num_preemptions": 6.0,
                        "vllm:prefix_cache_queries": 200.0, "vllm:prefix_cache_hits": 140.0})
    f = figures(b, a)
    assert f.tok_s == pytest.approx(300.0) and f.preempt_per_s == pytest.approx(2.0)
    assert f.prefix_hit_pct == pytest.approx(90.0)
    restarted = sample(13.0, **{"vllm:generation_tokens": 5.0})
    assert figures(restarted, b).tok_s is None   # a counter that went back: a restarted server, no rate


def test_history_alerts() -> None:
    h = ServingHistory(Thresholds(waiting_s=5.0, kv_pct=90.0))
    h.add(sample(0.0, **{"sglang:num_queue_reqs": 3.0, "sglang:token_usage": 0.5}))
    assert h.alerts(1.0) == []
    h.add(sample(6.0, **{"sglang:num_queue_reqs": 4.0, "sglang:token_usage": 0.97}))
    assert h.alerts(6.0) == ["4 waiting for 6s", "KV 97% (≥ 90%)"]
    h.add(sample(7.0, **{"sglang:num_queue_reqs": 0.0, "sglang:token_usage": 0.5}))
    assert h.alerts(7.0) == []
    h.failed(8.0, "connection refused")
    assert h.alerts(8.0) == ["/metrics stopped answering (connection refused)"]
    h.end()   # the server is ending or gone: its silence is no news
    assert h.alerts(8.0) == []
    assert h.series("waiting") == [3.0, 4.0, 0.0]


def test_sparkline() -> None:
    """The card's call: scaled to the values' own peak (or a given top), padded to the width."""
    assert sparkline([0.0, 1.0, 2.0, 4.0], 4) == "▁▃▅█"
    assert sparkline([], 3) == "   " and sparkline([0.0, 0.0], 3) == " ▁▁"
    assert sparkline([50.0], 2, 100.0) == " ▅" and sparkline([1.0, 2.0, 3.0], 2) == "▆█"   # the last `width`


def test_sparkline_slices_span_the_last_two_minutes() -> None:
    h = ServingHistory(span_s=120.0)
    for t in range(0, 121):   # a queue of 5 for one second at t=30, otherwise empty
        h.add(sample(float(t), **{"vllm:num_requests_waiting": 5.0 if t == 30 else 0.0}))
    assert h.slices("waiting") == (0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0)   # the 15 s slice holding t=30
    young = ServingHistory(span_s=120.0)
    young.add(sample(0.0, **{"vllm:num_requests_waiting": 1.0}))
    assert young.slices("waiting") == (1.0,)
    assert young.slices("kv_pct") == ()                                         # absent: no line


def test_card_figure_lines_are_the_captures_figures_in_plain_text() -> None:
    from specmon.model.server.serving import SPARK_SLICES, ServingUpdate, card_figure_lines

    capture = (CAPTURES / "sglang-llama31-8b-production-metrics.prom").read_text()
    history = {"running": (1.0, 8.0), "waiting": (), "kv_pct": (50.0,), "tok_s": (0.0, 0.0)}
    update = ServingUpdate("p", "r", figures(read_sample(capture, 0.0)), history)
    plain = ["".join(text for text, _ in line) for line in card_figure_lines(update, sparks=False)]
    assert plain[0] == "run 162 wait 2826 KV 28% 87 tok/s"
    assert plain[1] == "hit 1% preempt —"   # its server's gauge (one read); no retraction counter
    sparks = [text for line in card_figure_lines(update) for text, spark in line if spark]
    # Each sparkline padded to its full width; KV scaled to 100 %, the others to their own peak.
    assert sparks == ["▂█".rjust(SPARK_SLICES), " " * SPARK_SLICES, "▅".rjust(SPARK_SLICES), "▁▁".rjust(SPARK_SLICES)]


# What a broken or hostile server answered (issue 35, item 23): each line is a value no server can have, or a
# series given twice.
HOSTILE = """\
vllm:num_requests_running{engine="0"} 1e308
vllm:num_requests_running{engine="1"} 1e308
vllm:num_requests_waiting{engine="0"} -3
vllm:kv_cache_usage_perc{engine="0"} 1e308
vllm:num_preemptions_total{engine="0"} 2
vllm:num_preemptions_total{engine="0"} 2
vllm:spec_decode_num_drafts_total{engine="0"} 1e-300
vllm:spec_decode_num_accepted_tokens_total{engine="0"} 1e15
vllm:spec_decode_num_draft_tokens_total{engine="0"} 3
"""


def test_impossible_values_are_left_out_and_named() -> None:
    """Two series of 1e308 overflowed the sum (a traceback), KV 1e308 read `KV inf%` and wrote `Infinity` into
    JSON, a negative queue was shown as is, and a series given twice was counted twice."""
    history = ServingHistory()
    history.add(read_sample(HOSTILE, 0.0))
    update = update_of("p", "r", history, 0.0)
    f = update.figures
    assert f is not None
    assert (f.running, f.waiting, f.kv_pct) == (None, None, None)
    assert f.preemptions == 2.0                                  # once, not 4
    assert f.accept_len is None                                  # 1e15 / 1e-300 is no figure
    assert json.loads(json.dumps(update.to_dict(), allow_nan=False))["kv_pct"] is None
    assert dict(figure_texts(f))["KV"] == "—"
    assert update.ignored == ('vllm:num_requests_running 1e+308', 'vllm:num_requests_running 1e+308',
                              'vllm:num_requests_waiting -3', 'vllm:kv_cache_usage_perc 1e+308')
    assert update.ignored_text() == ("ignored impossible values: vllm:num_requests_running 1e+308, "
                                     "vllm:num_requests_running 1e+308, vllm:num_requests_waiting -3 (+1 more)")
    assert all(sparkline(v, SPARK_SLICES, 100.0) for v in update.history.values())


def test_the_real_captures_lose_nothing_to_the_bounds() -> None:
    for path in sorted(CAPTURES.glob("*.prom")):
        assert read_sample(path.read_text(), 0.0).refused == (), path.name


def test_sparkline_of_values_past_any_scale() -> None:
    """The card's sparkline took int() of inf: the TUI ended with an OverflowError."""
    inf, nan = float("inf"), float("nan")
    assert sparkline([inf, 50.0, nan], 4, 100.0) == " █▅▁"
    assert sparkline([1e308, 1e-308], 3) == " █▁"


def test_an_alert_is_said_once_until_it_clears() -> None:
    """A server at its limit: KV use between 93 % and 97 % and a preemption every few reads, for 20 s. The alerts
    appeared 8 (KV) and 6 (preemptions) times; now each once, and each clears: KV below 90 %, preemptions after
    PREEMPT_CLEAR_S without one."""
    h = ServingHistory(Thresholds(kv_pct=95.0))
    raised: list[str] = []
    shown: set[str] = set()
    preempted = 0.0
    for t in range(21):
        preempted += 1.0 if t % 3 == 0 else 0.0
        h.add(sample(float(t), **{"vllm:kv_cache_usage_perc": 0.97 if t % 2 else 0.93,
                                  "vllm:num_preemptions": preempted}))
        kinds = {a.split()[0] for a in h.alerts(float(t))}
        raised += sorted(kinds - shown)
        shown = kinds
    assert raised == ["KV", "preemptions"]
    assert h.alerts(20.0)[0] == "KV 93% (was ≥ 95%)"
    h.add(sample(21.0, **{"vllm:kv_cache_usage_perc": 0.89, "vllm:num_preemptions": preempted}))
    assert [a.split()[0] for a in h.alerts(21.0)] == ["preemptions"]
    h.add(sample(18.0 + PREEMPT_CLEAR_S, **{"vllm:kv_cache_usage_perc": 0.5, "vllm:num_preemptions": preempted}))
    assert h.alerts(18.0 + PREEMPT_CLEAR_S) == []


def _read(at: float, running: float, waiting: float = 0.0) -> MetricsSample:
    """A read of an SGLang server (no throughput gauge: that sparkline stays empty)."""
    return MetricsSample(at, {"sglang:num_running_reqs": [running], "sglang:num_queue_reqs": [waiting],
                              "sglang:token_usage": [0.25]})


def test_an_idle_servers_reads_tell_its_card_unchanged_without_working_out_its_sparklines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: the serving view tells each read's update from the last one's by what the card shows, sparklines
    included; for an idle server (every read the same figures) only they were left to compare, so every read of
    every idle run worked out four sparklines from two minutes of reads (170 us on the bench box: 11 ms a second at
    64 idle runs). Where every read of the span held the same figures, they are known from its first and last read."""
    worked = 0

    def counted(*args: object, **kwargs: object) -> dict[str, tuple[float, ...]]:
        nonlocal worked
        worked += 1
        return spark_slices(*args, **kwargs)   # type: ignore[arg-type]

    monkeypatch.setattr(serving, "spark_slices", counted)
    history = ServingHistory()
    last = None
    changed = 0
    for second in range(300):
        history.add(_read(float(second), 0.0))
        update = update_of("p", "r", history, float(second))
        if last is not None:   # as the serving view compares them (its card grows until two minutes are read)
            changed += update.figures != last.figures or dict(update.history) != dict(last.history)
        last = update
    assert worked == 0, f"sparklines worked out {worked} times to compare 300 reads of an idle server"
    assert changed == SPARK_SLICES - 1   # each new slice of its first two minutes: the line grows


@pytest.mark.parametrize("reads", [
    [(t, 0.0) for t in range(300)],                                      # idle from the start
    [(t, 5.0 if t == 10 else 0.0) for t in range(300)],                  # one busy read, then idle: it scrolls out
    [(t, 1.0) for t in range(100)] + [(t, 1.0) for t in range(140, 300)],   # 40 s without an answer, same figures
    [(t * 0.7, 2.0) for t in range(400)] + [(280 + t * 1.3, 0.0) for t in range(150)],   # irregular reads
    [(t, float(t % 3 == 0)) for t in range(200)],                        # busy: nothing is flat
])
def test_sparklines_known_at_once_are_the_ones_worked_out(reads: list[tuple[float, float]]) -> None:
    """The sparklines an idle span gives at once are exactly those worked out from every read, at every read."""
    history = ServingHistory()
    for at, running in reads:
        history.add(_read(float(at), running))
        assert dict(history.card_sparks()) == spark_slices(tuple(history.points), history.span_s, SPARK_FIGURES), at
