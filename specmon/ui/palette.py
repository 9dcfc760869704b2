"""Command palette entries (ctrl+p): per-profile launch / stop / restart / select, sweep, experiments, overlay,
themes."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from specmon.model.config import Config
from specmon.ui.state import ScreenState


class PaletteHost(Protocol):
    """What the palette needs of the app (SpecmonApp provides it): a protocol, so the app, which lists this
    provider in its COMMANDS, is not imported back here."""

    theme: str   # the palette's "theme NAME" entries set it

    @property
    def config(self) -> Config: ...

    @property
    def state(self) -> ScreenState: ...

    @property
    def theme_names(self) -> list[str]: ...

    def select_profile(self, profile: str) -> None: ...

    def action_launch(self) -> None: ...

    def action_stop(self) -> None: ...

    def action_restart(self) -> None: ...

    def action_sweep(self) -> None: ...

    def action_cancel_sweep(self) -> None: ...

    def action_overlay(self) -> None: ...

    def action_quit_and_stop(self) -> None: ...

    def start_experiment(self, name: str, resume: bool = False) -> None: ...


class SpecmonCommands(Provider):
    """Every action the keys offer, by name, for each profile: the palette is the discoverable way in."""

    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = cast(PaletteHost, self.app)
        commands: list[tuple[str, Callable[[], object], str]] = []
        for profile in app.state.profiles:
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
        cast(PaletteHost, self.app).select_profile(profile)
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
