"""docs/make_demo_svg.py, which makes the README's screenshot: its sweep settings pass the sweep form's own check, and
settings the form refuses make it fail loudly (exit 1, one line) before it starts anything. It once filled the form
with 16 requests per level and C=64; the form refused, and the script exited 0 and saved the refused form."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from paths import REPO

from specmon.model.config import builtin_config

SCRIPT = REPO / "docs" / "make_demo_svg.py"


def screenshot_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_demo_svg", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_screenshot_settings_pass_the_sweep_form() -> None:
    shot = screenshot_script()
    fields, request = shot.form_settings(builtin_config(), shot.FORM_SETTINGS)   # raises Failed when refused
    assert fields["levels"] == shot.FORM_SETTINGS["levels"]
    assert request.levels[-1] == 64 and set(request.profiles) == {"demo-baseline", "demo-eagle3"}


@pytest.mark.slow
def test_screenshot_script_fails_loudly_on_settings_the_form_refuses(tmp_path: Path) -> None:
    out = tmp_path / "demo.svg"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--levels", "1,4,16,64", "--requests", "16"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    assert done.stderr.strip().splitlines() == [
        "make_demo_svg: the sweep form refuses {'levels': '1,4,16,64', 'requests': '16'}: requests per level (16) is "
        "below the highest level C=64: a level needs at least one full wave of C requests; raise requests to 64 or "
        f"more, or drop the higher levels; {out} not written"]
    assert not out.exists()


@pytest.mark.slow
def test_screenshot_script_draws_both_servers_their_sweep_and_the_launch_log(tmp_path: Path) -> None:
    # The script drives the app through its own attributes and widgets; it once rotted silently when they moved
    # (the app's rows into its screen state, the log pane's RichLog into LogLines) and exited with a traceback.
    out = tmp_path / "demo.svg"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--size", "160x48", "--levels", "1,4",
                           "--requests", "8"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    svg = out.read_text().replace("&#160;", " ")
    assert "demo-baseline" in svg and "demo-eagle3" in svg
    assert "Load weight end" in svg   # the log pane scrolled to the end of the weight load
