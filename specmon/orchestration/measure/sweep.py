"""The sweep runner: probes the server, starts the load-generator child, writes results as levels finish.

API for front ends (CLI and TUI)::

    spec = SweepSpec(url="http://127.0.0.1:30000", workload=Workload(levels=(1, 2, 5)), out_path=Path("r.jsonl"),
                     profile="eagle3")
    result = await run_sweep(spec, on_update=callback)   # -> SweepResult(path, meta, levels)

`on_update` is called (in the caller's event loop, never from the generator's) with:
- `SweepProgress` about 4 times a second (level, phase, requests done/target, live tok/s, TTFT p50 so far,
  tokens/chunk, in-flight, the generator's loop lag and CPU),
- `LevelResult` once per finished level, right after its line was appended (and fsynced) to `out_path`,
- `SweepNotice` for warnings (usage missing, client-bound level, failed requests, sweep stopped early).
An exception raised by `on_update` is logged and ignored: a broken view never ends a sweep.

Cancel the awaiting task (or press Ctrl-C under asyncio.run) to stop: the generator abandons the level in progress,
finished levels stay in the file, and CancelledError propagates after the child has exited. `read_results(path)`
(specmon.sources.resultfiles) reloads a file; `crossover(a, b)` (specmon.model.sweeps.compare) compares two.
The generator runs in its own process (`python -m specmon.loadgen`) in its own session, so a terminal Ctrl-C
reaches only this process, which then stops the child in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import stat
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from specmon import __version__
from specmon.errors import UserError
from specmon.loadgen.client import DEADLINE_FACTOR
from specmon.loadgen.lines import append_line
from specmon.loadgen.protocol import ChildSpec, Done, Fatal, NotJson, ProtocolError, Stopped, Warn, decode, encode
from specmon.loadgen.shards import auto_processes
from specmon.loadgen.workload import Workload
from specmon.model.config import ENV_NAME, SweepDefaults
from specmon.model.config.types import MAX_PROCESSES
from specmon.model.machine.interpreter import python_module
from specmon.model.sweeps.results import LevelResult, SweepMeta, SweepResult, summarize_server, utc_now_iso
from specmon.model.sweeps.sweepstats import ProgressPhase, SweepProgress, client_bound, falling_behind
from specmon.model.text import textfile
from specmon.model.text.numbers import counted
from specmon.model.workload.datasets import has_set_length
from specmon.sources import timelimit

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 10.0   # one read of the probe
PROBE_PHASE_S = 60.0     # the whole probe, at most (also at most the workload's request deadline)
PROBE_BODY_MAX = 4 << 20   # one probe answer: /v1/models, /server_info and the like are a few KB
MODEL_ID_MAX = 256         # a model id longer than this is not taken from /v1/models unasked
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class SweepNotice:
    """A warning worth showing the user while the sweep goes on. A caution about a finished level that the level
    table marks on that level's row (LevelRow.client: SKEW, BOUND, BEHIND, OVER) names that `flag` and the `level`
    (`C=8`), so a screen can say it once rather than at every level."""

    message: str
    flag: str | None = None
    level: str | None = None


SweepUpdate = SweepProgress | LevelResult | SweepNotice


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep, against which server, and where the results go."""

    url: str
    workload: Workload
    out_path: Path
    model: str | None = None              # None: the first model /v1/models lists
    profile: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"
    records_path: Path | None = None      # None: next to out_path, "<name>.requests.jsonl"
    served_as: tuple[str, ...] = ()       # the profile's model names (config.served_model_names): a server that
                                          # lists none of them is another's, refused; (): not checked

    @property
    def records(self) -> Path:
        if self.records_path is not None:
            return self.records_path
        name = self.out_path.name[:-6] if self.out_path.name.endswith(".jsonl") else self.out_path.name
        return self.out_path.with_name(name + ".requests.jsonl")


@dataclass(frozen=True)
class WorkloadOverrides:
    """What a front end's options or form change in `[sweep]`; None keeps the config's value.

    Giving a request count turns the config's duration off and vice versa, so a level never has both. Giving
    levels makes the sweep closed loop and giving rates open loop, whatever `[sweep]` says; with neither, a
    `[sweep] rates` list makes it open loop. Giving a dataset drops the config's dataset path; giving an output
    length makes it fixed (not the dataset's).
    """

    levels: tuple[int, ...] | None = None
    rates: tuple[float, ...] | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None
    slo: Mapping[str, float] | None = None
    seed: int | None = None
    requests_per_level: int | None = None
    duration_s: float | None = None
    warmup_requests: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    api: str | None = None
    dataset: str | None = None
    dataset_path: str | None = None
    input_range: float | None = None
    output_range: float | None = None
    timeout_s: float | None = None
    deadline_s: float | None = None
    fixed_length: bool | None = None
    processes: int | None = None


def workload_from(defaults: SweepDefaults, overrides: WorkloadOverrides = WorkloadOverrides(),
                  named: Callable[[str], str] = str) -> Workload:
    """The one way a front end turns `[sweep]` plus its own options into a Workload. An option given where it does
    not apply is refused (UserError), not ignored, so no one believes it was used: burstiness and a concurrency cap
    shape an open loop only, and an input length random prompts only. `named(field)` is how the front end calls an
    override field (the CLI: its flag)."""
    o = overrides
    workload = _workload(defaults, o)
    if not workload.open_loop:
        for option in ("burstiness", "max_concurrency"):
            if getattr(o, option) is not None:
                raise UserError(f"sweep: {named(option)} applies to an open-loop sweep ({named('rates')})")
    if not has_set_length(workload.dataset) and (o.input_len is not None or o.input_range is not None):
        raise UserError(f"{named('input_len')}/{named('input_range')} shape random prompts only; the "
                        f"{workload.dataset} dataset's prompts are sent as written (add {named('dataset')} random "
                        "for synthetic prompts of a set length)")
    return workload


def _workload(defaults: SweepDefaults, o: WorkloadOverrides) -> Workload:
    requests = o.requests_per_level if o.requests_per_level is not None else (
        None if o.duration_s is not None else defaults.requests_per_level)
    duration = o.duration_s if o.duration_s is not None else (
        None if o.requests_per_level is not None else defaults.duration_s)
    # Not in [sweep]: Workload's own defaults hold unless an option says otherwise.
    extra: dict[str, Any] = {}
    if o.timeout_s is not None:
        extra["timeout_s"] = o.timeout_s
    if o.deadline_s is not None:
        extra["deadline_s"] = o.deadline_s
    fixed_length = o.fixed_length if o.fixed_length is not None else defaults.ignore_eos
    if not fixed_length:
        extra["fixed_length"] = False
    if o.burstiness is not None:
        extra["burstiness"] = o.burstiness
    if o.max_concurrency is not None:
        extra["max_concurrency"] = o.max_concurrency
    slo = o.slo if o.slo is not None else defaults.slo
    if slo:
        extra["slo"] = slo
    rates = o.rates if o.rates else (() if o.levels else defaults.rates)
    processes = o.processes or defaults.processes
    if processes is None:   # auto, within an open loop's cap (each process needs a slot of it)
        processes = min(auto_processes(rates), o.max_concurrency or MAX_PROCESSES) if rates else auto_processes()
    dataset = o.dataset or defaults.dataset
    dataset_path = o.dataset_path if o.dataset is not None else (o.dataset_path or defaults.dataset_path)
    return Workload(
        rates=rates,
        levels=o.levels or tuple(defaults.levels), requests_per_level=requests, duration_s=duration,
        warmup_requests=defaults.warmup_requests if o.warmup_requests is None else o.warmup_requests,
        input_len=o.input_len or defaults.input_len, output_len=o.output_len or defaults.output_len,
        api=o.api or defaults.api, dataset=dataset, dataset_path=dataset_path,
        input_range=defaults.input_range if o.input_range is None else o.input_range,
        output_range=defaults.output_range if o.output_range is None else o.output_range,
        output_from_dataset=defaults.output_from_dataset and o.output_len is None,
        seed=defaults.seed if o.seed is None else o.seed,
        processes=processes, **extra,
    )


def default_out_path(label: str, directory: Path = Path("results")) -> Path:
    """results/<label>-<UTC time>.jsonl, with the label made safe for a file name."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "sweep"
    stamp = utc_now_iso().replace(":", "").replace("-", "")
    return directory / f"{safe}-{stamp}.jsonl"


def api_key_from_env(name: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The API key held in the environment variable `name` (validated), or None."""
    if name is None:
        return None
    if not ENV_NAME.fullmatch(name):
        raise UserError(f"--api-key-env: {name!r} is not a valid environment variable name")
    return (os.environ if env is None else env).get(name) or None


async def probe_server(url: str, api_key: str | None, need_models: bool = True,
                       budget_s: float = PROBE_PHASE_S) -> tuple[list[str], dict[str, Any]]:
    """Model ids from /v1/models and a summary of what the server exposes about itself.

    Raises UserError when the server cannot be reached, or when /v1/models fails and `need_models` (no --model
    given). With a model named, a failing /v1/models is tolerated: transformers serve, for one, answers 500 there
    when its HF cache directory does not exist. Each answer is read up to PROBE_BODY_MAX bytes, and the whole probe
    ends within `budget_s` (a server trickling its answer a byte at a time never times out a single read); what
    the optional endpoints had not answered by then is left out.
    """
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    end = asyncio.get_running_loop().time() + budget_s
    timeout = min(PROBE_TIMEOUT_S, budget_s)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout) as client:

        async def get(path: str) -> tuple[int, bytes]:
            """Status and body; httpx.HTTPError, TimeoutError past the budget, _TooBig over PROBE_BODY_MAX."""
            async def read() -> tuple[int, bytes]:
                async with client.stream("GET", path) as r:
                    body = bytearray()
                    async for part in r.aiter_bytes():
                        body += part
                        if len(body) > PROBE_BODY_MAX:
                            raise _TooBig(f"{url}{path}: answer is over {PROBE_BODY_MAX >> 20} MiB")
                    return r.status_code, bytes(body)
            left = end - asyncio.get_running_loop().time()
            if left <= 0:
                raise asyncio.TimeoutError
            return await timelimit.wait_for(read(), left)

        models_json: Any = None
        try:
            status, body = await get("/v1/models")
        except httpx.HTTPError as exc:
            raise UserError(f"{url}: cannot reach the server ({type(exc).__name__}: "
                            f"{str(exc)[:120] or 'no detail'})") from None
        except asyncio.TimeoutError:
            raise UserError(f"{url}/v1/models: no whole answer within {budget_s:g} s (the probe's time limit: "
                            "--deadline, else 10 x --timeout, at most 60 s)") from None
        except _TooBig as exc:
            if need_models:
                raise UserError(f"{exc}; pass --model to skip it") from None
            status, body = 0, b""
        if status != 200:
            if need_models:
                text = body[:120].decode("utf-8", "replace")
                raise UserError(f"{url}/v1/models: HTTP {status} {text!r}; pass --model to skip it")
        else:
            try:
                models_json = textfile.loads(body)
            except ValueError as exc:
                if need_models:
                    why = f" ({exc.msg})" if isinstance(exc, json.JSONDecodeError) else ""
                    raise UserError(f"{url}/v1/models: answer is not JSON{why}; pass --model to skip it") from None

        async def get_text(path: str) -> str | None:
            with contextlib.suppress(httpx.HTTPError, asyncio.TimeoutError, _TooBig):
                status, body = await get(path)
                if status == 200:
                    return body.decode("utf-8", "replace")
            return None

        async def get_json(path: str) -> Any:
            text = await get_text(path)
            with contextlib.suppress(ValueError):
                return None if text is None else textfile.loads(text)
            return None

        info = await get_json("/server_info") or await get_json("/get_server_info")
        version = await get_json("/version")
        metrics = await get_text("/metrics") if info is None else None
    data = models_json.get("data") if isinstance(models_json, dict) else None
    ids = [m["id"] for m in data or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
    return ids, summarize_server(models_json, info, version, metrics)


class _TooBig(Exception):
    """A probe answer past PROBE_BODY_MAX."""


def default_model(url: str, ids: list[str]) -> str:
    """The model to request when none was named: the first one /v1/models lists, if it is a plausible id."""
    if not ids:
        raise UserError(f"{url}/v1/models: lists no model; pass --model")
    first = ids[0]
    if len(first) > MODEL_ID_MAX or not first.isprintable():
        shown = repr(first[:40]) + ("..." if len(first) > 40 else "")
        raise UserError(f"{url}/v1/models: the first model id is not a plausible name ({len(first)} characters, "
                        f"{shown}); pass --model")
    return first


async def run_sweep(spec: SweepSpec, on_update: Callable[[SweepUpdate], None] | None = None) -> SweepResult:
    """Run the whole sweep; returns the finished levels (also on disk). See the module docstring."""
    def notify(update: SweepUpdate) -> None:
        if on_update is None:
            return
        try:
            on_update(update)
        except Exception:  # noqa: BLE001 - a broken view must not cost the user a running sweep
            log.exception("sweep update callback failed")
    api_key = api_key_from_env(spec.api_key_env)
    dataset = spec.workload.load_dataset()   # a bad file fails here, naming FILE:LINE, before any load
    claimed = claim_out_files(spec.out_path, spec.records)   # before any request, so a bad --out costs nothing
    try:
        w = spec.workload
        budget = min(PROBE_PHASE_S, w.deadline_s if w.deadline_s is not None else DEADLINE_FACTOR * w.timeout_s)
        ids, server = await probe_server(spec.url, api_key, need_models=spec.model is None, budget_s=budget)
        if spec.served_as and ids and not set(ids) & set(spec.served_as):
            raise UserError(f"{spec.url} serves {', '.join(map(repr, ids[:3]))}, not profile {spec.profile}'s model "
                            f"{' or '.join(map(repr, spec.served_as))}: another server answers on its port? "
                            "`--url` measures any server on purpose")
        model = spec.model or default_model(spec.url, ids)
    except BaseException:
        for path in claimed:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    secrets = [api_key] if api_key else []
    meta = SweepMeta(url=spec.url, model=model, workload=spec.workload.to_dict(), profile=spec.profile,
                     server=server, specmon_version=__version__, created_at=utc_now_iso(), records=str(spec.records),
                     dataset=dataset.describe())
    levels: list[LevelResult] = []
    _append(spec.out_path, meta.to_dict(), secrets, levels)
    child_spec = ChildSpec(spec.url, model, spec.workload, str(spec.records), spec.api_key_env)
    proc = await asyncio.create_subprocess_exec(
        *python_module("specmon.loadgen"),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True, limit=1 << 20,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stderr_tail: deque[str] = deque(maxlen=20)
    drain = asyncio.ensure_future(_drain(proc.stderr, stderr_tail))
    ended = False

    def kept() -> str:
        return f"{counted(len(levels), 'finished level')} kept in {spec.out_path}"
    behind_said: set[int] = set()   # levels already said to be behind their schedule while they ran
    try:
        proc.stdin.write(encode(child_spec))
        await proc.stdin.drain()
        async for raw in proc.stdout:
            try:
                msg = decode(raw)
            except NotJson:
                stderr_tail.append(raw.decode("utf-8", "replace").rstrip())  # stray output from a library
                continue
            except ProtocolError as exc:
                raise UserError(f"load generator wrote {exc}; {kept()}") from None
            if isinstance(msg, SweepProgress):
                progress = msg
                notify(progress)
                if falling_behind(progress) and progress.level_index not in behind_said and progress.phase == ProgressPhase.MEASURING:
                    behind_said.add(progress.level_index)   # once a level; the level's result says it again
                    notify(SweepNotice(behind_notice(progress), "BEHIND", f"{progress.rate or 0:g} req/s"))
            elif isinstance(msg, LevelResult):
                level = msg
                _append(spec.out_path, level.to_dict(), secrets, levels)
                levels.append(level)
                notify(level)
                for notice in level_cautions(level):
                    notify(notice)
            elif isinstance(msg, Warn):
                notify(SweepNotice(msg.message))
            elif isinstance(msg, Fatal):
                raise UserError(msg.message)
            elif isinstance(msg, (Done, Stopped)):
                ended = True
            else:
                raise UserError(f"load generator wrote a {type(msg).__name__} message, which only its parts "
                                f"exchange; {kept()}")
        rc = await proc.wait()
        if not ended:
            last = stderr_tail[-1] if stderr_tail else "no output"
            raise UserError(f"load generator exited with code {rc} ({last}); {kept()}")
    finally:
        await _stop(proc)
        drain.cancel()
        await asyncio.gather(drain, return_exceptions=True)   # a cancellation of this task still leaves
    return SweepResult(path=str(spec.out_path), meta=meta, levels=tuple(levels))


def claim_out_files(out: Path, records: Path) -> list[Path]:
    """Create the results file (new, empty) and make sure the records file can be appended to.

    Returns the files this call created, for removal if the sweep never starts. UserError in one line when
    either cannot be written: an existing results file, a missing or read-only directory, a path through a file.
    """
    created: list[Path] = []
    for path, exclusive in ((out, True), (records, False)):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            _undo(created)
            raise UserError(f"{path}: cannot create its directory {path.parent} ({exc.strerror})") from None
        existed = path.exists()
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_APPEND)
        try:
            os.close(os.open(path, flags, 0o644))
        except FileExistsError:
            if _is_empty_file(path):
                # Left by a sweep killed before its first line (during the probe): it holds nothing to lose.
                created.append(path)
                continue
            _undo(created)
            raise UserError(f"{path}: already exists; choose another --out") from None
        except OSError as exc:
            _undo(created)
            what = "results" if exclusive else "per-request records"
            raise UserError(f"{path}: cannot write the {what} file ({exc.strerror})") from None
        if not existed:
            created.append(path)
    return created


def _is_empty_file(path: Path) -> bool:
    try:
        st = path.stat(follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


def _undo(created: list[Path]) -> None:
    for path in created:
        with contextlib.suppress(OSError):
            path.unlink()


def _append(path: Path, obj: Mapping[str, Any], secrets: list[str], levels: list[LevelResult]) -> None:
    """append_line, with a failed write (disk full) turned into one line saying what is kept."""
    try:
        append_line(path, obj, secrets)
    except OSError as exc:
        raise UserError(f"{path}: cannot append to the results file ({exc.strerror}); the file ends at its last "
                        f"whole line, {counted(len(levels), 'finished level')} kept") from None


def level_name(level: LevelResult) -> str:
    """How messages name a level: `C=8`, or `4 req/s` in an open-loop sweep."""
    return f"C={level.concurrency}" if level.rate is None else f"{level.rate:g} req/s"


def _more_processes(processes: int | None) -> str:
    had = "" if processes is None else f"; this level had {processes}"
    return f"; more load generator processes spread that work (--processes, [sweep] processes{had})"


def behind_notice(progress: SweepProgress) -> str:
    """What the sweep says the moment an open-loop level falls behind its schedule (sweepstats.falling_behind)."""
    rate = progress.rate or 0.0
    sent = "" if progress.sent is None or progress.elapsed_s <= 0 else (
        f", {progress.sent / progress.elapsed_s:.0f} req/s sent so far")
    return (f"{rate:g} req/s: the load generator is behind its schedule: {progress.backlog} requests due and not yet "
            f"sent, the oldest {progress.backlog_late_ms or 0:.0f} ms late{sent}; the offered load is not the one "
            f"asked for{_more_processes(None)}")


def level_warnings(level: LevelResult) -> list[str]:
    """What a user must know about a finished level before trusting it."""
    return [notice.message for notice in level_cautions(level)]


def level_cautions(level: LevelResult) -> list[SweepNotice]:
    """`level_warnings` as notices, each naming the flag its level's table row carries for it (if any)."""
    out: list[SweepNotice] = []
    c = level_name(level)

    def caution(text: str, flag: str | None = None) -> None:
        out.append(SweepNotice(text, flag, c if flag else None))

    more_processes = _more_processes(level.client.processes)
    if level.usage_missing:
        caution(f"{c}: {level.usage_missing} responses had no usage; their tokens were counted from chunks "
                   "(wrong by the accept length under speculative decoding)")
    if level.client.skewed:
        caution(f"{c}: chunks waited up to {level.client.handling_ms_p99:.1f} ms (p99) for the load generator after "
                   f"arriving, in bursts of up to {level.client.burst_max} reads, against an ITL p50 of "
                   f"{level.itl_ms.p50:.1f} ms; chunk times at this level may carry that skew{more_processes}", "SKEW")
    if level.client.bound and client_bound(level.client.cpu_s / level.client.processes, level.duration_s,
                                           level.client.loop_lag_ms_p99):
        why = f"loop lag p99 {level.client.loop_lag_ms_p99} ms, {level.client.cpu_s:.1f} CPU-s in {level.duration_s:.1f} s"
        if level.client.cpu_wait_s:
            why += f", {level.client.cpu_wait_s:.2f} s waiting for a CPU: the machine is busy"
        caution(f"{c}: the load generator was the bottleneck ({why}); timings at this level measure the "
                f"client{more_processes}", "BOUND")
    if level.requests_failed:
        kinds = ", ".join(f"{k} {n}" for k, n in level.errors.items())
        caution(f"{c}: {level.requests_failed} requests failed ({kinds})")
    if level.behind:
        sent = "" if level.achieved_rate is None else f"sent {level.achieved_rate:.1f} req/s, "
        backlog = "" if level.backlog_max is None else f"up to {level.backlog_max} requests due and not yet sent, "
        caution(f"{c}: the load generator fell behind its schedule ({sent}{backlog}send lateness p99 "
                f"{level.send_late_ms.p99:.1f} ms); the offered load was not the one asked for{more_processes}", "BEHIND")
    if level.over_capacity:
        reasons: list[str] = []
        if level.served_rate is not None:
            reasons.append(f"served {level.served_rate:.2f} req/s")
        if level.ttft_growth is not None:
            reasons.append(f"TTFT grew {level.ttft_growth:.1f}x over the level")
        if level.achieved_rate is not None and level.rate is not None and level.achieved_rate < level.rate:
            reasons.append(f"sent {level.achieved_rate:.2f} req/s")
        caution(f"{c}: over capacity: the server did not keep up with the offered rate ({', '.join(reasons)})", "OVER")
    return out


async def _drain(stream: asyncio.StreamReader, tail: deque[str]) -> None:
    async for line in stream:
        tail.append(line.decode("utf-8", "replace").rstrip())


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Ask the generator to stop (stdin EOF + SIGTERM), then kill it if it does not exit in time."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(Exception):
        assert proc.stdin is not None
        proc.stdin.close()
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await timelimit.wait_for(asyncio.shield(proc.wait()), STOP_GRACE_S)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
