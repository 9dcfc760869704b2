"""The shapes of profiles.toml once read: Config, Profile, SweepDefaults, ExperimentSpec, SshSettings, the
names and limits their checks use, and the pure facts about them (a profile's `host` split by parse_host, the
port a command names, the same profiles moved to other ports)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from specmon.errors import UserError
from specmon.model.config.keys import line_of
from specmon.model.runs.multinode import DEFAULT_MASTER_PORT
from specmon.model.runs.slurm import SlurmRequest

SERVER_KINDS = ("sglang", "vllm", "other")
SWEEP_APIS = ("chat", "completions")
ON_FAILURE = ("retry", "skip", "abort")
ON_BUSY = ("wait", "abort")
DEFAULT_LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)
BUILTIN_SOURCE = "built-in demo profiles"
MAX_PROCESSES = 64        # load generator processes of one sweep (one core each)
MAX_CONFIG_BYTES = 1 << 20   # a profiles file is a few KB; a MiB is generous and never exhausts memory
# Set by the lifecycle engine on every server it starts; a profile must not override it.
RESERVED_ENV = ("SPECMON_RUN_ID",)

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
MAX_HOST_CHARS = 300     # a DNS name has at most 253, a user name 32, a port 6
HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
IPV6 = re.compile(r"\[[0-9A-Fa-f:.]+\]")


@dataclass(frozen=True)
class Profile:
    """One way of starting one inference server on one host."""

    name: str
    command: tuple[str, ...]          # argv; a string in TOML is split with shlex
    host: str = "local"               # "local", an ssh alias, or user@host[:port]
    server: str = "sglang"            # one of SERVER_KINDS
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    port: int = 30000
    health_path: str = "/health"
    python: str = "python3"           # interpreter used for environment probes
    expected_load_s: float | None = None
    notify_cmd: str | None = None
    stall_timeout_s: float = 300.0    # no log bytes and no progress for this long => "stalled" warning
    url: str | None = None            # where clients reach the server directly (else: the host's 127.0.0.1:port)
    hosts: tuple[str, ...] = ()       # multi-node: node rank i runs on hosts[i] (then host == hosts[0])
    master_addr: str | None = None    # multi-node rendezvous address; None: rank 0's host's own address
    master_port: int = DEFAULT_MASTER_PORT
    slurm: SlurmRequest | None = None  # a Slurm profile: the server runs as a batch job submitted on `host`
    metrics_interval_s: float = 1.0   # a READY server's /metrics is read this often (the serving view)
    alert_waiting_s: float = 30.0     # requests waiting this long without a break: an alert
    alert_kv_pct: int = 95            # KV-cache use at or above this percentage: an alert

    @property
    def is_local(self) -> bool:
        return self.host == "local"

    @property
    def nodes(self) -> tuple[str, ...]:
        """The host of each node rank: `hosts`, or just `host` for a single-node profile."""
        return self.hosts or (self.host,)


@dataclass(frozen=True)
class SweepDefaults:
    """Defaults for `specmon sweep` and the TUI's sweep form; command-line options override them."""

    levels: tuple[int, ...] = DEFAULT_LEVELS
    requests_per_level: int | None = None   # None => 4*C, at least 16 (see sweep docs)
    duration_s: float | None = None
    warmup_requests: int = 2
    input_len: int = 128
    output_len: int = 256
    api: str = "chat"                       # "chat" | "completions"
    rates: tuple[float, ...] = ()           # request rates (req/s): an open-loop sweep instead of levels
    slo: Mapping[str, float] = field(default_factory=dict)   # goodput targets (ms), as `--slo` takes them
    dataset: str = "builtin"                # datasets.DATASETS; builtin: realistic prompts, so acceptance is real
    dataset_path: str | None = None         # sharegpt/jsonl/specbench file (relative: to the profiles file)
    input_range: float = 0.0                # lengths uniform in len x [1 - range, 1 + range]
    output_range: float = 0.0
    seed: int = 0
    output_from_dataset: bool = True       # no output_len written: the dataset's lengths where it has them
    processes: int | None = None            # load generator processes sending each level together; None: auto
    ignore_eos: bool = True                 # send ignore_eos + min_tokens (false: servers that refuse them, such
                                            # as transformers serve; outputs then end at the model's EOS)


@dataclass(frozen=True)
class ExperimentSpec:
    """An unattended A/B experiment (`[experiments.NAME]`): profiles run one after another on shared hardware,
    each launched, swept over `levels` `repeats` times, and stopped.

    `sweep` is the workload: the experiment's own keys over the `[sweep]` table's.
    """

    name: str
    profiles: tuple[str, ...]
    sweep: SweepDefaults
    repeats: int = 3
    max_load_s: float = 1800.0          # a launch not ready by then counts as failed
    stall_s: float | None = None        # None: each profile's stall_timeout_s
    on_failure: str = "retry"           # one of ON_FAILURE
    retries: int = 1                    # extra launch attempts with on_failure = "retry"
    on_busy: str = "wait"               # one of ON_BUSY: a process specmon did not start holds the port
    busy_wait_s: float = 600.0
    baseline: str | None = None         # a tuning grid's profile to beat (profiles[0]; the rest are its variants)


@dataclass(frozen=True)
class SshSettings:
    """The [ssh] table: which OpenSSH files remote profiles use, and how fast a dead link is noticed.

    `config` and `known_hosts` keep a leading `~` (expanded where they are opened). Host keys are always
    verified against `known_hosts`; there is deliberately no setting that turns that off.
    """

    config: str = "~/.ssh/config"
    known_hosts: str = "~/.ssh/known_hosts"
    connect_timeout_s: float = 15.0
    keepalive_s: float = 15.0              # a silent link counts as dead after 3 unanswered keepalives


@dataclass(frozen=True)
class Config:
    """Everything read from one profiles file (or the built-in demo profiles)."""

    source: str                              # file path, or BUILTIN_SOURCE
    profiles: dict[str, Profile] = field(default_factory=dict)
    sweep: SweepDefaults = field(default_factory=SweepDefaults)
    keys: dict[str, str] = field(default_factory=dict)   # binding id -> key, from a [keys] table (TUI remaps)
    ssh: SshSettings = field(default_factory=SshSettings)
    experiments: dict[str, ExperimentSpec] = field(default_factory=dict)
    found_by: str = ""                       # how discovery chose the file: "--config", "$SPECMON_CONFIG", ...
    # key path -> line it is written on, so later checks (e.g. the TUI's [keys] ids) can name FILE:LINE too
    key_lines: dict[tuple[str, ...], int] = field(default_factory=dict, compare=False, repr=False)
    warnings: tuple[str, ...] = ()           # "FILE:LINE: key: why", for the front end to show; nothing failed
    # The variants of the experiments' tuning grids (model.config.grid), by name: profiles derived in memory, found
    # by `profile()` (so they launch and resume like written ones) but not listed with the written profiles.
    variants: dict[str, Profile] = field(default_factory=dict)

    @property
    def is_builtin(self) -> bool:
        return self.source == BUILTIN_SOURCE

    def where(self, *path: str) -> str:
        """`FILE:LINE` of a key path such as ("keys", "launch") (the closest enclosing table if not written)."""
        if self.is_builtin or not self.key_lines:
            return self.source
        return f"{self.source}:{line_of(self.key_lines, path)}"

    def profile(self, name: str) -> Profile:
        """The named profile, or a UserError listing the known names."""
        try:
            return self.profiles[name] if name in self.profiles else self.variants[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles)) or "none"
            raise UserError(f"{self.source}: unknown profile {name!r} (known: {known})") from None

    def experiment(self, name: str) -> ExperimentSpec:
        """The named experiment, or a UserError listing the known names."""
        try:
            return self.experiments[name]
        except KeyError:
            known = ", ".join(sorted(self.experiments)) or "none"
            raise UserError(f"{self.source}: unknown experiment {name!r} (known: {known})") from None


@dataclass(frozen=True)
class SshTarget:
    """The parts of a profile's `host` other than "local"; user and port are None when not given."""

    hostname: str
    user: str | None = None
    port: int | None = None


def parse_host(host: str) -> SshTarget:
    """Split `[user@]host[:port]` (host may be an ssh alias, a DNS name, IPv4 or [IPv6]); ValueError if malformed.

    Leading dashes and whitespace are refused outright so a host can never be read as an ssh option.
    """
    if len(host) > MAX_HOST_CHARS:
        raise ValueError(f"{len(host):,} characters long (a [user@]host[:port] has at most {MAX_HOST_CHARS})")
    user: str | None = None
    rest = host
    if "@" in rest:
        user, rest = rest.split("@", 1)
        if not _SSH_USER.fullmatch(user):
            raise ValueError(f"bad user name {user!r}")
    port: int | None = None
    if rest.startswith("["):
        close = rest.find("]")
        name, tail = rest[: close + 1], rest[close + 1:]
        if close < 0 or not IPV6.fullmatch(name):
            raise ValueError("bad [IPv6] address")
    else:
        name, sep, tail = rest.partition(":")
        tail = sep + tail
        if not HOSTNAME.fullmatch(name):
            raise ValueError(f"bad host name {name!r}")
    if tail:
        digits = tail[1:]
        if not tail.startswith(":") or not digits.isdigit() or not 1 <= int(digits) <= 65535:
            raise ValueError("bad port (expected :1..65535)")
        port = int(digits)
    # asyncssh and ssh(1) want a bare IPv6 address; the brackets only delimit it from the port here.
    return SshTarget(hostname=name.strip("[]"), user=user, port=port)


def command_port(argv: Sequence[str]) -> int | None:
    """The port a server command names with `--port N` or `--port=N` (the last one wins, as argparse does);
    None when it names none or not as a number (e.g. a shell variable)."""
    found: int | None = None
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--port" and i + 1 < len(argv) else (
            arg[len("--port="):] if arg.startswith("--port=") else None)
        if value is not None and value.isdigit():
            found = int(value)
    return found


def served_model_names(argv: Sequence[str]) -> tuple[str, ...]:
    """The model names a server command answers to on /v1/models: its `--served-model-name` values (vLLM takes
    several), else its model (`--model-path`, `--model`, `vllm serve MODEL`); () when it names none as a word of its
    own (a shell script's text, a wrapper)."""
    served: list[str] = []
    model: str | None = None
    for i, arg in enumerate(argv):
        name, eq, inline = arg.partition("=")
        values = [inline] if eq else list(itertools.takewhile(lambda a: not a.startswith("-"), argv[i + 1:]))
        if name == "--served-model-name":
            served = values
        elif name in ("--model-path", "--model") and values:
            model = values[0]
        elif arg == "serve" and i > 0 and argv[i - 1].rsplit("/", 1)[-1] == "vllm" and values and not eq:
            model = values[0]
    return tuple(served) if served else (model,) if model else ()


def on_ports(config: Config, ports: Iterable[int]) -> Config:
    """The same profiles moved to other ports, in profile order (`specmon demo --ports`): each profile's `port`
    and the `--port N` of its command. A UserError when the count differs or a port is out of range."""
    wanted = list(ports)
    if len(wanted) != len(config.profiles) or len(set(wanted)) != len(wanted):
        raise UserError(f"--ports: give {len(config.profiles)} different ports, one per profile "
                        f"({', '.join(config.profiles)})")
    if any(not 1 <= p <= 65535 for p in wanted):
        raise UserError("--ports: each port must be in 1..65535")
    moved = {}
    for (name, profile), port in zip(config.profiles.items(), wanted):
        command = list(profile.command)
        for i, arg in enumerate(command[:-1]):
            if arg == "--port":
                command[i + 1] = str(port)
        moved[name] = replace(profile, port=port, command=tuple(command))
    return replace(config, profiles=moved)
