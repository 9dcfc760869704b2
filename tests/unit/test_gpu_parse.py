"""nvidia-smi parsers (specmon.model.machine.gpu) on real captures from a two-H200 host (tests/fixtures/gpu/README.md)."""

from __future__ import annotations

import pytest
from paths import FIXTURES

from specmon.model.machine.gpu import (
    ComputeApp,
    GpuBoard,
    QueryStream,
    SmiError,
    number,
    parse_apps,
    parse_query,
    parse_run_markers,
    parse_xml,
)
from specmon.model.text.numbers import sparkline

FIX = FIXTURES / "gpu"
GPU0 = "GPU-4fbdac2b-8bdd-ad3c-2263-d0786aae9c1d"
GPU1 = "GPU-55a1432d-04d6-ddeb-5acf-69f67a676cd9"
# The field list the captures were made with (README.md).
CAPTURE_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "memory.free", "utilization.gpu",
                  "utilization.memory", "temperature.gpu", "power.draw", "power.limit", "clocks.sm", "clocks.mem",
                  "pci.bus_id", "driver_version", "pstate", "fan.speed")


def read(name: str) -> str:
    return (FIX / name).read_text()


def test_query_with_units_reads_the_header_and_strips_units() -> None:
    gpus = parse_query(read("smi-query.csv"))
    assert [g.uuid for g in gpus] == [GPU0, GPU1]
    first = gpus[0]
    assert (first.index, first.name, first.memory_total_mib, first.memory_used_mib) == (0, "NVIDIA H200", 143771, 0)
    assert (first.power_w, first.power_limit_w, first.temperature_c) == (81.62, 700.0, 36)
    # The header says `clocks.current.sm [MHz]` for the `clocks.sm` that was asked for.
    assert first.sm_clock_mhz == 345


def test_query_without_units_parses_by_position_and_agrees_with_the_units_form() -> None:
    bare = parse_query(read("smi-query-nounits.csv"), CAPTURE_FIELDS)
    units = parse_query(read("smi-query.csv"))
    assert [(g.uuid, g.memory_total_mib, g.temperature_c, g.sm_clock_mhz) for g in bare] == \
           [(g.uuid, g.memory_total_mib, g.temperature_c, g.sm_clock_mhz) for g in units]
    assert bare[0].power_w == 81.61   # a separate sample, a hundredth of a watt apart


def test_na_fields_are_none_not_zero() -> None:
    assert number("[N/A]") is None and number("N/A") is None and number("[Not Supported]") is None
    row = read("smi-query-nounits.csv").splitlines()[0]
    assert row.endswith("[N/A]")   # fan.speed on these GPUs
    with pytest.raises(SmiError, match="expected a number"):
        number("lots")


def test_bad_field_is_one_clear_error() -> None:
    with pytest.raises(SmiError) as err:
        parse_query(read("smi-bogus.txt"))
    assert str(err.value) == "nvidia-smi: field 'bogus.field' is not a valid field to query"


def test_cuda_visible_devices_is_ignored_so_gpus_are_keyed_by_uuid() -> None:
    assert [g.uuid for g in parse_query(read("smi-cvd.txt"))] == [GPU0, GPU1]


def test_lms_stream_in_awkward_chunks_gives_whole_ticks() -> None:
    data = (FIX / "smi-loop.csv").read_bytes()
    for size in (1, 7, 64, len(data)):
        stream = QueryStream(("index", "utilization.gpu", "memory.used"))
        ticks = []
        for start in range(0, len(data), size):
            ticks += stream.feed(data[start:start + size])
        # 20 rows, two GPUs a tick: ten ticks, the last one handed out as soon as both GPUs were in.
        assert len(ticks) == 10, size
        assert all(sorted(t) == ["index 0", "index 1"] for t in ticks)
        assert stream.flush() == {}


def test_compute_apps_one_process_on_two_gpus() -> None:
    expected = [ComputeApp(GPU0, 582, 19592, "python3"), ComputeApp(GPU1, 582, 19592, "python3")]
    assert parse_apps(read("apps.csv")) == expected
    assert parse_apps(read("apps-nounits.csv"),
                      ("gpu_uuid", "pid", "process_name", "used_memory", "used_gpu_memory")) == expected
    assert parse_apps("") == [] and parse_apps("No running processes found\n") == []


def test_xml_inventory() -> None:
    inv = parse_xml(read("smi-q.xml"))
    assert (inv.driver_version, inv.cuda_version) == ("580.159.04", "13.0")
    assert [(g.uuid, g.name, g.index, g.architecture, g.memory_total_mib) for g in inv.gpus] == [
        (GPU0, "NVIDIA H200", 0, "Hopper", 143771), (GPU1, "NVIDIA H200", 1, "Hopper", 143771)]
    with pytest.raises(SmiError, match="not XML"):
        parse_xml("Failed to initialize NVML")


def test_board_maps_holders_to_runs_and_flags_strangers() -> None:
    board = GpuBoard(history=3)
    for tick in range(5):
        board.add_tick({g.uuid: g for g in parse_query(read("smi-query.csv"))}, float(tick))
    assert len(board.tracks[GPU0].utilization) == 3    # bounded history
    board.set_apps(parse_apps(read("apps.csv")) + [ComputeApp(GPU1, 900, 10.0)],
                   parse_run_markers("582 SPECMON_RUN_ID=20261130-101500-abcdef\n900 \n"))
    assert [t.uuid for t in board.gpus_of_run("20261130-101500-abcdef")] == [GPU0, GPU1]
    holders = board.tracks[GPU1].holders
    assert [h.describe(["20261130-101500-abcdef"]) for h in holders] == [
        "run 20261130-101500-abcdef (pid 582)", "held by pid 900 (not a specmon run)"]
    board.add_tick({GPU0: board.tracks[GPU0].latest}, 9.0)
    assert board.tracks[GPU1].gone and not board.tracks[GPU0].gone


def test_sparkline_scales_and_pads() -> None:
    assert sparkline([0, 50, 100], 5, 100.0) == "  ▁▅█"   # the GPU pane's call: utilisation over 100 %
    assert sparkline([], 3, 100.0) == "   "
