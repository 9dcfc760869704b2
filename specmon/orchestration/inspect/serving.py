"""The serving view: every READY run's `/metrics`, read at its profile's `metrics_interval_s` (1 s by default)
through the host's existing transport (over SSH: a direct-tcpip channel of the one connection to that host, kept
alive between reads), turned into figures, history and alerts (`specmon.model.server.serving`).

A front end hands `track` each RunView it sees; reading starts when a run is READY and stops when it is not. Each
read that changes something reaches `on_update` as a ServingUpdate. An alert that appears is also passed to the
profile's `notify_cmd` (state `alert`). A server whose `/metrics` answers anything but 200 before it ever answered
(SGLang without `--enable-metrics`) says so once and is not asked again.

`read_fleet` reads every READY run once (two reads, `interval` apart: rates need two), hosts at once and each host's
runs `connections.LANES_PER_HOST` at a time, for `specmon metrics --all`; a run that could not be read has its one-line
reason instead of figures.

A read that fails while the server is ending or gone (stopped, killed, its job's time limit) raises no alert: the
run's process is asked first (`server_ending`). A read whose answer could not be taken in (a fault of ours) is shown
as the view's state and reading goes on: the reader never ends but by `track` or `close`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from specmon.model.config import Profile
from specmon.model.logs.clean import one_line
from specmon.model.runs.runstatus import RunStatus
from specmon.model.server.serving import (
    FAMILIES,
    ServingFigures,
    ServingHistory,
    ServingUpdate,
    Thresholds,
    read_sample,
    update_of,
)
from specmon.orchestration.runs.connections import per_host
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.reconciler import process_ended
from specmon.orchestration.runs.view import RunView
from specmon.orchestration.runs.watcher import run_notify
from specmon.sources import timelimit
from specmon.sources.relayread import metrics_scraper
from specmon.sources.scrape import MetricsScraper
from specmon.sources.slurm import SlurmHost
from specmon.sources.transport import until_tick

PARSE_APART = 256 * 1024   # an answer this large (ten times a real one) is parsed in a worker thread, off the UI's loop
ENDING_GRACE_S = 3.0       # a process whose /metrics went quiet and that ends within this is ending, not stuck


def no_metrics_note(status: int) -> str:
    return f"no /metrics (HTTP {status}); SGLang serves it only with --enable-metrics"


async def read_once(scraper: MetricsScraper, history: ServingHistory) -> tuple[str | None, float]:
    """One read into `history`, as of when it was answered; returns the note when /metrics is not served at all (before
    any answer), and that time."""
    result, text = await scraper.read()
    at = time.monotonic()
    if text is not None:
        history.add(read_sample(text, at) if len(text) < PARSE_APART else await asyncio.to_thread(read_sample, text, at))
        return None, at
    if result.status is not None and not history.answered:
        return no_metrics_note(result.status), at
    history.failed(at, result.error or f"HTTP {result.status}")
    return None, at


def scraper_of(manager: RunManager, view: RunView, interval: float, standing: bool = False) -> MetricsScraper:
    """The reader of a run's /metrics where its host reaches the server (its loopback, or a Slurm job's node): only
    the lines `read_sample` parses are sent over an SSH host's link. `standing`: read every `interval` from now on
    (over SSH the host's relay then reads on its own clock, `relayread`)."""
    return metrics_scraper(manager.ops(view.host).transport, view.port, max(2.0, interval * 2),
                           view.server_addr or "127.0.0.1", keep=FAMILIES, period_s=interval if standing else None)


async def server_ending(manager: RunManager, run_id: str, grace_s: float = ENDING_GRACE_S) -> bool:
    """Whether a run whose /metrics stopped answering is ending or gone: a stop was asked, it is over, its process
    ends within `grace_s` (killed, shutting down), or its Slurm job is near its time limit or no longer running.
    False: it still runs (stuck, frozen), or that cannot be known."""
    try:
        record = manager.index.find(run_id)
    except Exception:   # its record is gone: so is the run
        return True
    if record.stop_requested or record.terminal:
        return True
    try:
        if record.slurm_job is not None:   # its process is on the job's node: the job says (at its limit, ending)
            job = await SlurmHost(manager.ops(record.host).transport).job(record.slurm_job)
            return job is None or not job.running or job.ending
        if record.pid is None:   # no process of its own to ask (a multi-node run's overall record)
            return False
        await timelimit.wait_for(process_ended(manager.ops(record.host), record), grace_s)
    except asyncio.TimeoutError:
        return False
    except Exception:   # the host cannot be asked (a dropped link): not known to be ending
        return False
    return True


def history_for(profile: Profile | None) -> ServingHistory:
    """An empty history with the profile's alert thresholds (the defaults for a run of another profiles file)."""
    return ServingHistory(Thresholds(profile.alert_waiting_s, profile.alert_kv_pct) if profile else Thresholds())


@dataclass(frozen=True)
class FleetReading:
    """One READY run's serving view read now, or `error`: why it could not be read (its figures then absent)."""

    view: RunView
    update: ServingUpdate
    error: str | None = None


async def read_fleet(manager: RunManager, interval: float) -> list[FleetReading]:
    """Every READY run known here (of every profiles file), checked now, its /metrics read twice `interval` apart;
    in the order `refresh` lists them. A run whose host did not answer the check is not read (its reason)."""
    views = [v for v in await manager.refresh(all_configs=True) if v.state == RunStatus.READY]
    histories = {v.run_id: history_for(manager.config.profiles.get(v.profile)) for v in views}
    scrapers = {v.run_id: scraper_of(manager, v, interval) for v in views}
    errors = {v.run_id: f"not read: {manager.unanswered[v.host]}" for v in views if v.host in manager.unanswered}
    first: dict[str, float] = {}

    async def read(view: RunView) -> None:
        run_id = view.run_id
        if run_id in errors:
            return
        if run_id in first:   # the second read: `interval` after this run's first
            await asyncio.sleep(max(0.0, first[run_id] + interval - time.monotonic()))
        first.setdefault(run_id, time.monotonic())
        try:
            note, _ = await read_once(scrapers[run_id], histories[run_id])
        except Exception as exc:   # this run's reason; the others are read on
            note = f"{type(exc).__name__}: {exc}"
        failing = histories[run_id].failing
        if note is not None or failing is not None:
            errors[run_id] = one_line(note or f"/metrics did not answer: {failing}", 300)

    try:
        for _ in range(2):
            await per_host(views, lambda v: (v.host,), read)
    finally:
        await asyncio.gather(*(scraper.aclose() for scraper in scrapers.values()), return_exceptions=True)
    now = time.monotonic()
    return [FleetReading(v, ServingUpdate(v.profile, v.run_id, ServingFigures()), errors[v.run_id])
            if v.run_id in errors else FleetReading(v, update_of(v.profile, v.run_id, histories[v.run_id], now))
            for v in views]


class ServingWatcher:
    """Reads /metrics of the READY runs it is shown. Close with `close()`."""

    def __init__(self, manager: RunManager, on_update: Callable[[ServingUpdate], None]) -> None:
        self.manager = manager
        self.on_update = on_update
        self._tasks: dict[str, tuple[str, asyncio.Task[None]]] = {}   # profile -> (run id, its reader)
        self._notices: set[asyncio.Task[None]] = set()

    def track(self, view: RunView) -> None:
        """Start reading a READY run's /metrics, or stop reading a run that is not READY any more."""
        current = self._tasks.get(view.profile)
        if view.state == RunStatus.READY and view.node_rank in (None, 0):
            if current is not None and current[0] == view.run_id:
                return
            if current is not None:
                current[1].cancel()
            task = asyncio.create_task(self._read(view), name=f"serving-{view.profile}")
            self._tasks[view.profile] = (view.run_id, task)
        elif current is not None and current[0] == view.run_id:
            current[1].cancel()
            del self._tasks[view.profile]

    async def close(self) -> None:
        tasks = [t for _, t in self._tasks.values()] + list(self._notices)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    def _profile(self, name: str) -> Profile | None:
        return self.manager.config.profiles.get(name)

    async def _read(self, view: RunView) -> None:
        profile = self._profile(view.profile)
        interval = profile.metrics_interval_s if profile else 1.0
        history = history_for(profile)
        scraper = scraper_of(self.manager, view, interval, standing=True)
        shown: set[str] = set()
        last: ServingUpdate | None = None
        try:
            while True:
                note = await self._read_one(view, scraper, history)
                alerts = history.alerts(time.monotonic())
                raised = tuple(a for a in alerts if _kind(a) not in shown)
                shown = {_kind(a) for a in alerts}
                update = update_of(view.profile, view.run_id, history, time.monotonic(), raised, note)
                if last is None or _visible(update) != _visible(last):   # an idle server's reads change nothing
                    self.on_update(update)
                    last = update
                for alert in raised:
                    self._notify(view, alert)
                if note is not None:
                    return
                # On a shared clock: every run's read (and the access-log line it causes) lands in the same moment,
                # so the app repaints the cards once for all of them instead of once for each. A paced reader's
                # next read waits for its host's clock (after a failed read it is not paced); the others wait for
                # the same tick of the wall clock here (`until_tick`), which the hosts share.
                if not scraper.paced:
                    await asyncio.sleep(until_tick(interval, 0.1))
        finally:
            await scraper.aclose()

    async def _read_one(self, view: RunView, scraper: MetricsScraper, history: ServingHistory) -> str | None:
        """`read_once`, with a failure of the server's told apart from its end, and a fault of ours kept as state."""
        try:
            note, at = await read_once(scraper, history)
            if history.failing is not None and not history.ended and history.failed_at == at \
                    and await server_ending(self.manager, view.run_id):
                history.end()
            return note
        except asyncio.CancelledError:
            raise
        except Exception as exc:   # the reader must outlive any one answer, or its figures would stand still unsaid
            history.broken = f"{type(exc).__name__}: {exc}"[:200]
            await scraper.aclose()
            return None

    def _notify(self, view: RunView, alert: str) -> None:
        profile = self._profile(view.profile)
        if profile is None or not profile.notify_cmd:
            return
        try:
            record = self.manager.index.find(view.run_id)
        except Exception:   # the run's record is gone: nothing to say it with
            return
        task = run_notify(profile.notify_cmd, record, "alert", alert)
        self._notices.add(task)
        task.add_done_callback(self._notices.discard)


def _visible(update: ServingUpdate) -> tuple[object, ...]:
    """What a card shows of an update: its figures, alerts, note, sparklines and the values it ignored."""
    return update.figures, update.alerts, update.note, update.raised, update.history, update.ignored


def _kind(alert: str) -> str:
    """An alert's kind (its wording holds figures that change with every read)."""
    for kind in ("serving view failed", "/metrics", "waiting", "KV", "preemptions"):
        if kind in alert:
            return kind
    return alert
