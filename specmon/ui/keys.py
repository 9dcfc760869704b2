"""The TUI's key bindings, built from the key table in `specmon.model.config.keymap` (ids users remap in `[keys]`).

The footer and the help screen are generated from that one list, so they can never disagree with what the keys
do. `[keys]` is checked when the config is loaded; `validate_keymap` repeats the same check for a Config built
in code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from textual.binding import Binding

from specmon.errors import UserError
from specmon.model.config.keymap import (
    BINDING_IDS,
    KEYS,
    display_key,
    effective_keys,
    keymap_problems,
)

__all__ = ["BINDINGS", "BINDING_IDS", "ESSENTIAL_IDS", "key_rows", "validate_keymap"]

BINDINGS: list[Binding] = [
    Binding(spec.keys, spec.action, spec.label, id=spec.id, show=spec.shown, tooltip=spec.help) for spec in KEYS
]

# The bindings kept in the footer when the terminal is too narrow for all of them.
ESSENTIAL_IDS: frozenset[str] = frozenset(spec.id for spec in KEYS if spec.essential)


def validate_keymap(keys: Mapping[str, str], where: Callable[[str], str]) -> dict[str, str]:
    """The `[keys]` remaps in Textual's spelling, or a UserError naming the first bad one.

    `where(binding_id)` gives the `FILE:LINE` to blame (Config.where), e.g.
    `profiles.toml:12: [keys] lanch: unknown binding id`.
    """
    checked, problems = keymap_problems(keys)
    if problems:
        binding_id, message = problems[0]
        raise UserError(f"{where(binding_id)}: [keys] {binding_id}: {message}")
    return checked


def key_rows(keymap: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(keys, description, binding id) for every binding, with user remaps applied: the help screen's table."""
    keys = effective_keys(keymap)
    return [(display_key(keys[spec.id]), spec.help, spec.id) for spec in KEYS]


def key_of(keymap: Mapping[str, str], binding_id: str) -> str:
    """The first key of a binding as a hint shows it ("m"), with user remaps applied."""
    return display_key(effective_keys(keymap)[binding_id]).split(",")[0]
