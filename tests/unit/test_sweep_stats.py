"""Per-level statistics from request records: the definitions users compare against vLLM/SGLang numbers."""

from __future__ import annotations

import json

import pytest

from specmon.model.sweeps.sweepstats import (
    LevelAccumulator,
    LogHistogram,
    RequestRecord,
    SweepProgress,
    level_from_records,
    percentile,
    stats_of,
)


def rec(i: int, *, start: float = 0.0, end: float = 1.0, ttft: float = 100.0, e2e: float = 1000.0,
        tokens: int | None = 10, chunks: int = 10, itl: tuple[int, ...] = (), ok: bool = True,
        error: str | None = None, prompt: int | None = 5) -> RequestRecord:
    return RequestRecord(concurrency=4, index=i, start_s=start, end_s=end, ok=ok, error=error,
                         ttft_ms=ttft if ok else None, e2e_ms=e2e if ok else None, chunks=chunks,
                         output_tokens=tokens if ok else None, prompt_tokens=prompt if ok else None, itl_us=itl)


def test_percentile_is_linear_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([10.0], 99) == 10.0
    assert percentile([], 50) is None
    assert percentile(list(range(101)), 90) == 90
    s = stats_of([3.0, 1.0, 2.0])
    assert (s.mean, s.p50) == (2.0, 2.0)


def test_tokens_come_from_usage_not_chunks_under_speculation() -> None:
    # 3 tokens per chunk, as EAGLE-3 bundles them: throughput must count 90 tokens, not 30 chunks.
    records = [rec(i, tokens=30, chunks=10, ttft=100.0, e2e=1000.0, itl=(100_000,) * 9) for i in range(3)]
    lv = level_from_records(records)
    assert lv.output_tokens == 90
    assert lv.tokens_per_chunk == pytest.approx(3.0)
    assert lv.output_throughput == pytest.approx(90 / 1.0)
    # TPOT amortises bundled tokens, ITL is the chunk gap.
    assert lv.tpot_ms.p50 == pytest.approx(900 / 29)
    assert lv.itl_ms.p50 == pytest.approx(100.0, rel=0.006)
    assert lv.decode_tok_s.mean == pytest.approx(29 / 0.9)
    assert lv.usage_missing == 0


def test_missing_usage_falls_back_to_chunks_and_is_counted() -> None:
    lv = level_from_records([rec(0, tokens=None, chunks=7), rec(1, tokens=14, chunks=7)])
    assert lv.output_tokens == 21
    assert lv.usage_missing == 1
    assert lv.tokens_per_chunk == 2.0  # only from the request that had usage


def test_errors_by_kind_do_not_count_as_output() -> None:
    records = [rec(0), rec(1, ok=False, error="http_5xx", chunks=0),
               rec(2, ok=False, error="truncated", chunks=3), rec(3, ok=False, error="http_5xx", chunks=0)]
    lv = level_from_records(records)
    assert (lv.requests_ok, lv.requests_failed) == (1, 3)
    assert lv.errors == {"http_5xx": 2, "truncated": 1}
    assert lv.output_tokens == 10
    assert lv.client.chunks == 13


def test_duration_throughput_and_achieved_concurrency() -> None:
    # Two requests of 2 s each, overlapping fully, inside a 2 s level: concurrency 2.
    records = [rec(0, start=1.0, end=3.0), rec(1, start=1.0, end=3.0)]
    lv = level_from_records(records)
    assert lv.duration_s == 2.0
    assert lv.request_throughput == 1.0
    assert lv.achieved_concurrency == pytest.approx(2.0)
    assert lv.total_throughput == pytest.approx((20 + 10) / 2.0)


def test_warmup_records_are_excluded() -> None:
    acc = LevelAccumulator(4)
    acc.add(RequestRecord(4, 0, 0.0, 1.0, True, ttft_ms=5.0, e2e_ms=9.0, chunks=2, output_tokens=2, warmup=True))
    assert acc.requests_ok == 0 and acc.first_start_s is None


def test_client_bound_verdict() -> None:
    acc = LevelAccumulator(1)
    acc.add(rec(0))
    assert not acc.result(10.0, cpu_s=1.0, loop_lag_ms_p99=1.0).client.bound
    assert acc.result(10.0, cpu_s=9.5, loop_lag_ms_p99=1.0).client.bound
    assert acc.result(10.0, cpu_s=1.0, loop_lag_ms_p99=50.0).client.bound


def test_chunks_that_waited_for_the_generator_flag_the_level_with_the_figure() -> None:
    """Skew measured, not guessed: a level whose chunks waited 4 ms (p99) after arriving for their stream's code, at
    a 20 ms ITL, is flagged SKEW in the CLI and TUI tables with the figure and the burst size in its warning, and is
    not counted as client-bound (its chunks were stamped on arrival); 1.5 ms at the same ITL is not material."""
    from specmon.commands.sweep import render_levels
    from specmon.model.charts.levelrow import LevelRow
    from specmon.model.sweeps.results import LevelResult, client_flag
    from specmon.orchestration.measure.sweep import level_warnings

    acc = LevelAccumulator(256)
    acc.add(rec(0, itl=(20_000,) * 9))
    calm = acc.result(10.0, cpu_s=1.0, loop_lag_ms_p99=1.0, handling_ms_p99=1.5, burst_max=256)
    assert not calm.client.skewed and not calm.client.bound and not level_warnings(calm)
    level = LevelResult.from_dict(acc.result(10.0, cpu_s=1.0, loop_lag_ms_p99=1.0, handling_ms_p99=4.0,
                                             burst_max=256).to_dict())
    assert level.client.skewed and not level.client.bound and level.client.burst_max == 256
    assert level_warnings(level) == [
        "C=256: chunks waited up to 4.0 ms (p99) for the load generator after arriving, in bursts of up to 256 reads, "
        "against an ITL p50 of 20.1 ms; chunk times at this level may carry that skew; more load generator "
        "processes spread that work (--processes, [sweep] processes; this level had 1)"]
    table = render_levels([level])
    assert table.splitlines()[1].split()[-2:] == ["SKEW", "4.0ms"] and "client SKEW = chunks waited" in table
    assert LevelRow.of_level(level).cells("s")[-1] == "SKEW 4.0ms"
    # The flag fits the TUI table's client column (the README screenshot cut "SKEW 15.51ms" to "SKEW 15.51m").
    assert [client_flag(False, True, ms) for ms in (9.94, 15.51, 143.2)] == ["SKEW 9.9ms", "SKEW 16ms", "SKEW 143ms"]
    bound = LevelResult.from_dict(acc.result(10.0, cpu_s=9.5, loop_lag_ms_p99=1.0, handling_ms_p99=4.0,
                                             burst_max=256).to_dict())
    assert render_levels([bound]).splitlines()[1].split()[-1] == "BOUND" and LevelRow.of_level(bound).client == "BOUND"


def test_a_level_whose_requests_all_failed_instantly_is_not_called_client_bound() -> None:
    """Four refused requests in 3 ms with 2.9 ms of client CPU looked like a CPU-bound generator; with nothing
    measured there is nothing for the client to have distorted, so no "bottleneck" warning."""
    acc = LevelAccumulator(4)
    for i in range(4):
        acc.add(rec(i, start=0.0, end=0.003, ok=False, error="refused", chunks=0))
    level = acc.result(0.003, cpu_s=0.0029, loop_lag_ms_p99=0.1)
    assert level.requests_ok == 0 and not level.client.bound


def test_log_histogram_quantiles_within_half_percent() -> None:
    h = LogHistogram()
    values = [0.0] * 10 + [float(v) for v in range(1, 1001)]
    for v in values:
        h.add(v)
    exact = sorted(values)
    for q in (50, 90, 99):
        assert h.quantile(q) == pytest.approx(percentile(exact, q), rel=0.01)
    assert h.quantile(0) == 0.0
    assert h.stats().mean == pytest.approx(sum(values) / len(values))


def test_record_and_progress_round_trip() -> None:
    r = rec(3, itl=(1, 2, 3))
    assert RequestRecord.from_dict(r.to_dict()) == r
    p = SweepProgress(5, 1, 3, "level", 1.5, 10, 1, 40, None, 5, 123.4, 50.0, 2.5, 0.2, 0.3)
    assert SweepProgress.from_dict(p.to_dict()) == p


def test_acceptance_per_category_is_tokens_per_chunk_over_that_categorys_requests() -> None:
    from dataclasses import replace

    from specmon.model.sweeps.results import LevelResult

    records = [replace(rec(i, tokens=120, chunks=40), category="code") for i in range(3)]      # 3.0
    records += [replace(rec(i + 3, tokens=120, chunks=80), category="chat") for i in range(2)]  # 1.5
    records.append(replace(rec(5, ok=False, error="timeout"), category="chat"))                # failed: not counted
    records.append(replace(rec(6, tokens=None, chunks=9), category="chat"))                    # no usage: not counted
    records.append(rec(7, tokens=50, chunks=50))                                              # no category
    lv = level_from_records(records)
    assert {k: (c.requests, c.tokens_per_chunk) for k, c in lv.categories.items()} == {"code": (3, 3.0), "chat": (2, 1.5)}
    back = LevelResult.from_dict(lv.to_dict())
    assert back.categories == lv.categories
    assert lv.to_dict()["categories"]["code"] == {"requests": 3, "output_tokens": 360, "chunks": 120, "tokens_per_chunk": 3.0}
    # Old level lines (no "categories") read back with none; a record's category survives its JSON line.
    old = {k: v for k, v in lv.to_dict().items() if k != "categories"}
    assert LevelResult.from_dict(old).categories == {}
    assert RequestRecord.from_dict(records[0].to_dict()).category == "code"
    assert "category" not in rec(0).to_dict()


def test_category_tables_in_sweep_compare_and_report() -> None:
    from specmon.commands._table import category_table
    from specmon.model.experiments.report import summary_to_dict, summary_to_markdown
    from specmon.model.experiments.verdict import ProfileRuns, summarize
    from specmon.model.sweeps.results import CategoryStats, ClientHealth, LevelResult, Stats, SweepMeta, SweepResult

    def level(c: int, code: tuple[int, int]) -> LevelResult:
        return LevelResult(concurrency=c, requests_ok=2, requests_failed=0, duration_s=1.0, output_tokens=200,
                           output_throughput=200.0, request_throughput=2.0, ttft_ms=Stats(), tpot_ms=Stats(),
                           itl_ms=Stats(), e2e_ms=Stats(), tokens_per_chunk=2.0, client=ClientHealth(),
                           categories={"code": CategoryStats(1, *code), "chat": CategoryStats(1, 100, 100)})

    text = category_table([("", [level(1, (100, 25)), level(4, (100, 50))])])
    assert text is not None
    lines = text.splitlines()
    assert lines[0].startswith("acceptance by prompt category") and lines[1].split() == ["C", "chat", "code"]
    assert lines[2].split() == ["1", "1.00", "4.00"] and lines[3].split() == ["4", "1.00", "2.00"]
    assert category_table([("a", [level(1, (1, 1))]), ("b", [level(1, (1, 1))])]).splitlines()[1].split()[:2] == ["sweep", "C"]
    assert category_table([("", [])]) is None
    # An experiment pools each category over the repeats: (100 + 300) tokens / (25 + 75) chunks = 4.0.
    meta = SweepMeta(url="http://x", model="m", workload={}, profile="eagle")
    repeats = [(1, SweepResult(None, meta, (level(1, (100, 25)),))), (2, SweepResult(None, meta, (level(1, (300, 75)),)))]
    summary = summarize([ProfileRuns("eagle", repeats)], repeats=2)
    assert summary.profiles[0].levels[0].categories["code"].tokens_per_chunk == 4.0
    assert summary_to_dict(summary)["profiles"][0]["levels"][0]["categories"]["code"]["tokens_per_chunk"] == 4.0
    md = summary_to_markdown(summary)
    assert "## Acceptance by prompt category" in md and "| eagle | 1 | 1.00 | 4.00 |" in md


def test_log_histogram_add_all_counts_as_adding_one_by_one() -> None:
    one, batch = LogHistogram(), LogHistogram()
    gaps = (10001, 9998, 0, 1, 250_000, 7, 10001)   # us; 0 falls below the floor (1 us) and counts as a zero
    for gap in gaps:
        one.add(gap / 1000.0)
    batch.add_all(gaps, 1000.0)
    batch.add_all((), 1000.0)
    assert (batch.count, batch.total, batch.stats()) == (one.count, one.total, one.stats())
    assert batch.quantile(10) == 0.0 and batch.quantile(100) == one.quantile(100)


def test_a_level_sent_by_three_processes_merges_into_the_figures_of_one() -> None:
    # A sharded sweep's parts each fold their share of a level and the coordinator merges the three, here through
    # the pieces and the JSON a part sends them as: the level's figures are those of one accumulator given every
    # record (times on a binary-exact grid, so every sum is exact and equality is exact).
    slo = {"ttft": 130.0}
    recs = [RequestRecord(concurrency=4, index=i, start_s=i * 0.25, end_s=i * 0.25 + 1.5 + (i % 5) * 0.125,
                          ok=i % 7 != 3, error=None if i % 7 != 3 else "http", detail=None if i % 7 != 3 else "502",
                          ttft_ms=100.0 + i % 40 if i % 7 != 3 else None, e2e_ms=900.0 + 4 * i if i % 7 != 3 else None,
                          chunks=5 + i % 3, output_tokens=None if i % 11 == 0 else 10 + i % 4, prompt_tokens=16,
                          itl_us=tuple(20_000 + 1000 * (i % 9) + k for k in range(0, 4000, 1000)), rate=8.0,
                          late_ms=(i % 6) * 0.5, category="math" if i % 2 else "code")
            for i in range(60)]
    whole = LevelAccumulator(4, rate=8.0, slo=slo)
    shares = [LevelAccumulator(4, rate=8.0, slo=slo) for _ in range(3)]
    for r in recs:
        whole.add(r)
        shares[r.index % 3].add(r)
    merged = LevelAccumulator(4, rate=8.0, slo=slo)
    for share in shares:
        pieces = share.pieces(7)
        assert len(pieces) == 3   # 20 requests a share, 7 values a series a piece
        for piece in pieces:
            merged.merge(LevelAccumulator.from_dict(json.loads(json.dumps(piece.to_dict())), slo))
    one = whole.result(16.0, 1.0, 2.0)
    assert merged.result(16.0, 1.0, 2.0) == one
    assert one.requests_failed == 9 and one.usage_missing > 0 and one.goodput and one.backlog_max is not None
    assert set(one.categories) == {"math", "code"}


def test_a_log_histogram_merged_counts_as_one_given_every_value() -> None:
    values = [0.0005, 0.5, 3.0, 3.01, 250.0, 9000.0]
    a, b, both = LogHistogram(), LogHistogram(), LogHistogram()
    for k, v in enumerate(values):
        (a if k % 2 else b).add(v)
        both.add(v)
    a.merge(LogHistogram.from_dict(json.loads(json.dumps(b.to_dict()))))
    assert (a.count, a.total, a.stats()) == (both.count, both.total, both.stats())
    assert [a.quantile(q) for q in range(0, 101, 10)] == [both.quantile(q) for q in range(0, 101, 10)]
