"""The Servers pane with a fleet of 64 runs on 16 hosts (ui_states.FLEET_ROWS, fed without an engine): the summary
line, failed and stalled runs at the top, and the keys walking the cards with the selection kept in view."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from paths import FIXTURES
from textual._compositor import Compositor
from textual.geometry import Region, Size
from textual.pilot import Pilot
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget
from ui_states import FLEET_PROFILES, FLEET_ROWS, fed_fleet_app, fleet_gpu_board, screen_text

from specmon.model.server import serving
from specmon.model.server.serving import ServingFigures, ServingUpdate
from specmon.ui import app as app_module
from specmon.ui import state as screen
from specmon.ui.app import SpecmonApp
from specmon.ui.gpuenv import PAINT_S, RIDE_S, GpuEnvPane, GpusUpdated
from specmon.ui.messages import ServingChanged
from specmon.ui.servers import RunCard, SelectedRun, ServersPane
from specmon.ui.throttle import Throttle

pytestmark = pytest.mark.slow


def _count_layouts(monkeypatch: pytest.MonkeyPatch) -> list[None]:
    """From now on, one item in the list returned for each layout of the screen."""
    layouts: list[None] = []
    reflow = Compositor.reflow

    def counted(self: Compositor, parent: Widget, size: Size) -> object:
        layouts.append(None)
        return reflow(self, parent, size)

    monkeypatch.setattr(Compositor, "reflow", counted)
    return layouts


async def _settle(pilot: Pilot) -> None:
    for _ in range(2):
        await pilot.pause()
        pilot.app.flush()  # type: ignore[attr-defined]
        await pilot.pause()


async def test_an_80x24_fleet_pane_opens_with_its_summary_and_the_runs_that_failed_or_stalled(tmp_path: Path) -> None:
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        text = screen_text(app)
        # On the first screen, without scrolling: the counts, then the failed run and the first stalled one (in
        # the profiles file's order they are the 38th and 42nd of 64 cards).
        assert "58 ready·3 loading·1 failed·2 stalled" in text
        assert "llama-37 FAILED" in text and "llama-41 STALLED" in text, text
        assert app.query_one(ServersPane).order[:3] == ["llama-37", "llama-41", "llama-50"]


async def test_walking_64_cards_with_j_and_k_keeps_the_selected_card_on_screen(tmp_path: Path) -> None:
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        pane = app.query_one(ServersPane)
        for presses, key in ((20, "j"), (45, "j"), (30, "k")):
            for _ in range(presses):
                await pilot.press(key)
            await _settle(pilot)
            card = next(c for c in app.query(RunCard) if c.profile == app.state.selected)
            visible = pane.scrollable_content_region
            assert visible.y <= card.region.y and card.region.bottom <= visible.bottom, \
                f"{app.state.selected} at rows {card.region.y}-{card.region.bottom}, the pane shows {visible.y}-{visible.bottom}"
            assert f"{app.state.selected} " in screen_text(app)
        assert app.state.selected in FLEET_PROFILES


async def test_serving_figures_redraw_only_the_cards_in_view_and_the_rest_catch_up_when_scrolled_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: every ready card's figures change with each /metrics read (1 Hz). Drawing the ~55 cards out of
    view made Textual lay the whole screen out again for each read (its map of every widget is rebuilt once any
    off-screen widget changed): at 128 runs a tenth of a core idle and key presses 100 ms+ slower. Cards out of
    view now keep their figures until they are scrolled to; then they show the latest."""
    full_layouts = 0
    arrange = Compositor._arrange_root

    def counted(self: Compositor, root: Widget, size: Size, visible_only: bool = True) -> object:
        nonlocal full_layouts
        full_layouts += not visible_only
        return arrange(self, root, size, visible_only=visible_only)

    monkeypatch.setattr(screen, "FLEET_FIGURES_S", 0.0)   # each read's figures shown with it (not what this tests)
    app = fed_fleet_app(tmp_path)
    ready = [row for row in FLEET_ROWS if row.state == "ready"]
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        for second in range(1, 5):   # four reads of every ready run, each with new figures
            if second == 2:   # the first read gave the cards in view their lines: a new layout, once
                monkeypatch.setattr(Compositor, "_arrange_root", counted)
            for row in ready:
                figures = ServingFigures(running=second, waiting=0, kv_pct=10.0 * second, tok_s=100.0 * second)
                app.post_message(ServingChanged(ServingUpdate(row.profile, str(row.run_id), figures)))
            await _settle(pilot)
        assert full_layouts == 0, f"{full_layouts} layouts of every widget for the last 3 reads"
        assert screen_text(app).count("400 tok/s") > 1   # the cards in view are current, not only the selected one
        for _ in range(2):   # the cards scrolled to grow by their figures' lines: the end moves once
            app.query_one(ServersPane).scroll_end(animate=False, immediate=True)
            await _settle(pilot)
        text = screen_text(app)
        assert "llama-63 READY" in text and "400 tok/s" in text and "100 tok/s" not in text, text


def _reads(tok_s: float, alerted: str | None = None) -> ServingChanged:
    """One /metrics read of every ready run of the fleet, the run `alerted` raising an alert with it."""
    figures = ServingFigures(running=1, waiting=0, kv_pct=10.0, tok_s=tok_s)
    alert = ("KV cache 97% full",)
    return ServingChanged(*(ServingUpdate(row.profile, str(row.run_id), figures, alerts=alert, raised=alert)
                            if row.profile == alerted else ServingUpdate(row.profile, str(row.run_id), figures)
                            for row in FLEET_ROWS if row.state == "ready"))


def _card_text(app: SpecmonApp, profile: str) -> str:
    return next(card for card in app.query(RunCard) if card.profile == profile).render().plain


async def test_a_fleets_cards_hold_new_figures_but_an_alert_and_a_card_just_selected_show_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: each /metrics read (every run, every second) changed the cards in view, and a frame every second was
    half of the idle app's drawing at 64 runs. A fleet's cards now show newer figures every FLEET_FIGURES_S (here a
    minute, so a slow box cannot reach it), as its GPU view does; a read that raised an alert shows at once, and
    a card just selected shows its latest figures."""
    monkeypatch.setattr(screen, "FLEET_FIGURES_S", 60.0)
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        app.post_message(_reads(111))   # the first figures: shown at once
        await _settle(pilot)
        app.post_message(_reads(222))   # newer figures, the first since the app started: shown at once
        await _settle(pilot)
        app.post_message(_reads(333))   # within the minute: held
        await _settle(pilot)
        assert app.state.selected == "llama-00"
        assert "222 tok/s" in _card_text(app, "llama-00") and "222 tok/s" in _card_text(app, "llama-02")
        app.post_message(_reads(444, alerted="llama-01"))   # an alert is shown at once, with its run's figures
        await _settle(pilot)
        assert "444 tok/s" in _card_text(app, "llama-01") and "222 tok/s" in _card_text(app, "llama-02")
        await pilot.press("j", "j")   # llama-02 selected: its latest figures
        await _settle(pilot)
        assert app.state.selected == "llama-02" and "444 tok/s" in _card_text(app, "llama-02")
        assert "222 tok/s" in _card_text(app, "llama-03"), _card_text(app, "llama-03")


async def test_a_fleets_held_figures_are_shown_when_their_interval_has_passed(tmp_path: Path) -> None:
    """The held figures need no further read to be shown: the release comes FLEET_FIGURES_S after the last one."""
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        for tok_s in (111, 222, 333):
            app.post_message(_reads(tok_s))
            await _settle(pilot)
        deadline = time.monotonic() + 10 * screen.FLEET_FIGURES_S
        while "333 tok/s" not in _card_text(app, "llama-02") and time.monotonic() < deadline:
            await pilot.pause(0.1)
        assert "333 tok/s" in _card_text(app, "llama-02"), _card_text(app, "llama-02")


async def test_filtering_64_runs_by_a_host_shows_only_its_cards_and_the_keys_walk_only_those(tmp_path: Path) -> None:
    """Issue 37: `F` filters the cards as you type. The summary keeps the whole fleet's counts (a filter never hides
    a failure), j/k walk only the cards shown, and esc shows every card again."""
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        await pilot.press("F", *"gpu06", "enter")
        await _settle(pilot)
        pane = app.query_one(ServersPane)
        on_gpu06 = [row.profile for row in FLEET_ROWS if row.host == "gpu06"]   # llama-05 (loading), -21, -37 (failed), -53
        shown = [card.profile for card in app.query(RunCard) if card.display]
        assert sorted(shown) == sorted(on_gpu06) and pane.order[0] == "llama-37", (shown, pane.order)
        text = screen_text(app)
        assert "58 ready·3 loading·1 failed·2 stalled" in text and "4 of 64 shown · filter: gpu06" in text, text
        assert app.state.selected in on_gpu06   # the selected llama-00 is filtered out: the first card shown takes over
        walked = []
        for _ in range(5):
            await pilot.press("j")
            walked.append(app.state.selected)
        assert set(walked) == set(on_gpu06), walked
        await pilot.press("k")
        assert app.state.selected in on_gpu06
        await pilot.press("escape")
        await _settle(pilot)
        assert all(card.display for card in app.query(RunCard)) and pane.order[:3] == ["llama-37", "llama-41", "llama-50"]
        assert "shown" not in screen_text(app)


def _pane_rows(app: SpecmonApp) -> list[str]:
    """The Servers pane's rows as the terminal shows them, inside its border."""
    region = app.query_one(ServersPane).region
    lines = screen_text(app).splitlines()[region.y + 1:region.bottom - 1]
    return [line[region.x + 1:region.right - 1].rstrip(" │") for line in lines]


async def test_at_80x24_j_moves_the_highlight_over_one_line_cards_and_the_pane_foot_shows_that_run_in_full(
        tmp_path: Path) -> None:
    """Issue 37: at 64 runs on 80x24 each card took 3 rows and more, so the pane showed two or three of them; READY
    cards shrank to their head line, but the selected one grew to all of its lines, so each `j` changed two cards'
    heights and laid out every card of the screen (25-40 ms at 64 runs, 200 ms key p99). Every healthy READY card
    is now its head line with its tok/s, the selected one highlighted; the selected run shows in full at the foot
    of the pane; those that need a look (failed, stalled, loading) keep every line. A `j` changes no card's height."""
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        for row in FLEET_ROWS:
            figures = ServingFigures(running=2, waiting=0, kv_pct=30.0, tok_s=812.0)
            app.post_message(ServingChanged(ServingUpdate(row.profile, str(row.run_id), figures)))
        await pilot.press(*"jjjjjjjjjjjj", *"kkkk")   # llama-00 -> llama-12 -> llama-08, at the top of the pane
        await _settle(pilot)
        cards = {card.profile: card for card in app.query(RunCard)}
        heights = {profile: card.outer_size.height for profile, card in cards.items()}
        assert heights["llama-37"] >= 5 and heights["llama-41"] >= 3   # failed, stalled: all their lines
        rows = _pane_rows(app)
        ready_shown = [p for p in FLEET_PROFILES if any(f"{p} READY" in row for row in rows)]
        assert len(ready_shown) >= 5, rows
        for selected, after in (("llama-08", "llama-09"), ("llama-09", "llama-10")):
            assert app.state.selected == selected and cards[selected].has_class("-selected")
            assert f"{selected} READY gpu{int(selected[-2:]) + 1:02d}:30000 812 tok/s" in "\n".join(rows), rows
            assert f"─{selected} READY gpu{int(selected[-2:]) + 1:02d}:30000─" in rows[-5], rows   # the foot's rule
            assert rows[-4].endswith("8/8 load 0:41 log <10s ago") and rows[-2].endswith("run 2 wait 0 KV 30% 812 tok/s"), rows
            await pilot.press("j")
            await _settle(pilot)
            assert app.state.selected == after and not cards[selected].has_class("-selected")
            assert {p: card.outer_size.height for p, card in cards.items()} == heights
            rows = _pane_rows(app)


async def test_sparklines_are_worked_out_only_for_the_cards_on_screen(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: each /metrics read (1 Hz, every ready run) worked out the card's four sparklines from its last two
    minutes of reads, for the ~50 cards out of view as well (py-spy: update_of/sparks 7.5 % of the idle app at 64
    runs). A read's sparklines are now worked out when a card draws them: the cards on screen, and the others when
    scrolled to."""
    worked = 0
    slices = serving.spark_slices

    def counted(*args: object, **kwargs: object) -> dict[str, tuple[float, ...]]:
        nonlocal worked
        worked += 1
        return slices(*args, **kwargs)   # type: ignore[arg-type]

    monkeypatch.setattr(serving, "spark_slices", counted)
    text = (FIXTURES / "metrics" / "sglang-llama31-8b-production-metrics.prom").read_text()
    app = fed_fleet_app(tmp_path)
    ready = [row for row in FLEET_ROWS if row.state == "ready"]
    histories = {row.profile: serving.ServingHistory() for row in ready}
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        reads = 5
        for second in range(reads):   # what ServingWatcher hands the app for each read of each ready run
            for row in ready:
                history = histories[row.profile]
                history.add(serving.read_sample(text, float(second)))
                app.post_message(ServingChanged(serving.update_of(row.profile, str(row.run_id), history, second)))
            await _settle(pilot)
        pane = app.query_one(ServersPane)
        on_screen = len(pane._in_view())
        assert worked <= reads * on_screen, \
            f"sparklines worked out {worked} times for {reads} reads of {len(ready)} runs, {on_screen} cards on screen"
        assert "▁" in screen_text(app) or "█" in screen_text(app)   # the cards on screen draw theirs
        for _ in range(2):
            pane.scroll_end(animate=False, immediate=True)
            await _settle(pilot)
        assert "llama-63 READY" in screen_text(app) and "█" in screen_text(app), screen_text(app)


def _in_pane(app: SpecmonApp, widget: Widget) -> bool:
    visible = app.query_one(ServersPane).scrollable_content_region
    return visible.y <= widget.region.y and widget.region.bottom <= visible.bottom


async def test_g_groups_64_cards_by_host_under_headers_that_count_each_host_and_j_walks_across_them(
        tmp_path: Path) -> None:
    """Issue 37: G groups the cards by host (then by profile, then not at all). Each host's header counts its runs;
    hosts with a failed or stalled run come first and those runs first within their host; the summary still counts
    the whole fleet; j walks every card across the groups, the selection always on screen; at 80x24."""
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        await pilot.press("G")
        await _settle(pilot)
        pane = app.query_one(ServersPane)
        headers = [h for h in pane.query(".group-header") if h.display]
        assert [str(h.render()) for h in headers[:4]] == [
            "gpu06 · 2 ready · 1 loading · 1 failed", "gpu10 · 3 ready · 1 stalled", "gpu03 · 3 ready · 1 stalled", "gpu01 · 4 ready"]
        assert len(headers) == 16 and "Servers · by host" in screen_text(app)
        # Each host's cards together, its trouble first: gpu06 is llama-05, -21, -37 (failed), -53.
        assert pane.order[:4] == ["llama-37", "llama-05", "llama-21", "llama-53"], pane.order
        assert pane.order[4] == "llama-41" and sorted(pane.order) == sorted(FLEET_PROFILES)
        assert app.state.selected == "llama-00"
        card = next(c for c in app.query(RunCard) if c.profile == "llama-00")
        assert _in_pane(app, card) and "gpu01 · 4 ready" in screen_text(app), screen_text(app)
        walked = [app.state.selected]
        for _ in range(len(FLEET_PROFILES) - 1):
            await pilot.press("j")
            walked.append(app.state.selected)
            if len(walked) % 9 == 0:   # now and then, look: the selected card is on screen
                await _settle(pilot)
                card = next(c for c in app.query(RunCard) if c.profile == app.state.selected)
                assert _in_pane(app, card), f"{app.state.selected} at {card.region}, the pane {pane.scrollable_content_region}"
        start = pane.order.index("llama-00")
        assert walked == (pane.order[start:] + pane.order[:start]), walked   # every card once, in the groups' order
        assert "58 ready·3 loading·1 failed·2 stalled" in pane.query_one("#fleet-summary").render().plain  # type: ignore[attr-defined]
        await pilot.press("G")   # by profile: one family, llama, with the fleet's counts
        await _settle(pilot)
        shown = [str(h.render()) for h in pane.query(".group-header") if h.display]
        assert shown == ["llama · 58 ready·3 loading·1 failed·2 stalled"] or shown == [
            "llama · 58 ready · 3 loading · 1 failed · 2 stalled"], shown
        await pilot.press("G")   # not grouped: no header, the fleet's order again
        await _settle(pilot)
        assert not [h for h in pane.query(".group-header") if h.display]
        assert pane.order[:3] == ["llama-37", "llama-41", "llama-50"]


async def test_grouped_and_filtered_the_cards_shown_keep_their_groups(tmp_path: Path) -> None:
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        await pilot.press("G", "F", *"stalled", "enter")
        await _settle(pilot)
        pane = app.query_one(ServersPane)
        assert [str(h.render()) for h in pane.query(".group-header") if h.display] == [
            "gpu10 · 1 stalled", "gpu03 · 1 stalled"]
        assert pane.order == ["llama-41", "llama-50"] and app.state.selected == "llama-41"


async def test_the_gpu_view_pages_through_all_16_hosts_of_64_runs_at_80x24(tmp_path: Path) -> None:
    """Issue 37: the GPU view showed only the selected card's host; reaching another host's GPUs meant finding one of
    its cards among 64. `]` and `[` select the first card of the next/previous host (by name) and the view, full
    screen at 80x24, says which host of how many it shows; every host's 8 GPUs are reached."""
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        await pilot.press("e")   # below 150 columns: the GPU view full screen
        seen = []
        for _ in range(16):
            await pilot.press("right_square_bracket")
            host = app.state.rows[app.state.selected].host
            board, known = fleet_gpu_board(host)   # as the engine's probe of that host would post it
            app.post_message(GpusUpdated(host, board, known))
            await _settle(pilot)
            text = screen_text(app)
            page = next(line for line in text.splitlines() if "GPUs" in line)
            seen.append(host)
            assert f"{host} · 8 GPUs · host {int(host[3:])} of 16 · [ ] pages" in page, text
            assert all(f"{g} H200 " in text for g in range(8)), text   # all 8 GPUs on the screen
            assert all(known[r] in text for r in known), text         # and the host's four runs holding them
        assert seen == [*(f"gpu{h:02d}" for h in range(2, 17)), "gpu01"]   # from gpu01's llama-00: each host once
        await pilot.press("left_square_bracket")
        assert app.state.rows[app.state.selected].host == "gpu16"


async def test_a_read_whose_figures_change_length_repaints_the_cards_without_laying_out_the_screen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: every /metrics read (1 Hz, each ready run) gave the cards in view figures of another length (812 ->
    1203 tok/s), and a card whose text changed length asked for a layout of every widget of the screen (at 64 runs
    ~40 ms a time, in the way of the next key). A line that still fits the card cannot change its height: it is
    repainted in place."""
    reflows: list[None] = []
    monkeypatch.setattr(screen, "FLEET_FIGURES_S", 0.0)   # each read's figures shown with it (not what this tests)
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        for second, tok_s in enumerate((8.0, 95.0, 1203.0, 7.0, 88000.0)):
            if second == 1:   # the first read gave the cards their figures: a layout, once
                reflows = _count_layouts(monkeypatch)
            for row in FLEET_ROWS:
                figures = ServingFigures(running=second, waiting=0, kv_pct=10.0 * second, tok_s=tok_s)
                app.post_message(ServingChanged(ServingUpdate(row.profile, str(row.run_id), figures)))
            await _settle(pilot)
        assert "llama-01 READY gpu02:30000 88000 tok/s" in screen_text(app), screen_text(app)
        assert len(reflows) == 0, f"{len(reflows)} layouts of the screen for 4 reads that changed only the figures' lengths"


async def test_j_restyles_only_the_two_cards_whose_selection_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: a card was a head line, a body and (once loading) a progress bar of four widgets, all restyled with
    the card at every selection change (2 cards x 3 to 7 widgets a `j`). A card is now one widget that draws its
    lines: a `j` restyles the card it leaves and the card it selects, nothing else."""
    from textual.css.stylesheet import Stylesheet

    restyled: list[str] = []
    apply = Stylesheet.apply

    def counted(self: Stylesheet, node: object, *args: object, **kwargs: object) -> None:
        restyled.append(type(node).__name__)
        apply(self, node, *args, **kwargs)  # type: ignore[arg-type]

    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        monkeypatch.setattr(Stylesheet, "apply", counted)
        for _ in range(4):   # llama-00 -> llama-04, all READY
            await pilot.press("j")
            await _settle(pilot)
        assert app.state.selected == "llama-04"
        assert restyled == ["RunCard"] * 4 * 2, f"{len(restyled)} widgets restyled for 4 j: {restyled}"


async def test_j_lays_nothing_out_in_a_fleet_that_does_not_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: at 80x24 the selected card grew from its head line to all of its lines, so each `j` laid the
    screen out again over every card (~25-40 ms of a key at 64 runs, more when it met a /metrics repaint). The
    selected card is one line now and its run shows in full at the pane's foot: a `j` changes no widget's height
    and lays nothing out."""
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        layouts = _count_layouts(monkeypatch)
        for _ in range(4):   # llama-00 -> llama-04
            await pilot.press("j")
            await _settle(pilot)
        assert app.state.selected == "llama-04" and "llama-04 READY" in _pane_rows(app)[-5]
        assert app.query_one(ServersPane).order == [card.profile for card in app.query(RunCard)]   # shown, in order
        assert len(layouts) == 0, f"{len(layouts)} layouts of the screen for 4 j"


async def test_j_after_j_down_the_fleet_lays_the_screen_out_once_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: where the card that `j` selects grows by more lines than the last one shrinks (or less), the
    Servers pane's scrollable height changes, and Textual laid the whole screen out a second time for that (34
    layouts for 30 `j` at 160x48): the layout that changed it had already placed every card."""
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        layouts = _count_layouts(monkeypatch)
        for _ in range(30):
            await pilot.press("j")
            await _settle(pilot)
        assert app.state.selected == "llama-30"
        assert len(layouts) <= 30, f"{len(layouts)} layouts of the screen for 30 j"
        pane = app.query_one(ServersPane)
        card = next(c for c in app.query(RunCard) if c.profile == "llama-30")
        assert pane.scrollable_content_region.contains_region(card.region)   # still scrolled into view
        # The cards' height as laid out, and the room of the selected run in full docked at the pane's foot.
        bottom = max(c.virtual_region.bottom for c in app.query(RunCard)) + app.query_one(SelectedRun).outer_size.height
        assert pane.virtual_size.height == pane.vertical_scrollbar.window_virtual_size == bottom, \
            (pane.virtual_size, pane.vertical_scrollbar.window_virtual_size, bottom)


async def test_a_read_that_changes_one_line_of_a_card_repaints_only_that_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: each /metrics read (1 Hz, every ready run) changes a run's figures line, and the whole of the
    selected run's lines (six rows and more) were repainted for it, its whole text wrapped and styled again. Only
    the row whose line changed is repainted and rendered now, and it shows the new figure."""
    repainted: list[int] = []
    rendered: list[int] = []
    set_dirty = Widget._set_dirty
    to_strips = Visual.to_strips.__func__   # type: ignore[attr-defined]

    def counted(self: Widget, *regions: Region) -> None:
        if isinstance(self, SelectedRun):
            repainted.append(sum(r.height for r in regions) if regions else self.outer_size.height)
        set_dirty(self, *regions)

    def counted_strips(cls: type[Visual], widget: Widget, *args: object, **kwargs: object) -> list[Strip]:
        strips: list[Strip] = to_strips(cls, widget, *args, **kwargs)
        if isinstance(widget, SelectedRun):
            rendered.append(len(strips))
        return strips

    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        card = app.query_one(SelectedRun)   # the selected run in full, at the foot of the pane
        row = next(r for r in FLEET_ROWS if r.profile == app.state.selected)
        for tok_s in (812.0, 1203.0):
            if tok_s == 1203.0:   # the first read gave the card its figures' lines; the next changes one of them
                monkeypatch.setattr(Widget, "_set_dirty", counted)
                monkeypatch.setattr(Visual, "to_strips", classmethod(counted_strips))
            figures = ServingFigures(running=2, waiting=0, kv_pct=30.0, tok_s=tok_s)
            app.post_message(ServingChanged(ServingUpdate(row.profile, str(row.run_id), figures)))
            await _settle(pilot)
        assert card.outer_size.height >= 6 and sum(repainted) == 1, \
            f"{sum(repainted)} rows of a {card.outer_size.height}-row card repainted for one changed line"
        assert sum(rendered) == 1, f"{sum(rendered)} rows of the card rendered for one changed line"
        assert "1203 tok/s" in screen_text(app) and "812 tok/s" not in screen_text(app), screen_text(app)


async def test_a_burst_of_reads_of_every_ready_run_repaints_the_cards_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: every ready run's /metrics is read at the same moment of a shared second and the answers come in
    over some tens of ms. The first answer repainted the cards at once and the rest a quarter second later: two
    repaints of 64 cards (and two frames) a second where one does. The repaint now waits a moment for the burst;
    the cards show every run's new figures."""
    monkeypatch.setattr(app_module, "SERVING_GATHER_S", 2.0, raising=False)   # any burst fits: no timing here
    painted: list[None] = []
    show = ServersPane.show

    def counted(self: ServersPane, *args: object, **kwargs: object) -> None:
        painted.append(None)
        show(self, *args, **kwargs)   # type: ignore[arg-type]

    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        await pilot.pause(0.5)   # the last repaint long past: the next may come at once
        monkeypatch.setattr(ServersPane, "show", counted)
        for row in FLEET_ROWS:
            figures = ServingFigures(running=2, waiting=0, kv_pct=30.0, tok_s=777.0)
            app.post_message(ServingChanged(ServingUpdate(row.profile, str(row.run_id), figures)))
        await pilot.pause(2.5)
        assert len(painted) == 1, f"{len(painted)} repaints of the cards for one read of every run"
        assert "llama-01 READY gpu02:30000 777 tok/s" in screen_text(app), screen_text(app)


async def test_while_the_cards_repaint_regularly_the_gpu_board_repaints_with_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: the GPU board repainted every 2 s on its own timer, at its own moment of the second, while every
    ready run's /metrics is read on a shared second and the cards repaint then (a fleet's, every 2 s): a frame for
    the cards and one more for the board. The board now repaints along with the cards, still about every 2 s.
    Here the reads come on the second and the GPU samples half a second later, for 8 s.

    The rule, as the pane keeps it: a repaint of the board put off (it is due PAINT_S after the last) happens with
    the first repaint of the cards from RIDE_S before its due time on, and alone only when none came by its timer
    (RIDE_S after due while the cards repaint regularly). On a busy box a repaint of the cards can come late, and
    the board then rightly repaints alone; so a lone repaint fails the test only where the cards did repaint inside
    its window, which is judged from the times the pane put it off and the cards repainted."""
    board_paints: list[tuple[float, bool]] = []   # each repaint of the board: when, and whether with the cards
    card_paints: list[float] = []                  # when the cards repainted (and offered the board a ride)
    put_off: list[tuple[float, float]] = []        # when a repaint of the board was put off, and its `late`
    cards_painting = [False]
    paint_state, paint_gpus, request = SpecmonApp._paint_state, GpuEnvPane._paint_gpus, Throttle.request

    def state(self: SpecmonApp) -> None:
        cards_painting[0] = True
        try:
            paint_state(self)
        finally:
            cards_painting[0] = False
            card_paints.append(time.monotonic())

    def gpus(self: GpuEnvPane, full: bool = False) -> None:
        board_paints.append((time.monotonic(), cards_painting[0]))
        paint_gpus(self, full)

    def requested(self: Throttle, gather: float = 0.0, late: float = 0.0) -> None:
        waiting = self._timer is not None
        request(self, gather, late)
        if isinstance(self._owner, GpuEnvPane) and not waiting and self._timer is not None:
            put_off.append((time.monotonic(), late))

    monkeypatch.setattr(SpecmonApp, "_paint_state", state)   # before the app and its panes take them
    monkeypatch.setattr(GpuEnvPane, "_paint_gpus", gpus)
    monkeypatch.setattr(Throttle, "request", requested)
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settle(pilot)
        board, known = fleet_gpu_board("gpu01")
        for second in range(8):
            if second == 2:   # from here on the cards' repaints have come every second
                board_paints.clear()
                counted_from = time.monotonic()
            for row in FLEET_ROWS:
                figures = ServingFigures(running=2, waiting=0, kv_pct=30.0, tok_s=700.0 + second)
                app.post_message(ServingChanged(ServingUpdate(row.profile, str(row.run_id), figures)))
            await pilot.pause(0.5)
            app.post_message(GpusUpdated("gpu01", board, known))
            await pilot.pause(0.5)
    counted_s = time.monotonic() - counted_from   # 6 s, more on a busy box
    assert 2 <= len(board_paints) <= counted_s / PAINT_S + 1, f"{len(board_paints)} repaints of the board in {counted_s:.1f} s"
    for at, with_cards in board_paints:
        if with_cards:
            continue
        since, late = max(p for p in put_off if p[0] <= at)   # the put-off this repaint ended
        window = (max(since, at - late - RIDE_S), at)        # due - RIDE_S (due: at - late, or earlier) .. the timer
        missed = [round(at - c, 3) for c in card_paints if window[0] <= c < window[1]]
        assert not missed, f"the board repainted alone {missed} s after the cards repainted inside its window"
