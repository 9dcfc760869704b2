"""nvidia-smi output, parsed: per-GPU samples keyed by UUID, compute processes, the `-q -x` XML, and a board that
keeps a bounded history per GPU for sparklines and knows which run holds each GPU.

Pure and synchronous: the process plumbing (one long-lived `nvidia-smi ... -lms N` per host) is in
`specmon.sources.gpu`. Formats, from real captures (tests/fixtures/gpu/):

    --format=csv              header line, values with units ("143771 MiB", "81.62 W", "0 %")
    --format=csv,noheader,nounits   bare values; absent ones are "[N/A]" (also "[Not Supported]", "N/A",
                              "[Unknown Error]", "[GPU requires reset]")
    -lms N                    one row per GPU per tick, nothing between ticks
    a bad field               'Field "bogus.field" is not a valid field to query.' and exit code 2

nvidia-smi ignores CUDA_VISIBLE_DEVICES and indexes GPUs its own way, so GPUs are keyed by UUID throughout.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specmon.model.logs.clean import one_line

# What the probe asks for, in this order (parsed by position). `name` is last: a product name could hold a comma.
QUERY_FIELDS: tuple[str, ...] = (
    "index", "uuid", "memory.used", "memory.total", "utilization.gpu", "power.draw", "power.limit",
    "temperature.gpu", "clocks.sm", "name",
)
# Compute processes, with the process name last for the same reason.
APPS_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "used_memory", "process_name")

_ABSENT = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|GPU requires reset|Insufficient Permissions|"
                     r"Not Found|GPU is lost)\]?$", re.IGNORECASE)
_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)(?:\s*(MiB|W|%|MHz|C))?$")
_BAD_FIELD = re.compile(r'Field "([^"]*)" is not a valid field to query')
MAX_QUOTED = 300   # characters of nvidia-smi's output an error quotes
# Values that mean the GPU itself is in trouble (as opposed to a metric it does not report).
_GPU_FAULT = re.compile(r"Unknown Error|GPU requires reset|GPU is lost", re.IGNORECASE)


class SmiError(ValueError):
    """nvidia-smi printed an error instead of data (e.g. a field it does not know). The message is one line, the
    output it quotes cut short (a 10 MB line must not become a 10 MB error)."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message, MAX_QUOTED))


def number(text: str) -> float | None:
    """A numeric field with or without its unit ("81.62 W", "143771", "0 %"); None for "[N/A]" and friends.

    Anything else raises SmiError naming the text, so a format change is noticed rather than read as zero.
    """
    value = text.strip()
    if not value or _ABSENT.match(value):
        return None
    match = _NUMBER.match(value)
    if match is None:
        raise SmiError(f"nvidia-smi: expected a number, got {value!r}")
    return float(match.group(1))


def _text(value: str) -> str | None:
    value = value.strip()
    return None if not value or _ABSENT.match(value) else value


def check_error(line: str) -> None:
    """Raise SmiError if `line` is one of nvidia-smi's error messages rather than data."""
    match = _BAD_FIELD.search(line)
    if match:
        raise SmiError(f"nvidia-smi: field {match.group(1)!r} is not a valid field to query")
    lowered = line.lower()
    if lowered.startswith(("nvidia-smi has failed", "failed to initialize nvml", "no devices were found",
                           "unable to determine the device handle")):
        raise SmiError(f"nvidia-smi: {line.strip()}")


def split_row(line: str, fields: Sequence[str]) -> dict[str, str]:
    """One CSV row as {field: text}. Extra commas belong to the last field (a name); too few raise SmiError."""
    check_error(line)
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < len(fields):
        raise SmiError(f"nvidia-smi: expected {len(fields)} fields, got {len(parts)}: {line.strip()!r}")
    head = parts[: len(fields) - 1]
    tail = ", ".join(parts[len(fields) - 1:])
    return dict(zip(fields, head + [tail]))


_HEADER_CELL = re.compile(r"^[a-z][a-z_.]*(\s*\[[^\]]*\])?$")


def is_header(line: str) -> bool:
    """Whether a first line is `--format=csv`'s header (lower-case field names) rather than data."""
    return bool(_HEADER_CELL.match(line.split(",", 1)[0].strip()))


def header_fields(header: str) -> tuple[str, ...]:
    """The field names of a `--format=csv` header, units dropped ("power.draw [W]" -> "power.draw").

    nvidia-smi writes some names in canonical form (`clocks.sm` comes back as `clocks.current.sm`)."""
    check_error(header)
    return tuple(part.split("[", 1)[0].strip() for part in header.split(","))


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment. Numbers are None where nvidia-smi says [N/A]."""

    uuid: str
    index: int | None = None
    name: str | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_pct: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    fault: str | None = None    # "Unknown Error", "GPU requires reset": the GPU needs attention


# Field name (either spelling nvidia-smi uses) -> GpuSample attribute.
_SAMPLE_ATTRS = {
    "memory.used": "memory_used_mib", "memory.total": "memory_total_mib", "utilization.gpu": "utilization_pct",
    "power.draw": "power_w", "power.limit": "power_limit_w", "temperature.gpu": "temperature_c",
    "clocks.sm": "sm_clock_mhz", "clocks.current.sm": "sm_clock_mhz",
}


def sample_from_row(row: dict[str, str]) -> GpuSample:
    """A GpuSample from one parsed row (fields it lacks stay None). SmiError if the UUID is missing.

    A query that did not ask for `uuid` is keyed "index N" instead (only for ad-hoc queries: the probe asks)."""
    if "uuid" not in row and "index" in row and row["index"].strip().isdigit():
        row = {**row, "uuid": f"index {row['index'].strip()}"}
    uuid = _text(row.get("uuid", ""))
    if uuid is None or not uuid.startswith(("GPU-", "MIG-", "index ")):
        raise SmiError(f"nvidia-smi: row without a GPU UUID: {row!r}")
    values: dict[str, float | None] = {}
    fault = None
    for name, attr in _SAMPLE_ATTRS.items():
        if name in row:
            text = row[name]
            if _GPU_FAULT.search(text):
                fault = text.strip("[] ")
            values[attr] = number(text)
    index = number(row["index"]) if "index" in row else None
    return GpuSample(uuid=uuid, index=None if index is None else int(index), name=_text(row.get("name", "")),
                     fault=fault, **values)


def parse_query(text: str, fields: Sequence[str] = QUERY_FIELDS) -> list[GpuSample]:
    """Samples from `nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]` output.

    A first line that names fields is read as the header (its names win over `fields`, so `--format=csv` output
    parses whatever it asked for). SmiError on an error message or a malformed row."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines and is_header(lines[0]):
        fields = header_fields(lines.pop(0))
    return [sample_from_row(split_row(line, fields)) for line in lines]


class QueryStream:
    """The `-lms N` stream: bytes in, completed ticks out.

    A tick is the run of rows between two appearances of the same GPU; a GPU absent from a completed tick has
    disappeared (nvidia-smi keeps streaming the others). Partial lines wait for the next chunk. Lines that are
    neither data nor a known error (a banner, a stray warning) are counted in `skipped` and otherwise ignored;
    an error line raises SmiError.
    """

    def __init__(self, fields: Sequence[str] = QUERY_FIELDS) -> None:
        self.fields = tuple(fields)
        self._buffer = b""
        self._tick: dict[str, GpuSample] = {}
        self._expected: set[str] = set()    # the GPUs of the last completed tick
        self.skipped = 0
        self.last_skipped = ""              # e.g. the shell's "nvidia-smi: not found", for the error message

    def feed(self, chunk: bytes) -> list[dict[str, GpuSample]]:
        """Completed ticks found in this chunk (oldest first), each {uuid: sample}."""
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        ticks = []
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                sample = sample_from_row(split_row(line, self.fields))
            except SmiError:
                check_error(line)
                self.skipped += 1
                self.last_skipped = line
                continue
            if sample.uuid in self._tick:
                ticks.append(self._complete())
            self._tick[sample.uuid] = sample
            # Every GPU of the last tick is here: hand it out now rather than one interval later.
            if self._expected and self._tick.keys() == self._expected:
                ticks.append(self._complete())
        return ticks

    def _complete(self) -> dict[str, GpuSample]:
        tick, self._tick = self._tick, {}
        self._expected = set(tick)
        return tick

    def flush(self) -> dict[str, GpuSample]:
        """The rows of the tick in progress (at the end of the stream)."""
        tick, self._tick = self._tick, {}
        return tick


@dataclass(frozen=True)
class ComputeApp:
    """One (process, GPU) pair from `--query-compute-apps`: a process on two GPUs is two rows."""

    gpu_uuid: str
    pid: int
    used_mib: float | None
    process_name: str | None = None


def parse_apps(text: str, fields: Sequence[str] = APPS_FIELDS) -> list[ComputeApp]:
    """Rows of `nvidia-smi --query-compute-apps=FIELDS --format=csv[,noheader][,nounits]`.

    `used_memory` is an alias nvidia-smi prints as `used_gpu_memory`; both are read. "No running processes
    found" (older drivers) and empty output mean none."""
    lines = [ln for ln in text.splitlines() if ln.strip() and "no running processes" not in ln.lower()]
    if lines and is_header(lines[0]):
        fields = header_fields(lines.pop(0))
    apps = []
    for line in lines:
        row = split_row(line, fields)
        pid = number(row.get("pid", ""))
        uuid = _text(row.get("gpu_uuid", ""))
        if pid is None or uuid is None:
            raise SmiError(f"nvidia-smi: compute-apps row without pid or GPU UUID: {line.strip()!r}")
        used = row.get("used_memory", row.get("used_gpu_memory", ""))
        apps.append(ComputeApp(uuid, int(pid), number(used), _text(row.get("process_name", ""))))
    return apps


def memory_by_pid(apps: Iterable[ComputeApp]) -> dict[int, int]:
    """pid -> MiB it holds on all GPUs together (a process on two GPUs is two rows; a row without a figure counts 0)."""
    held: dict[int, int] = {}
    for app in apps:
        held[app.pid] = held.get(app.pid, 0) + int(app.used_mib or 0)
    return held


@dataclass(frozen=True)
class GpuInfo:
    """Static facts of one GPU from `nvidia-smi -q -x`."""

    uuid: str
    name: str
    index: int | None
    architecture: str | None
    bus_id: str | None
    memory_total_mib: float | None


@dataclass(frozen=True)
class SmiInventory:
    """Driver, CUDA driver version and GPUs of a host, from `nvidia-smi -q -x`."""

    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[GpuInfo, ...]


def parse_xml(text: str) -> SmiInventory:
    """Parse `nvidia-smi -q -x` (SmiError if it is not that document)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise SmiError(f"nvidia-smi -q -x: not XML ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise SmiError(f"nvidia-smi -q -x: unexpected document <{root.tag}>")

    def find(node: ET.Element, path: str) -> str | None:
        found = node.findtext(path)
        return None if found is None else _text(found)

    gpus = []
    for gpu in root.findall("gpu"):
        uuid = find(gpu, "uuid")
        if uuid is None:
            continue
        minor = find(gpu, "minor_number")
        total = find(gpu, "fb_memory_usage/total")
        gpus.append(GpuInfo(uuid=uuid, name=find(gpu, "product_name") or "GPU",
                            index=int(minor) if minor and minor.isdigit() else None,
                            architecture=find(gpu, "product_architecture"), bus_id=gpu.get("id"),
                            memory_total_mib=number(total) if total else None))
    return SmiInventory(find(root, "driver_version"), find(root, "cuda_version"), tuple(gpus))


def parse_run_markers(text: str) -> dict[int, str | None]:
    """pid -> SPECMON_RUN_ID (None where the process has no marker or its environment is unreadable), from lines
    "PID" or "PID SPECMON_RUN_ID=ID" (the probe's shell loop over /proc/PID/environ)."""
    markers: dict[int, str | None] = {}
    for line in text.splitlines():
        pid_text, _, rest = line.strip().partition(" ")
        if pid_text.isdigit():
            _, sep, run_id = rest.strip().partition("SPECMON_RUN_ID=")
            markers[int(pid_text)] = run_id.strip() or None if sep else None
    return markers


# ---------------------------------------------------------------------------------------------------------------
# The board: what the pane and `specmon gpus` show


@dataclass(frozen=True)
class Holder:
    """A process holding memory on a GPU, and the specmon run it belongs to (None: not a specmon run)."""

    pid: int
    used_mib: float | None
    run_id: str | None
    process_name: str | None = None

    def describe(self, known_runs: Iterable[str] = ()) -> str:
        """"run R (pid N)", or "held by pid N (not a specmon run)" — also for a marker of no run known here."""
        if self.run_id is not None and self.run_id in set(known_runs):
            return f"run {self.run_id} (pid {self.pid})"
        if self.run_id is not None:
            return f"held by pid {self.pid} (specmon run {self.run_id}, not known here)"
        return f"held by pid {self.pid} (not a specmon run)"


@dataclass
class GpuTrack:
    """One GPU's latest sample, history and holders."""

    uuid: str
    latest: GpuSample
    seen_at: float
    utilization: deque[float] = field(default_factory=deque)
    memory_used: deque[float] = field(default_factory=deque)
    holders: tuple[Holder, ...] = ()
    gone: bool = False      # absent from the latest tick (or the stream went silent)


class GpuBoard:
    """The GPUs of one host, by UUID: latest sample, bounded history (`history` points each) and holders."""

    def __init__(self, history: int = 120) -> None:
        self.history = history
        self.tracks: dict[str, GpuTrack] = {}
        self.error: str | None = None       # why the numbers may be stale (nvidia-smi missing, hung, died)
        self.apps_error: str | None = None

    def add_tick(self, tick: dict[str, GpuSample], now: float) -> None:
        """Record one tick; GPUs missing from it are marked gone (kept, so the pane can say so)."""
        self.error = None
        for uuid, sample in tick.items():
            track = self.tracks.get(uuid)
            if track is None:
                track = self.tracks[uuid] = GpuTrack(uuid, sample, now, deque(maxlen=self.history),
                                                     deque(maxlen=self.history))
            track.latest, track.seen_at, track.gone = sample, now, False
            if sample.utilization_pct is not None:
                track.utilization.append(sample.utilization_pct)
            if sample.memory_used_mib is not None:
                track.memory_used.append(sample.memory_used_mib)
        for uuid, track in self.tracks.items():
            if uuid not in tick:
                track.gone = True

    def set_apps(self, apps: Sequence[ComputeApp], run_of_pid: dict[int, str | None]) -> None:
        """Replace every GPU's holders with these compute processes (pid -> run id from the markers)."""
        self.apps_error = None
        by_gpu: dict[str, list[Holder]] = {}
        for app in apps:
            by_gpu.setdefault(app.gpu_uuid, []).append(
                Holder(app.pid, app.used_mib, run_of_pid.get(app.pid), app.process_name))
        for uuid, track in self.tracks.items():
            track.holders = tuple(sorted(by_gpu.get(uuid, ()), key=lambda h: h.pid))

    def mark_stale(self, reason: str) -> None:
        """The stream failed: keep the last numbers but say why they no longer move."""
        self.error = reason

    def gpus(self) -> list[GpuTrack]:
        """Tracks in nvidia-smi's index order (UUID order for GPUs without an index)."""
        return sorted(self.tracks.values(), key=lambda t: (t.latest.index is None, t.latest.index or 0, t.uuid))

    def gpus_of_run(self, run_id: str) -> list[GpuTrack]:
        """The GPUs some process of `run_id` holds (a run's GPUs come from its processes, not its env)."""
        return [t for t in self.gpus() if any(h.run_id == run_id for h in t.holders)]
