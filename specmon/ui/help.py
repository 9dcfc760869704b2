"""Help screen: every key binding, generated from the binding table with the user's remaps applied."""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from specmon.ui.keys import key_rows


class HelpScreen(ModalScreen[None]):
    """A table of keys, descriptions and binding ids (the ids are what `[keys]` in profiles.toml remaps)."""

    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss_help", "Close")]

    def __init__(self, keymap: Mapping[str, str]) -> None:
        super().__init__()
        self.keymap = dict(keymap)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="help"):
            yield Label("[b]specmon keys[/b]  (remap in profiles.toml: \\[keys] id = \"key\"; esc closes)")
            table: DataTable[str] = DataTable(cursor_type="none", zebra_stripes=True)
            table.add_columns("key", "does", "id")
            for keys, text, binding_id in key_rows(self.keymap):
                table.add_row(keys, text, binding_id)
            yield table

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
