"""Every key binding of the TUI, each with a stable id that users remap in profiles.toml's `[keys]` table.

    [keys]
    launch = "L"          # binding id = key (or several, comma-separated: "L,f5")

The help screen and the footer are generated from this one list, so they can never disagree with what the keys do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from textual.binding import Binding

from specmon.errors import UserError

BINDINGS: list[Binding] = [
    Binding("l", "launch", "Launch", id="launch", tooltip="Launch the selected profile"),
    Binding("S", "stop", "Stop", id="stop", tooltip="Stop the selected run (asks first)"),
    Binding("R", "restart", "Restart", id="restart", tooltip="Restart the selected run (asks first)"),
    Binding("s", "sweep", "Sweep", id="sweep", tooltip="Start a sweep on ready servers (form)"),
    Binding("c", "cancel_sweep", "Cancel sweep", id="cancel_sweep", tooltip="Cancel the running sweep"),
    Binding("o", "overlay", "Overlay", id="overlay", tooltip="Load a result file onto the chart"),
    Binding("slash", "filter", "Filter", id="filter", tooltip="Filter the log (! inverts)"),
    Binding("f", "toggle_follow", "Follow", id="follow", tooltip="Toggle following the log's end"),
    Binding("e", "gpuenv_view", "GPU/env", id="gpuenv", show=False,
            tooltip="GPU/env pane: cycle GPUs, the environment, and its diff from the previous profile"),
    Binding("m", "maximize", "Max", id="maximize", tooltip="Maximise the focused pane (esc restores)"),
    Binding("j,down", "select(1)", "Next", id="select_next", show=False, tooltip="Select the next profile"),
    Binding("k,up", "select(-1)", "Prev", id="select_prev", show=False, tooltip="Select the previous profile"),
    Binding("t", "next_theme", "Theme", id="theme", tooltip="Switch to the next theme (remembered)"),
    Binding("question_mark,f1", "help", "Help", id="help", tooltip="List every key"),
    Binding("ctrl+p", "command_palette", "Palette", id="palette", show=False, tooltip="Command palette"),
    Binding("escape", "restore", "Restore", id="restore", show=False, tooltip="Restore a maximised pane"),
    Binding("q", "quit", "Quit", id="quit", tooltip="Quit; servers keep running"),
    Binding("Q", "quit_and_stop", "Quit+stop", id="quit_stop", show=False, tooltip="Stop the servers started here, then quit"),
]

BINDING_IDS: frozenset[str] = frozenset(b.id for b in BINDINGS if b.id)

# A key name as Textual spells it: a letter, digit, named key, or modifiers joined with "+".
_KEY_RE = re.compile(r"^(?:(?:ctrl|shift|alt|super|meta)\+)*(?:[A-Za-z0-9]|[a-z][a-z0-9_]+)$")


def validate_keymap(keys: Mapping[str, str], where: Callable[[str], str]) -> dict[str, str]:
    """Check a `[keys]` table: every id must be a known binding id and every key well formed.

    `where(binding_id)` gives the `FILE:LINE` to blame (Config.where). Raises UserError naming the offending
    key, e.g. `profiles.toml:12: [keys] lanch: unknown binding id`.
    """
    checked: dict[str, str] = {}
    for binding_id, key in keys.items():
        if binding_id not in BINDING_IDS:
            known = ", ".join(sorted(BINDING_IDS))
            raise UserError(f"{where(binding_id)}: [keys] {binding_id}: unknown binding id (known: {known})")
        parts = [p.strip() for p in str(key).split(",")]
        if not parts or any(not _KEY_RE.match(p) for p in parts):
            raise UserError(f"{where(binding_id)}: [keys] {binding_id}: {key!r} is not a key name (e.g. \"L\", \"ctrl+l\", \"f5\")")
        checked[binding_id] = ",".join(parts)
    return checked


def key_rows(keymap: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(keys, description, binding id) for every binding, with user remaps applied: the help screen's table."""
    rows = []
    for b in BINDINGS:
        keys = keymap.get(b.id or "", b.key)
        rows.append((keys.replace("question_mark", "?").replace("slash", "/"), b.tooltip or b.description, b.id or ""))
    return rows
