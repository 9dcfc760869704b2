"""One SKEW/BOUND rule (results.client_flag), shown with its figure everywhere a level is shown: the CLI sweep table,
`compare` (table and --json), `report` (Markdown, JSON, CSV) and an experiment's verdict. The TUI table is in
test_levelrow.py."""

from __future__ import annotations

from specmon.commands.compare import comparison_json, render_table
from specmon.commands.sweep import render_levels
from specmon.model.experiments.report import summary_to_csv, summary_to_dict, summary_to_markdown
from specmon.model.experiments.verdict import ProfileRuns, summarize
from specmon.model.sweeps.compare import align
from specmon.model.sweeps.results import ClientHealth, LevelResult, Stats, SweepMeta, SweepResult


def level(c: int, tok_s: float, skew_ms: float | None = None, bound: bool = False) -> LevelResult:
    """A level whose chunks waited `skew_ms` (p99) for the load generator: flagged SKEW when given."""
    client = ClientHealth(cpu_s=1.0, chunks=400, loop_lag_ms_p99=0.5, bound=bound, handling_ms_p99=skew_ms or 0.2,
                          burst_max=c, skewed=skew_ms is not None)
    return LevelResult(concurrency=c, requests_ok=10, requests_failed=0, duration_s=2.0, output_tokens=int(tok_s * 2),
                       output_throughput=tok_s, request_throughput=5.0, ttft_ms=Stats(p50=20.0), tpot_ms=Stats(p50=9.0),
                       itl_ms=Stats(p50=20.0, p99=30.0), e2e_ms=Stats(), tokens_per_chunk=1.0, client=client)


def sweep(profile: str, levels: list[LevelResult]) -> SweepResult:
    meta = SweepMeta(url="http://127.0.0.1:1", model="m", profile=profile, workload={"output_len": 64},
                     server={"kv_cache_tokens": 400_000, "mem_fraction": 0.88,
                             "speculative": {"algorithm": "EAGLE3"} if profile == "eagle" else None})
    return SweepResult(None, meta, tuple(levels))


BASE = [level(1, 90.0), level(2, 170.0), level(4, 300.0), level(8, 470.0)]


def eagle(skew_at: int | None, ms: float = 4.0) -> list[LevelResult]:
    return [level(c, v, ms if c == skew_at else None) for c, v in ((1, 150.0), (2, 230.0), (4, 280.0), (8, 300.0))]


def test_the_cli_sweep_table_gives_skew_with_its_figure_and_bound_wins() -> None:
    table = render_levels([level(16, 500.0, 4.0), level(32, 600.0, 4.0, bound=True), level(64, 650.0)])
    rows = [line.split() for line in table.splitlines()[1:4]]
    assert rows[0][-2:] == ["SKEW", "4.0ms"] and rows[1][-1] == "BOUND" and rows[2][-1] == "ok"
    assert "client SKEW = chunks waited that long (p99)" in table


def test_compare_marks_skewed_levels_with_their_figures_in_the_table_and_the_json() -> None:
    sweeps = [sweep("base", BASE), sweep("eagle", eagle(skew_at=4))]
    rows = align(*(s.levels for s in sweeps))
    table = render_table(sweeps, rows)
    assert "280.0~" in table and "300.0~" not in table
    assert "~ client SKEW: chunks waited that long (p99) for the load generator" in table and "eagle C=4 SKEW 4.0ms" in table
    data = comparison_json(sweeps, rows, [])
    at4 = next(lv for lv in data["levels"] if lv["concurrency"] == 4)
    assert at4["client"] == [None, "SKEW 4.0ms"] and at4["handling_ms_p99"] == [0.2, 4.0]
    bound = [sweep("base", [level(1, 90.0, 4.0, bound=True)])]
    assert comparison_json(bound, align(bound[0].levels), [])["levels"][0]["client"] == ["BOUND"]


def test_the_report_flags_a_skewed_level_with_its_longest_wait_over_the_repeats() -> None:
    runs = [ProfileRuns("base", [(1, sweep("base", BASE))]),
            ProfileRuns("eagle", [(1, sweep("eagle", eagle(skew_at=8, ms=4.0))),
                                  (2, sweep("eagle", eagle(skew_at=8, ms=6.5)))])]
    summary = summarize(runs)
    markdown = summary_to_markdown(summary)
    assert "(n=2) (SKEW 6.5ms)" in markdown and markdown.count("(SKEW") == 1
    assert "SKEW: at that level chunks waited that long (p99, the longest over the repeats)" in markdown
    at8 = summary_to_dict(summary)["profiles"][1]["levels"][3]
    assert (at8["concurrency"], at8["skewed"], at8["handling_ms_p99"]) == (8, 2, 6.5)
    header, *lines = summary_to_csv(summary).splitlines()
    assert header.endswith(",skewed,handling_ms_p99") and lines[-1].endswith(",2,6.5")


def test_a_verdict_resting_on_a_skewed_level_says_so_and_one_resting_elsewhere_does_not() -> None:
    # The crossover lies between C=2 and C=4 (eagle leads below): it rests on those two levels.
    plain = summarize([ProfileRuns("base", [(1, sweep("base", BASE))]),
                       ProfileRuns("eagle", [(1, sweep("eagle", eagle(skew_at=None)))])]).verdict
    resting = summarize([ProfileRuns("base", [(1, sweep("base", BASE))]),
                         ProfileRuns("eagle", [(1, sweep("eagle", eagle(skew_at=4)))])]).verdict
    elsewhere = summarize([ProfileRuns("base", [(1, sweep("base", BASE))]),
                           ProfileRuns("eagle", [(1, sweep("eagle", eagle(skew_at=8)))])]).verdict
    assert plain.startswith("eagle is faster up to C≈") and elsewhere == plain
    assert resting == plain + (" (resting on levels flagged eagle C=4 SKEW 4.0ms: chunks waited that long for the "
                               "load generator, so their times may carry it)")
    # One profile ahead throughout rests on every shared level.
    ahead = summarize([ProfileRuns("base", [(1, sweep("base", BASE))]),
                       ProfileRuns("eagle", [(1, sweep("eagle", [level(c, 2 * lv.output_throughput, 3.0 if c == 8 else None)
                                                                 for c, lv in zip((1, 2, 4, 8), BASE)]))])]).verdict
    assert ahead.startswith("eagle is faster than base at every measured level") and "eagle C=8 SKEW 3.0ms" in ahead
