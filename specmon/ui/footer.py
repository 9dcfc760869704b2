"""The footer: as many key hints as fit the terminal's width, and always the essential ones (quit, help, launch,
sweep), so an 80-column terminal never hides how to leave or where help is."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.events import Resize
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from specmon.model.config.keymap import KEYS
from specmon.ui.keys import ESSENTIAL_IDS


def footer_cost(key_display: str, label: str) -> int:
    """Columns one hint takes in the footer: ` key label ` (Textual's FooterKey padding)."""
    return len(key_display) + len(label) + 3


def fitting(hints: Sequence[tuple[str, int]], width: int) -> list[str]:
    """Which hints (id, columns) to show in `width` columns: the essential ones first, then the others in table
    order while they fit; the result keeps table order."""
    chosen: set[str] = set()
    used = 0
    for wanted in (True, False):
        for hint_id, cost in hints:
            if (hint_id in ESSENTIAL_IDS) == wanted and (wanted or used + cost <= width):
                chosen.add(hint_id)
                used += cost
    return [hint_id for hint_id, _ in hints if hint_id in chosen]


class KeysFooter(Footer):
    """Textual's footer, trimmed to the hints that fit (essential ones always) instead of cut at the right edge."""

    def __init__(self) -> None:
        super().__init__(show_command_palette=False)
        self._fitted_width = 0

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        width = self.size.width or self.app.size.width
        self._fitted_width = width
        active = self.screen.active_bindings
        by_action: dict[str, tuple[str, Binding, bool, str]] = {}
        for _node, binding, enabled, tooltip in active.values():
            if binding.show and binding.action not in by_action:
                by_action[binding.action] = (binding.id or binding.action, binding, enabled, tooltip)
        # Table order (a remapped binding would otherwise move to the end).
        order = {spec.id: index for index, spec in enumerate(KEYS)}
        by_action = dict(sorted(by_action.items(), key=lambda item: order.get(item[1][0], len(order))))
        hints = [(hint_id, footer_cost(self.app.get_key_display(b), b.description))
                 for hint_id, b, _, _ in by_action.values()]
        # The palette hint (right-aligned by Textual's CSS) only where everything else fits beside it.
        palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        palette_cost = footer_cost(self.app.get_key_display(palette.binding), "Palette") if palette else 0
        with_palette = palette is not None and sum(cost for _, cost in hints) + palette_cost <= width
        shown = set(fitting(hints, width))
        self.styles.grid_size_columns = len(shown) + with_palette
        for hint_id, binding, enabled, tooltip in by_action.values():
            if hint_id in shown:
                yield FooterKey(binding.key, self.app.get_key_display(binding), binding.description, binding.action,
                                disabled=not enabled, tooltip=tooltip).data_bind(compact=Footer.compact)
        if palette is not None and with_palette:
            yield FooterKey(palette.binding.key, self.app.get_key_display(palette.binding), "Palette",
                            palette.binding.action, classes="-command-palette", disabled=not palette.enabled)

    def on_resize(self, event: Resize) -> None:
        if event.size.width != self._fitted_width:
            self.call_after_refresh(self.recompose)
