"""Help screen: every key binding, generated from the binding table with the user's remaps applied."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from specmon.ui.keys import key_of, key_rows


def keys_table(keymap: Mapping[str, str]) -> Table:
    """Keys, binding ids and what they do; descriptions wrap rather than run off a narrow terminal."""
    table = Table(box=None, expand=True, pad_edge=False, header_style="bold")
    table.add_column("key", no_wrap=True)
    table.add_column("id", no_wrap=True)
    table.add_column("does", ratio=1)
    for keys, text, binding_id in key_rows(keymap):
        # Plain text, not markup: "[experiments]" is a table name the reader needs to see.
        table.add_row(Text(keys), Text(binding_id), Text(text))
    return table


class HelpScreen(ModalScreen[None]):
    """A table of keys, binding ids and descriptions (the ids are what `[keys]` in profiles.toml remaps)."""

    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss_help", "Close")]

    def __init__(self, keymap: Mapping[str, str]) -> None:
        super().__init__()
        self.keymap = dict(keymap)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="help"):
            yield Label("[b]specmon keys[/b] · remap an id in profiles.toml \\[keys] · ↑↓ PgUp PgDn Home End scroll · "
                        "esc closes", id="help-title")
            yield Label(f"Focus: Tab and Shift+Tab move it between panes, a click gives it to a pane; "
                        f"{key_of(self.keymap, 'maximize')} maximises the focused pane.", id="help-focus", markup=False)
            with VerticalScroll(id="help-keys"):
                yield Static(keys_table(self.keymap))

    def on_mount(self) -> None:
        self.query_one("#help-keys", VerticalScroll).focus()  # so Home/End/PgUp/PgDn scroll at once

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
