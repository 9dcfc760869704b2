"""Modal screens: confirm, the sweep form (prefilled from `[sweep]`), the result-file picker for overlays, and the
experiment picker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from specmon.model.config import ExperimentSpec, SweepDefaults, one_wave_problem, parse_levels
from specmon.model.workload.datasets import has_set_length
from specmon.ui import format as fmt


def error_text(message: str) -> Content:
    """A form's error line in the theme's error colour; the message is plain text (it echoes what was typed)."""
    return Content.from_markup("[$error]$message[/]", message=message)


class ConfirmScreen(ModalScreen[bool]):
    """Ask a yes/no question; y / enter confirm, n / esc cancel."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question)
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


@dataclass(frozen=True)
class FleetChoice:
    """What the fleet dialog was answered with: the scope chosen (its index) and the verb ("stop" or "restart")."""

    scope: int
    verb: str


class FleetScreen(ModalScreen[FleetChoice | None]):
    """Stop or restart every live run of a scope (the selected card's profile, or its host): each scope's runs are
    listed, p / h choose the scope, s stops them, r restarts them, n / esc cancel. A scope without runs does
    nothing."""

    BINDINGS = [
        Binding("p", "scope(0)", "Profile"),
        Binding("h", "scope(1)", "Host"),
        Binding("s", "act('stop')", "Stop"),
        Binding("r", "act('restart')", "Restart"),
        Binding("n,escape", "cancel", "Cancel"),
    ]

    def __init__(self, scopes: Sequence[tuple[str, Sequence[str]]], chosen: int = 0) -> None:
        super().__init__()
        self.scopes = scopes   # (what the scope is, "profile sim"; one line per run in it)
        self.chosen = chosen

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="fleet"):
            yield Label(id="fleet-title")
            yield Static(id="fleet-runs")
            yield Label("p: this profile's runs · h: this host's runs")
            with Horizontal(classes="buttons"):
                yield Button("Stop (s)", id="stop", variant="error")
                yield Button("Restart (r)", id="restart", variant="warning")
                yield Button("Cancel (n)", id="cancel")

    def on_mount(self) -> None:
        self._paint()
        self.query_one("#cancel", Button).focus()

    def _paint(self) -> None:
        name, runs = self.scopes[self.chosen]
        count = f"{len(runs)} live run{'' if len(runs) == 1 else 's'}"
        self.query_one("#fleet-title", Label).update(Content(f"Stop or restart every run of {name}: {count}"))
        self.query_one("#fleet-runs", Static).update(Content("\n".join(runs) or "(nothing to stop)"))
        for verb in ("stop", "restart"):
            self.query_one(f"#{verb}", Button).disabled = not runs

    def action_scope(self, index: int) -> None:
        if index < len(self.scopes):
            self.chosen = index
            self._paint()

    def action_act(self, verb: str) -> None:
        if self.scopes[self.chosen][1]:
            self.dismiss(FleetChoice(self.chosen, verb))

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
        else:
            self.action_act(str(event.button.id))


@dataclass(frozen=True)
class SweepRequest:
    """What the user asked for in the sweep form."""

    profiles: tuple[str, ...]
    levels: tuple[int, ...]
    requests_per_level: int | None
    input_len: int | None             # None: the dataset's prompts are sent as written (no length to set)
    output_len: int


# The sweep form's fields: input id -> label.
_SWEEP_FIELD_LABELS = {"levels": "levels", "requests": "requests/level", "input_len": "input tokens",
                       "output_len": "output tokens"}


def sweep_form_fields(defaults: SweepDefaults) -> dict[str, str]:
    """The sweep form's fields as it opens (input id -> text), from the config's `[sweep]`. Only random prompts
    have a length to set (the others are sent as written): no input field for them."""
    fields = {"levels": ",".join(map(str, defaults.levels)),
              "requests": "" if defaults.requests_per_level is None else str(defaults.requests_per_level),
              "input_len": str(defaults.input_len), "output_len": str(defaults.output_len)}
    if not has_set_length(defaults.dataset):
        del fields["input_len"]
    return fields


def sweep_request(profiles: Sequence[str], fields: Mapping[str, str], defaults: SweepDefaults) -> SweepRequest:
    """What the sweep form starts from its ticked profiles and fields (input id -> text; `defaults` fills what
    it has no field for), or ValueError saying why it refuses them (the line the form shows).
    docs/make_demo_svg.py checks its settings with it too."""
    if not profiles:
        raise ValueError("tick at least one ready profile")
    levels = parse_levels(fields["levels"])
    requests = fmt.parse_positive(fields["requests"], "requests per level", allow_empty=True)
    wave = one_wave_problem(requests, levels)
    if wave is not None:
        raise ValueError(wave)
    return SweepRequest(
        profiles=tuple(profiles),
        levels=levels,
        requests_per_level=requests,
        input_len=(fmt.parse_positive(fields["input_len"], "input length") or 1) if "input_len" in fields else None,
        output_len=fmt.parse_positive(fields["output_len"], "output length") or 1,
    )


class SweepFormScreen(ModalScreen["SweepRequest | None"]):
    """Pick ready profiles and the workload; fields start from the config's `[sweep]` table."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, ready: Sequence[str], checked: Sequence[str], defaults: SweepDefaults) -> None:
        super().__init__()
        self.ready = list(ready)
        self.checked = set(checked)
        self.defaults = defaults

    def compose(self) -> ComposeResult:
        d = self.defaults
        # Compact widgets (one row each) so the whole form fits an 80×24 terminal.
        with Vertical(classes="dialog", id="sweep-form"):
            yield Label("[b]Sweep[/b]: output tok/s vs concurrency, profiles in turn")
            with Horizontal(classes="row"):
                for name in self.ready:
                    yield Checkbox(name, value=name in self.checked, name=name, compact=True)
            fields = sweep_form_fields(d)
            for widget_id, value in fields.items():
                label = _SWEEP_FIELD_LABELS[widget_id]
                with Horizontal(classes="row"):
                    yield Label(label, classes="field-label")
                    yield Input(value, id=widget_id, compact=True,
                                placeholder=self._requests_hint() if widget_id == "requests" else "")
            if not has_set_length(d.dataset):
                with Horizontal(classes="row"):
                    yield Label("prompts", classes="field-label")
                    yield Label(f"{d.dataset}, sent with their own lengths", id="prompts",
                                markup=False)
            yield Static("", id="form-error")
            with Horizontal(classes="buttons"):
                yield Button("Start", id="start", variant="primary", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def _requests_hint(self) -> str:
        """What an empty requests field means: [sweep]'s duration per level, else whole waves of C."""
        d = self.defaults
        return f"empty: {d.duration_s:g} s per level" if d.duration_s else "4×C, at least 16"

    def on_mount(self) -> None:
        self.query_one("#start", Button).focus()

    def _value(self, widget_id: str) -> str:
        return self.query_one(f"#{widget_id}", Input).value

    def _request(self) -> SweepRequest:
        return sweep_request(tuple(cb.name or "" for cb in self.query(Checkbox) if cb.value),
                             {widget_id: self._value(widget_id) for widget_id in sweep_form_fields(self.defaults)},
                             self.defaults)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
            return
        self._submit()

    def on_input_submitted(self) -> None:
        self._submit()

    def _submit(self) -> None:
        try:
            request = self._request()
        except ValueError as exc:
            self.query_one("#form-error", Static).update(error_text(str(exc)))
            return
        self.dismiss(request)

    def action_cancel(self) -> None:
        self.dismiss(None)


class OverlayScreen(ModalScreen["Path | None"]):
    """Ask for a result file (JSONL written by `specmon sweep`) to draw on the chart.

    The file is read while the dialog is open: any problem (no such file, not a result file) is shown in the
    dialog, which stays open with the path for correcting; it closes only once the file is on the chart.
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, load: Callable[[Path], Awaitable[object]], start: str = "") -> None:
        super().__init__()
        self.load = load
        self.start = start

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Result file to overlay: specmon, vLLM, SGLang or guidellm (enter loads, esc cancels)")
            yield Input(self.start, id="overlay-path", placeholder="results/….jsonl", compact=True)
            yield Static("", id="form-error")

    def _error(self, message: str) -> None:
        self.query_one("#form-error", Static).update(error_text(message))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if not text:
            self._error("type the path of a result file")
            return
        path = Path(text).expanduser()
        if not path.exists():   # a directory is a sweep of vLLM result files
            self._error(f"{path.name}: no such file")
            return
        self._error("")
        self._read(path)

    @work(exclusive=True, group="overlay-read", exit_on_error=False)
    async def _read(self, path: Path) -> None:
        try:
            await self.load(path)
        except Exception as exc:  # the dialog stays for a correction; the path is in the input already
            self._error(str(exc).replace(str(path), path.name))
            self.query_one("#overlay-path", Input).focus()
            return
        self.dismiss(path)

    def action_cancel(self) -> None:
        self.dismiss(None)


@dataclass(frozen=True)
class ExperimentRequest:
    """Which experiment to run, and whether to continue its newest unfinished run."""

    name: str
    resume: bool


class ExperimentScreen(ModalScreen["ExperimentRequest | None"]):
    """Pick an `[experiments.NAME]` to run (or resume); enter starts it, esc cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, experiments: Sequence[ExperimentSpec], unfinished: Collection[str] = ()) -> None:
        super().__init__()
        self.experiments = list(experiments)
        self.unfinished = set(unfinished)   # the experiments with an unfinished run: only those can be resumed

    def compose(self) -> ComposeResult:
        options = []
        for spec in self.experiments:
            what = (f"{' vs '.join(spec.profiles)}: {len(spec.sweep.levels)} levels × {spec.repeats} repeats")
            options.append(Option(f"run {spec.name} ({what})", id=f"run:{spec.name}"))
            if spec.name in self.unfinished:
                options.append(Option(f"resume {spec.name} (continue its last unfinished run)",
                                      id=f"resume:{spec.name}"))
        with Vertical(classes="dialog"):
            yield Label("Experiment: launches each profile in turn, sweeps it, stops it "
                        "(servers holding those ports are stopped first)", id="experiment-title")
            yield OptionList(*options, id="experiment-list")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        verb, _, name = (event.option.id or "").partition(":")
        self.dismiss(ExperimentRequest(name, resume=verb == "resume"))

    def action_cancel(self) -> None:
        self.dismiss(None)
