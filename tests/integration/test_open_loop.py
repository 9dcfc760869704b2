"""Open-loop request-rate mode and goodput, without a server: the arrival schedule (and the KS check that judges
it), SLO parsing, the per-level schedule/capacity/goodput figures, result-file round trips and the CLI's errors."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from process_support import run_specmon

from specmon.errors import UserError
from specmon.loadgen.workload import Workload
from specmon.model.config import SweepDefaults, parse_rates
from specmon.model.sweeps.results import LevelResult, SweepMeta
from specmon.model.sweeps.sweepstats import LATE_BOUND_MS, LevelAccumulator, RequestRecord, level_from_records
from specmon.model.workload.arrivals import arrival_times, connections_needed, ks_critical, ks_exponential
from specmon.model.workload.goodput import meets_slo, parse_slo
from specmon.orchestration.measure.sweep import WorkloadOverrides, level_warnings, workload_from


def gaps_of(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *times], times)]


# ---- the schedule ------------------------------------------------------------------------------------------------

def test_schedule_offers_exactly_the_rate_and_is_repeatable_by_seed() -> None:
    times = arrival_times(3000, 50.0, seed=7)
    assert len(times) == 3000 and times[-1] == 3000 / 50.0
    assert all(b > a for a, b in zip(times, times[1:]))
    assert arrival_times(3000, 50.0, seed=7) == times
    assert arrival_times(3000, 50.0, seed=8) != times


def test_poisson_gaps_pass_ks_and_other_shapes_fail_it() -> None:
    rate, n = 50.0, 3000
    critical = ks_critical(n, alpha=0.01)
    for seed in range(5):
        assert ks_exponential(gaps_of(arrival_times(n, rate, 1.0, seed)), rate) < critical, seed
    # The check has teeth: evenly spaced (burstiness 20) and bursty (0.3) gaps are not exponential.
    assert ks_exponential(gaps_of(arrival_times(n, rate, 20.0, 0)), rate) > 3 * critical
    assert ks_exponential(gaps_of(arrival_times(n, rate, 0.3, 0)), rate) > 3 * critical


def test_burstiness_is_the_gamma_shape() -> None:
    """Gamma(shape k) gaps have a coefficient of variation 1/sqrt(k): k=1 Poisson (CV 1), k=0.25 CV 2, k=4 CV 0.5."""
    for k in (0.25, 1.0, 4.0):
        gaps = gaps_of(arrival_times(20000, 10.0, k, 3))
        mean = sum(gaps) / len(gaps)
        cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean
        assert mean == pytest.approx(0.1, rel=1e-9)
        assert cv == pytest.approx(1 / math.sqrt(k), rel=0.05), k


def test_ks_statistic_by_hand() -> None:
    rate = 2.0
    median = math.log(2) / rate        # F = 0.5
    assert ks_exponential([median], rate) == pytest.approx(0.5)
    # Two samples at F = 0.25 and 0.75: the empirical CDF steps 0 -> 0.5 -> 1, D = 0.25.
    xs = [-math.log(1 - p) / rate for p in (0.25, 0.75)]
    assert ks_exponential(xs, rate) == pytest.approx(0.25)
    assert ks_critical(100, 0.05) == pytest.approx(0.1358, abs=1e-4)


# ---- SLO targets -------------------------------------------------------------------------------------------------

def test_slo_parsing() -> None:
    assert parse_slo("ttft:500,tpot:50,e2el:2000") == {"ttft": 500.0, "tpot": 50.0, "e2el": 2000.0}
    assert parse_slo(" TTFT:250.5 ") == {"ttft": 250.5}


@pytest.mark.parametrize(("text", "fragment"), [
    ("ttfb:500", "unknown target 'ttfb' (known: ttft, tpot, e2el)"),
    ("ttft=500", "is not KEY:MS"),
    ("ttft:fast", "'fast' is not a number of milliseconds"),
    ("tpot:0", "must be a finite number of milliseconds > 0"),
    ("e2el:inf", "must be a finite number"),
    ("ttft:1,ttft:2", "ttft given twice"),
    ("", "give at least one target"),
])
def test_bad_slo_is_one_line(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_slo(text)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_meets_slo_needs_every_target() -> None:
    slo = {"ttft": 100.0, "tpot": 20.0}
    assert meets_slo(slo, 100.0, 20.0, 5000.0)           # at the target counts as meeting it
    assert not meets_slo(slo, 100.1, 10.0, 1.0)
    assert not meets_slo(slo, 50.0, 20.5, 1.0)
    assert meets_slo(slo, 50.0, None, 1.0)               # one output token: no TPOT, meets the TPOT target
    assert not meets_slo({"e2el": 10.0}, 1.0, 1.0, None)


# ---- per-level figures -------------------------------------------------------------------------------------------

def record(i: int, start: float, ttft: float, e2e: float, rate: float = 10.0, late: float = 0.5,
           ok: bool = True, tokens: int = 11) -> RequestRecord:
    return RequestRecord(concurrency=0, index=i, start_s=start, end_s=start + e2e / 1000, ok=ok,
                         error=None if ok else "http_5xx", ttft_ms=ttft if ok else None, e2e_ms=e2e if ok else None,
                         chunks=tokens, output_tokens=tokens if ok else None, rate=rate, late_ms=late)


def test_steady_level_below_capacity_is_not_flagged() -> None:
    times = arrival_times(400, 10.0, seed=1)
    level = level_from_records([record(i, t, 30.0, 230.0) for i, t in enumerate(times)])
    assert level.rate == 10.0 and level.concurrency == 0 and level.load == 10.0
    assert level.achieved_rate == pytest.approx(10.0)
    assert level.served_rate == pytest.approx(10.0, rel=0.1)
    assert level.ttft_growth == pytest.approx(1.0)
    assert not level.over_capacity and not level.behind
    assert level_warnings(level) == []


def test_growing_ttft_flags_over_capacity() -> None:
    """A queue building in the server: each arrival waits longer than the one before."""
    times = arrival_times(400, 10.0, seed=1)
    level = level_from_records([record(i, t, 30.0 + 10 * i, 230.0 + 10 * i) for i, t in enumerate(times)])
    assert level.over_capacity and level.ttft_growth is not None and level.ttft_growth > 5
    assert any("over capacity" in w and "TTFT grew" in w for w in level_warnings(level))


def test_served_rate_well_under_the_offered_rate_flags_over_capacity() -> None:
    """Completions at 5/s against 10/s offered, with TTFT flat (e.g. the server queues before the first token
    is sent... or fails half its requests)."""
    times = arrival_times(400, 10.0, seed=1)
    recs = [record(i, t, 30.0, 230.0, ok=i % 2 == 0) for i, t in enumerate(times)]
    level = level_from_records(recs)
    assert level.served_rate == pytest.approx(5.0, rel=0.1)
    assert level.over_capacity


def test_late_sends_flag_the_generator_as_behind() -> None:
    times = arrival_times(400, 10.0, seed=1)
    on_time = level_from_records([record(i, t, 30.0, 230.0, late=1.0) for i, t in enumerate(times)])
    # 10/s: the mean gap is 100 ms, so the bound is 25 ms of lateness at p99.
    late = level_from_records([record(i, t, 30.0, 230.0, late=40.0 if i % 20 == 0 else 1.0)
                               for i, t in enumerate(times)])
    assert on_time.send_late_ms.p99 == pytest.approx(1.0) and not on_time.behind
    assert late.send_late_ms.p99 == pytest.approx(40.0) and late.behind
    assert any("fell behind its schedule" in w for w in level_warnings(late))
    fast = level_from_records([record(i, t, 3.0, 23.0, rate=100.0, late=LATE_BOUND_MS + 1)
                               for i, t in enumerate(arrival_times(400, 100.0))])
    assert fast.behind   # at 100/s a quarter gap is 2.5 ms: the 10 ms floor decides


def test_goodput_counts_requests_meeting_every_target() -> None:
    acc = LevelAccumulator(4, slo={"ttft": 100.0, "e2el": 1000.0})
    for i, (ttft, e2e, ok) in enumerate([(50, 500, True), (150, 500, True), (50, 1500, True), (60, 900, True),
                                         (0, 0, False)]):
        acc.add(record(i, i * 0.1, ttft, e2e, ok=ok))
    level = acc.result(2.0, 0.0, None)
    assert level.goodput == pytest.approx(2 / 2.0)          # two good requests over a 2 s level
    assert level.good_share == pytest.approx(2 / 5)         # the failure counts against the share
    assert LevelAccumulator(4).result(2.0, 0.0, None).goodput is None


def test_result_lines_round_trip_and_closed_loop_lines_are_unchanged() -> None:
    times = arrival_times(100, 10.0)
    level = level_from_records([record(i, t, 30.0 + i, 230.0) for i, t in enumerate(times)],
                               slo={"ttft": 60.0})
    d = level.to_dict()
    assert d["rate"] == 10.0 and d["good_share"] == pytest.approx(0.31)   # i = 0..30 have TTFT <= 60 ms
    back = LevelResult.from_dict(d)
    assert back.rate == 10.0 and back.good_share == pytest.approx(0.31) and back.send_late_ms.p99 == 0.5
    assert back.over_capacity == level.over_capacity and back.achieved_rate == pytest.approx(level.achieved_rate)
    closed = LevelAccumulator(2).result(1.0, 0.0, None).to_dict()
    assert not {"rate", "goodput", "behind", "over_capacity", "send_late_ms"} & set(closed)
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        LevelResult.from_dict(closed | {"concurrency": 0})


# ---- workload and options ----------------------------------------------------------------------------------------

def test_workload_round_trip_and_arrival_counts() -> None:
    w = Workload(levels=(1,), rates=(2.0, 4.5), burstiness=0.5, max_concurrency=8, slo={"ttft": 500}, seed=3)
    d = w.to_dict()
    assert d["mode"] == "rate" and d["slo"] == {"ttft": 500.0}
    assert Workload.from_dict(d) == w
    assert w.arrivals_for(4.5) == 135                                  # 30 s of schedule by default
    assert Workload(levels=(1,), rates=(2.0,), duration_s=60).arrivals_for(50.0) == 3000
    assert Workload(levels=(1,), rates=(2.0,), requests_per_level=7).arrivals_for(2.0) == 7
    assert Workload(levels=(1, 2)).to_dict()["mode"] == "concurrency"
    with pytest.raises(UserError, match="burstiness"):
        Workload(levels=(1,), rates=(1.0,), burstiness=0)
    with pytest.raises(UserError, match="strictly increasing"):
        Workload(levels=(1,), rates=(2.0, 1.0))
    with pytest.raises(UserError, match="unknown target"):
        Workload(levels=(1,), slo={"ttfb": 1.0})


def test_rates_from_profiles_or_options_and_levels_win_back_closed_loop() -> None:
    config = SweepDefaults(rates=(1.0, 2.0))
    assert workload_from(config).rates == (1.0, 2.0)
    assert workload_from(config, WorkloadOverrides(levels=(1, 4))).rates == ()
    assert workload_from(SweepDefaults(), WorkloadOverrides(rates=(8.0,))).open_loop
    # [sweep] slo applies unless --slo says otherwise (also to closed-loop sweeps: goodput is per level either way).
    assert workload_from(SweepDefaults(slo={"ttft": 5.0})).slo == {"ttft": 5.0}
    assert workload_from(SweepDefaults(slo={"ttft": 5.0}), WorkloadOverrides(slo={"e2el": 9.0})).slo == {"e2el": 9.0}
    assert parse_rates("0.5, 1,2") == (0.5, 1.0, 2.0)
    with pytest.raises(ValueError, match="'x' is not a number"):
        parse_rates("1,x")


def specmon(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECMON_CONFIG": str(cwd / "none.toml")}
    (cwd / "none.toml").write_text('[profiles.a]\ncommand = "true"\n')
    return run_specmon(*args, cwd=cwd, env=env, timeout=90)


@pytest.mark.slow
@pytest.mark.parametrize(("args", "fragment"), [
    (("--slo", "ttft:soon"), "--slo: ttft: 'soon' is not a number of milliseconds"),
    (("--rates", "4,2"), "--rates: rates must be strictly increasing (4.0 then 2.0)"),
    (("--request-rate", "0"), "--request-rate: must be a finite number > 0"),
    (("--burstiness", "2"), "--burstiness applies to an open-loop sweep"),
    (("--max-concurrency", "4", "--levels", "1,2"), "--max-concurrency applies to an open-loop sweep"),
    (("--rates", "1", "--levels", "1"), "not allowed with argument"),
])
def test_bad_open_loop_options_are_one_line_errors(tmp_path: Path, args: tuple[str, ...], fragment: str) -> None:
    proc = specmon("sweep", "--url", "http://127.0.0.1:9", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()   # nothing written, nothing sent


# ---- compare on the rate axis and on goodput ------------------------------------------------------------------------

def rate_file(path: Path, profile: str, points: list[tuple[float, float, float]], slo: bool = True) -> Path:
    """A result file of an open-loop sweep: (rate, output tok/s, goodput) per level."""
    wl = Workload(levels=(1,), rates=tuple(r for r, _, _ in points), slo={"ttft": 500.0} if slo else {})
    lines = [SweepMeta(url="http://127.0.0.1:1", model="m", workload=wl.to_dict(), profile=profile).to_dict()]
    for rate, tput, good in points:
        base = level_from_records([record(i, t, 30.0, 230.0, rate=rate) for i, t in enumerate(arrival_times(40, rate))])
        lines.append(dataclasses.replace(base, output_throughput=tput, goodput=good if slo else None,
                                         good_share=0.5 if slo else None).to_dict())
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.mark.slow
def test_compare_reads_the_rate_axis_and_crosses_over_on_goodput(tmp_path: Path) -> None:
    # Throughput: eagle3 ahead everywhere. Goodput: eagle3 ahead at 1 and 2 req/s, behind at 4 and 8.
    base = rate_file(tmp_path / "base.jsonl", "base", [(1, 100, 1.0), (2, 200, 2.0), (4, 380, 3.0), (8, 400, 2.0)])
    spec = rate_file(tmp_path / "spec.jsonl", "eagle3", [(1, 150, 1.5), (2, 290, 2.5), (4, 500, 2.0), (8, 520, 1.0)])
    proc = specmon("compare", str(base), str(spec), "--no-chart", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split()[:2] == ["rate", "base"]
    assert "crossover eagle3 vs base: none in the measured range" in proc.stdout
    proc = specmon("compare", str(base), str(spec), "--metric", "goodput", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "base good/s" in proc.stdout and "goodput req/s vs request rate" in proc.stdout
    # eagle3 +0.5 good/s at 2 req/s, -1.0 at 4: the lines cross at 2 + 2 * 0.5 / 1.5 req/s.
    assert "crossover eagle3 vs base: ≈2.67 req/s (eagle3 ahead below, base ahead above)" in proc.stdout
    assert "(crossover ≈2.67 req/s)" in proc.stdout
    assert "request rate (req/s)" in proc.stdout
    proc = specmon("compare", str(base), str(spec), "--metric", "goodput", "--json", cwd=tmp_path)
    data = json.loads(proc.stdout)
    assert data["mode"] == "rate" and data["metric"] == "goodput"
    assert [lv["rate"] for lv in data["levels"]] == [1, 2, 4, 8]
    assert data["levels"][2]["goodput"] == [3.0, 2.0] and data["levels"][2]["ratio"] == [pytest.approx(2 / 3)]
    assert data["crossover"][0]["rate"] == pytest.approx(2 + 2 * 0.5 / 1.5)


@pytest.mark.slow
def test_compare_refuses_to_mix_rate_and_concurrency_sweeps_and_says_when_goodput_is_missing(tmp_path: Path) -> None:
    rate = rate_file(tmp_path / "rate.jsonl", "a", [(1, 100, 1.0), (2, 200, 2.0)])
    nogood = rate_file(tmp_path / "nogood.jsonl", "b", [(1, 100, 1.0), (2, 200, 2.0)], slo=False)
    closed = tmp_path / "closed.jsonl"
    meta = SweepMeta(url="http://127.0.0.1:1", model="m", workload=Workload(levels=(1,)).to_dict()).to_dict()
    closed.write_text(json.dumps(meta) + "\n" + json.dumps(LevelAccumulator(1).result(1.0, 0.0, None).to_dict()) + "\n")
    proc = specmon("compare", str(rate), str(closed), cwd=tmp_path)
    assert proc.returncode == 2 and "is an open-loop request-rate sweep and" in proc.stderr
    assert "not on one axis" in proc.stderr and "Traceback" not in proc.stderr
    proc = specmon("compare", str(rate), str(nogood), "--metric", "goodput", "--no-chart", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "b: no goodput (swept without --slo)" in proc.stdout


def test_an_open_loop_opens_as_many_connections_as_will_be_in_flight() -> None:
    # 1,000 req/s of 0.17 s requests: 170 in flight on average, twice that once the level's own load slows the
    # server (LOAD_STRETCH), a few standard deviations more at the peak.
    assert connections_needed(1000.0, 0.17, 5000, None, 64, 4096) == math.ceil(340 + 4 * math.sqrt(340))
    assert connections_needed(1000.0, None, 5000, None, 64, 4096) == 64    # nothing known yet: the floor
    assert connections_needed(10.0, 0.1, 5000, None, 64, 4096) == 64       # few in flight: still the floor
    assert connections_needed(1000.0, 0.17, 100, None, 64, 4096) == 100    # never more than the level's requests
    assert connections_needed(1000.0, 0.17, 5000, 32, 32, 4096) == 32      # nor than its concurrency cap
    assert connections_needed(1e5, 10.0, 10**7, None, 64, 4096) == 4096    # nor than the file descriptors allow
