"""Command palette entries (ctrl+p): per-profile launch / stop / restart / select, sweep, experiments, overlay,
themes."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from specmon.ui.app import SpecmonApp


class SpecmonCommands(Provider):
    """Every action the keys offer, by name, for each profile: the palette is the discoverable way in."""

    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = cast("SpecmonApp", self.app)
        commands: list[tuple[str, Callable[[], object], str]] = []
        for profile in app.profiles:
            for verb, action in (("launch", app.action_launch), ("stop", app.action_stop),
                                 ("restart", app.action_restart)):
                commands.append((f"{verb} {profile}", partial(self._on_profile, profile, action),
                                 f"{verb.capitalize()} the server of profile {profile}"))
            commands.append((f"select {profile}", partial(app.select_profile, profile), "Show this profile's log"))
        commands += [
            ("sweep", app.action_sweep, "Sweep ready servers (form)"),
            ("cancel sweep", app.action_cancel_sweep, "Cancel the running sweep or experiment"),
            ("overlay result file", app.action_overlay, "Draw a result file on the chart"),
            ("quit and stop servers", app.action_quit_and_stop, "Stop the servers started here, then quit"),
        ]
        for name in app.config.experiments:
            commands.append((f"run experiment {name}", partial(app.start_experiment, name, False),
                             "Launch, sweep and stop each profile in turn, then the verdict"))
            commands.append((f"resume experiment {name}", partial(app.start_experiment, name, True),
                             "Continue the last unfinished run of this experiment"))
        commands += [(f"theme {name}", partial(setattr, app, "theme", name), "Switch theme (remembered)")
                     for name in app.theme_names]
        return commands

    def _on_profile(self, profile: str, action: Callable[[], None]) -> None:
        cast("SpecmonApp", self.app).select_profile(profile)
        action()

    async def discover(self) -> Hits:
        for text, command, help_text in self._commands():
            yield DiscoveryHit(text, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, command, help_text in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), command, help=help_text)
