"""The TUI's key table and the rules for remapping it in profiles.toml's `[keys]` table. Pure, stdlib only.

    [keys]
    launch = "L"          # binding id = key (or several, comma-separated: "L,f5")

The table lives here, below the UI, so every command that loads a config checks `[keys]` (FILE:LINE) and not
only the TUI when it starts. `specmon.ui.keys` turns it into Textual bindings; the footer and the help screen
are generated from the same list, so they can never disagree with what the keys do.

Key names follow Textual's spelling: a letter or digit (case matters: "S" is shift+s), a named key ("f5",
"escape", "pageup", "question_mark"), or modifiers joined with "+" ("ctrl+l", "ctrl+shift+up"). A single
punctuation character ("?", "/") is accepted and stored under its name ("question_mark", "slash").
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class KeySpec:
    """One binding: its stable id (what `[keys]` remaps), default keys, the action it runs and its words."""

    id: str
    keys: str            # default keys, comma-separated
    action: str          # the TUI action it runs
    label: str           # the footer's word
    help: str            # the help screen's sentence
    shown: bool = True   # in the footer
    essential: bool = False   # kept in the footer even on an 80-column terminal


KEYS: tuple[KeySpec, ...] = (
    KeySpec("launch", "l", "launch", "Launch", "Launch the selected profile", essential=True),
    KeySpec("stop", "S", "stop", "Stop", "Stop the selected run (asks first)"),
    KeySpec("restart", "R", "restart", "Restart", "Restart the selected run (asks first)"),
    KeySpec("sweep", "s", "sweep", "Sweep", "Start a sweep on ready servers (form)", essential=True),
    KeySpec("cancel_sweep", "c", "cancel_sweep", "Cancel", "Cancel the running sweep or experiment"),
    KeySpec("experiment", "x", "experiment", "Experiment",
            "Run or resume an [experiments] A/B unattended (launch, sweep, stop each profile; verdict)", shown=False),
    KeySpec("overlay", "o", "overlay", "Overlay", "Load a result file onto the chart"),
    KeySpec("goodput", "g", "toggle_goodput", "Goodput",
            "Sweep chart: goodput (req/s meeting the sweep's --slo targets) instead of output tok/s, and back",
            shown=False),
    KeySpec("filter", "slash", "filter", "Filter", "Filter the log (! inverts)"),
    KeySpec("follow", "f", "toggle_follow", "Follow", "Toggle following the log's end"),
    KeySpec("gpuenv", "e", "gpuenv_view", "GPU/env",
            "GPU/env pane: cycle GPUs, the environment, and its diff from the previous profile; below 150 "
            "columns, where the pane is hidden, this key opens it full screen (esc closes it)", shown=False),
    KeySpec("maximize", "m", "maximize", "Max", "Maximise the focused pane (esc restores)"),
    KeySpec("select_next", "j,down", "select(1)", "Next", "Select the next profile", shown=False),
    KeySpec("select_prev", "k,up", "select(-1)", "Prev", "Select the previous profile", shown=False),
    KeySpec("theme", "t", "next_theme", "Theme", "Switch to the next theme (remembered)"),
    KeySpec("help", "question_mark,f1", "help", "Help", "List every key", essential=True),
    KeySpec("filter_runs", "F", "filter_runs", "Find runs",
            "Filter the Servers cards by state, host or profile name as you type (enter keeps it, esc shows all)",
            shown=False),
    KeySpec("group", "G", "cycle_grouping", "Group",
            "Group the Servers cards by host, then by profile (name less its number), then not at all; each group's "
            "header counts its runs, failed and stalled runs first", shown=False),
    KeySpec("next_host", "right_square_bracket", "host(1)", "Next host",
            "Select the first card of the next host (by name): the GPU view pages through the fleet's hosts", shown=False),
    KeySpec("prev_host", "left_square_bracket", "host(-1)", "Prev host",
            "Select the first card of the previous host (the GPU view's previous page)", shown=False),
    KeySpec("palette", "ctrl+p", "command_palette", "Palette", "Command palette", shown=False),
    KeySpec("restore", "escape", "restore", "Restore", "Restore a maximised pane", shown=False),
    KeySpec("quit", "q", "quit", "Quit", "Quit; servers keep running (the demo stops its own)", essential=True),
    KeySpec("quit_stop", "Q", "quit_and_stop", "Quit+stop", "Stop the servers started here, then quit", shown=False),
    KeySpec("fleet", "X", "fleet", "Fleet", "Stop or restart every live run of the selected card's profile or host "
            "(lists them, asks first)", shown=False),
)

BINDING_IDS: frozenset[str] = frozenset(spec.id for spec in KEYS)

MODIFIERS = ("ctrl", "shift", "alt", "super", "meta", "hyper")
# Named keys a terminal reports (Textual's names); letters, digits and punctuation are handled separately.
NAMED_KEYS: frozenset[str] = frozenset(
    ("escape", "enter", "tab", "space", "backspace", "delete", "insert", "home", "end", "pageup", "pagedown",
     "up", "down", "left", "right", *(f"f{n}" for n in range(1, 25)))
)
# Textual names a few punctuation characters differently from their Unicode names.
_NAME_REPLACEMENTS = {"solidus": "slash", "reverse_solidus": "backslash", "commercial_at": "at",
                      "hyphen_minus": "minus", "plus_sign": "plus", "low_line": "underscore"}


def character_key(char: str) -> str:
    """Textual's name of the key that types `char`: letters and digits are themselves, "?" is "question_mark"."""
    if char.isalnum():
        return char
    name = unicodedata.name(char, char).lower().replace("-", "_").replace(" ", "_")
    return _NAME_REPLACEMENTS.get(name, name)


# Punctuation keys by name: "question_mark", "slash", ... (every printable ASCII symbol except "," and "+",
# which the key syntax itself uses).
PUNCTUATION_KEYS: frozenset[str] = frozenset(
    character_key(c) for c in map(chr, range(33, 127)) if not c.isalnum() and c not in ",+"
)


def canonical_key(text: str) -> str:
    """One key in Textual's spelling ("?" -> "question_mark", " ctrl+L " -> "ctrl+L"); ValueError if malformed."""
    text = text.strip()
    if not text:
        raise ValueError("an empty key name")
    if len(text) == 1:
        if text in ",+" or not text.isprintable() or text.isspace():
            raise ValueError(f"{text!r} cannot be bound (use its name, e.g. \"comma\", \"plus\")")
        return character_key(text)
    *modifiers, base = text.split("+")
    if not base:
        raise ValueError(f"{text!r} is not a key name (nothing after the last '+')")
    for modifier in modifiers:
        if modifier not in MODIFIERS:
            raise ValueError(f"{modifier!r} in {text!r} is not a modifier ({', '.join(MODIFIERS)})")
    if len(set(modifiers)) != len(modifiers):
        raise ValueError(f"{text!r} repeats a modifier")
    if len(base) == 1 and base.isascii() and base.isalnum():
        return text
    if base in NAMED_KEYS or base in PUNCTUATION_KEYS:
        return text
    if len(base) == 1 and base.isprintable() and not base.isspace() and base not in ",+":
        return "+".join([*modifiers, character_key(base)])
    raise ValueError(f"{base!r} in {text!r} is not a key name (e.g. \"L\", \"ctrl+l\", \"f5\", \"pagedown\")")


def parse_keys(text: str) -> tuple[str, ...]:
    """A `[keys]` value: one key or several separated by commas, each in Textual's spelling; ValueError if bad."""
    keys = tuple(canonical_key(part) for part in text.split(","))
    if len(set(keys)) != len(keys):
        raise ValueError(f"{text!r} names the same key twice")
    return keys


def keymap_problems(remaps: Mapping[str, str]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Check a `[keys]` table against the key table.

    Returns the remaps in canonical spelling (binding id -> "key,key") and (binding id, problem) pairs: an
    unknown id, a malformed key, or a key that another binding also has after the remaps (a clash would
    silently take the key from one of them).
    """
    checked: dict[str, str] = {}
    problems: list[tuple[str, str]] = []
    for binding_id, text in remaps.items():
        if binding_id not in BINDING_IDS:
            problems.append((binding_id, f"unknown binding id (known: {', '.join(sorted(BINDING_IDS))})"))
            continue
        try:
            checked[binding_id] = ",".join(parse_keys(text))
        except ValueError as exc:
            problems.append((binding_id, str(exc)))
    holders: dict[str, list[str]] = {}
    for spec in KEYS:
        for key in checked.get(spec.id, spec.keys).split(","):
            holders.setdefault(key, []).append(spec.id)
    for key, ids in holders.items():
        if len(ids) < 2:
            continue
        blamed = [i for i in ids if i in checked] or ids
        others = [i for i in ids if i != blamed[0]]
        problems.append((blamed[0], f"key {key!r} is also bound to {', '.join(others)} (each key does one thing)"))
    return checked, problems


def effective_keys(remaps: Mapping[str, str]) -> dict[str, str]:
    """Binding id -> its keys after the (already checked) remaps."""
    return {spec.id: remaps.get(spec.id, spec.keys) for spec in KEYS}


# Each punctuation key's character by its name: "question_mark" -> "?" (made once: hints are drawn every second).
_CHARACTERS = {character_key(c): c for c in map(chr, range(33, 127)) if not c.isalnum()}


def display_key(keys: str) -> str:
    """Keys as the help screen shows them: "question_mark,f1" -> "?,f1"."""
    return ",".join("+".join(_CHARACTERS.get(p, p) for p in key.split("+")) for key in keys.split(","))
