"""The headless commands' tables (commands/_table.py, drawn by rich): width on a terminal, never cut in a pipe."""

from __future__ import annotations

import io

import pytest

from specmon.commands._table import table_text

HEAD = ("PROFILE", "RUN", "STATE", "NOTE")
ROWS = [("eagle3", "20261130-114010-5298ea", "failed", "exception: " + "x" * 150),
        ("base", "20261130-114011-000001", "ready", "http://127.0.0.1:30001")]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_pipe_gets_whole_rows_aligned_without_style_codes() -> None:
    lines = table_text(HEAD, ROWS, out=io.StringIO()).splitlines()
    assert lines[0].split() == list(HEAD) and len(lines) == 3
    assert lines[1].endswith("x" * 150) and "\x1b[" not in "".join(lines)
    assert lines[1].index("20261130") == lines[2].index("20261130") == lines[0].index("RUN")


def test_right_aligned_numbers() -> None:
    lines = table_text(("C", "tok/s"), [("1", "93.0"), ("16", "4000.0")], align="right", out=io.StringIO()).splitlines()
    assert lines == [" C   tok/s", " 1    93.0", "16  4000.0"]


def test_a_narrow_terminal_cuts_cells_and_never_wraps_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    lines = table_text(HEAD, ROWS, out=Tty()).splitlines()
    assert len(lines) == 3 and all(len(line) <= 60 for line in lines)
    assert lines[1].startswith("eagle3") and lines[1].endswith("…")


def test_profiles_table_shows_a_long_command_whole_in_a_pipe_and_cut_on_a_terminal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`specmon profiles` padded its table by hand and cut every row at the terminal's width, or at 120 columns
    in a pipe (`specmon profiles | grep` lost the end of a long command); it is drawn like the other tables now."""
    from specmon.commands.profiles import render_table
    from specmon.model.config import parse_config

    command = "vllm serve /models/m --port 8000 " + " ".join(f"--flag-{i} {i}" for i in range(40))
    config = parse_config(f'[profiles.a]\nserver = "vllm"\nport = 8000\ncommand = "{command}"\n', "profiles.toml")
    monkeypatch.setenv("COLUMNS", "80")
    piped = render_table(config, out=io.StringIO()).splitlines()
    assert piped[1].split() == ["NAME", "HOST", "SERVER", "PORT", "COMMAND"]
    assert piped[2].split(None, 4) == ["a", "local", "vllm", "8000", command]
    assert piped[2].index("8000") == piped[1].index("PORT")
    shown = render_table(config, out=Tty()).splitlines()
    assert len(shown[2]) <= 80 and shown[2].endswith("…") and shown[2].startswith("a ")
