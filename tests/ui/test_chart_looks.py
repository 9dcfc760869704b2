"""`specmon report`'s image and `specmon compare`'s terminal chart have the TUI chart's look (issue 26): each
profile's own symbol at its levels, round value ticks, the crossover marked where the curves meet (not a full-height
line) and labelled there; the report's verdict under the chart."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_compare_cli import write_sweep

NS = "{http://www.w3.org/2000/svg}"
HREF = "{http://www.w3.org/1999/xlink}href"


def drawn_elements(element: ET.Element) -> list[ET.Element]:
    """The element's descendants, less marker definitions (<defs>)."""
    found = []
    for child in element:
        if child.tag != f"{NS}defs":
            found += [child, *drawn_elements(child)]
    return found


def two_sweeps(tmp_path: Path) -> tuple[Path, Path]:
    """Two sweeps whose curves cross at C = 2 + 2 * 34/52 ≈ 3.3."""
    return (write_sweep(tmp_path / "base.jsonl", "baseline", {1: 93.0, 2: 172.0, 4: 298.0, 8: 471.0}),
            write_sweep(tmp_path / "spec.jsonl", "eagle3", {1: 128.0, 2: 206.0, 4: 280.0, 8: 379.0}))


@pytest.mark.slow
def test_compare_chart_marks_each_level_and_the_crossover_where_the_curves_meet(tmp_path: Path) -> None:
    """compare's chart drew each sweep as a run of one glyph, the crossover as a full-height line, ticks 93, ..."""
    done = subprocess.run([sys.executable, "-m", "specmon", "compare", *map(str, two_sweeps(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    chart = done.stdout.split("output tok/s vs concurrency")[1]
    assert chart.count("●") == 4 + 2 and chart.count("■") == 4 + 2, chart   # 4 levels each, 2 in the legend
    assert [line.split("┤")[0].strip() for line in chart.splitlines() if "┤" in line] == ["500", "400", "300",
                                                                                        "200", "100", "0"], chart
    lines = chart.splitlines()
    cross = next(i for i, line in enumerate(lines) if "✕" in line)
    assert chart.count("✕") == 1 and "C≈3.31" in lines[cross + 1], chart   # the cross, its load just under it


@pytest.mark.slow
def test_report_image_marks_each_level_and_the_crossover_where_the_curves_meet(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    base, spec = two_sweeps(tmp_path)
    done = subprocess.run([sys.executable, "-m", "specmon", "report", str(base), str(spec), "--image", "svg",
                           "--out", str(tmp_path / "r" / "report.md")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    svg = ET.parse(tmp_path / "r" / "report.svg").getroot()
    groups = {g.get("id"): g for g in svg.iter(f"{NS}g") if g.get("id")}
    # One symbol per level, a different one for each profile.
    symbols = {name: {u.get(HREF) for u in groups[f"throughput-{name}"].iter(f"{NS}use")} for name in ("baseline", "eagle3")}
    assert all(len(s) >= 1 for s in symbols.values()) and symbols["baseline"].isdisjoint(symbols["eagle3"]), symbols
    # The crossover: one marker (between C=2 and C=4), not a line across the axes; the verdict has its own text.
    marks = list(groups["crossover"].iter(f"{NS}use"))
    drawn = [el for el in drawn_elements(groups["crossover"]) if el.tag == f"{NS}path"]   # a line would be a path
    assert len(marks) == 1 and not drawn, ET.tostring(groups["crossover"])
    assert "verdict" in groups
