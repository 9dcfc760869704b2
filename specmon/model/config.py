"""profiles.toml: named server profiles, sweep defaults and key bindings.

    load_config(path=None, env=None) -> Config
        Discovery when path is None: $SPECMON_CONFIG, ./profiles.toml, $XDG_CONFIG_HOME/specmon/profiles.toml
        (default ~/.config), else the built-in demo profiles (Config.source == BUILTIN_SOURCE).
        Every user error raises specmon.errors.UserError("FILE:LINE: key: what is wrong").

tomllib reports no positions for the values it returns, so a small locator (`locate_keys`) re-scans the
already-valid text and maps every key path to the line it is written on; each problem found by validation is
reported at the line of its key (or of the enclosing table when the key is missing).
"""

from __future__ import annotations

import bisect
import difflib
import math
import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from specmon.errors import UserError
from specmon.model import slurm
from specmon.model.datasets import DATASETS, FILE_DATASETS
from specmon.model.goodput import parse_slo
from specmon.model.interpreter import python_module
from specmon.model.keymap import keymap_problems
from specmon.model.multinode import DEFAULT_MASTER_PORT, dist_flag_problem
from specmon.model.slurm import SlurmRequest
from specmon.model.textfile import NotTextError, read_capped

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

SERVER_KINDS = ("sglang", "vllm", "other")
SWEEP_APIS = ("chat", "completions")
ON_FAILURE = ("retry", "skip", "abort")
ON_BUSY = ("wait", "abort")
DEFAULT_LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)
BUILTIN_SOURCE = "built-in demo profiles"
MAX_CONFIG_BYTES = 1 << 20   # a profiles file is a few KB; a MiB is generous and never exhausts memory
# Set by the lifecycle engine on every server it starts; a profile must not override it.
RESERVED_ENV = ("SPECMON_RUN_ID",)

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
MAX_HOST_CHARS = 300     # a DNS name has at most 253, a user name 32, a port 6
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.]+\]")


def _slurm_nodes(table: Mapping[str, Any]) -> int:
    """The node count a profile's slurm table asks for (1 when it asks none, or not as an integer: that key's own
    check reports it)."""
    slurm_table = table.get("slurm")
    nodes = slurm_table.get("nodes") if isinstance(slurm_table, dict) else None
    return nodes if isinstance(nodes, int) and not isinstance(nodes, bool) else 1


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

    @property
    def is_builtin(self) -> bool:
        return self.source == BUILTIN_SOURCE

    def where(self, *path: str) -> str:
        """`FILE:LINE` of a key path such as ("keys", "launch") (the closest enclosing table if not written)."""
        if self.is_builtin or not self.key_lines:
            return self.source
        return f"{self.source}:{_line_of(self.key_lines, path)}"

    def profile(self, name: str) -> Profile:
        """The named profile, or a UserError listing the known names."""
        try:
            return self.profiles[name]
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
        if close < 0 or not _IPV6.fullmatch(name):
            raise ValueError("bad [IPv6] address")
    else:
        name, sep, tail = rest.partition(":")
        tail = sep + tail
        if not _HOSTNAME.fullmatch(name):
            raise ValueError(f"bad host name {name!r}")
    if tail:
        digits = tail[1:]
        if not tail.startswith(":") or not digits.isdigit() or not 1 <= int(digits) <= 65535:
            raise ValueError("bad port (expected :1..65535)")
        port = int(digits)
    # asyncssh and ssh(1) want a bare IPv6 address; the brackets only delimit it from the port here.
    return SshTarget(hostname=name.strip("[]"), user=user, port=port)


# ---------------------------------------------------------------------------------------------------------------
# Discovery and loading


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Find, read and validate the profiles file (see the module docstring for the discovery order)."""
    env = os.environ if env is None else env
    if path is not None:
        return _load_file(Path(path), "--config")
    if env.get("SPECMON_CONFIG"):
        return _load_file(Path(env["SPECMON_CONFIG"]), "$SPECMON_CONFIG")
    cwd_file = Path("profiles.toml")
    if cwd_file.is_file():
        return _load_file(cwd_file, "./profiles.toml")
    xdg_file = config_dir(env) / "profiles.toml"
    if xdg_file.is_file():
        return _load_file(xdg_file, "$XDG_CONFIG_HOME/specmon/profiles.toml")
    return builtin_config()


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


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """specmon's per-user config directory: `$XDG_CONFIG_HOME/specmon`, default `~/.config/specmon`."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME", "")
    # The XDG spec says relative values are to be ignored.
    base = Path(xdg) if os.path.isabs(xdg) else Path(env.get("HOME") or Path.home()) / ".config"
    return base / "specmon"


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


def builtin_config() -> Config:
    """The demo profiles shipped inside the package (two `specmon sim` servers, run by the running specmon as
    any local profile's `specmon ...` command is)."""
    text = resources.files("specmon").joinpath("demo_profiles.toml").read_text(encoding="utf-8")
    return parse_config(text, BUILTIN_SOURCE, found_by="built-in")


def _load_file(path: Path, found_by: str) -> Config:
    try:
        data = read_capped(path, MAX_CONFIG_BYTES, special=True)   # `--config <(generate)` is a pipe
    except NotTextError as exc:
        raise UserError(f"{path}:{exc.line}: {exc} (named by {found_by})") from None
    except FileNotFoundError:
        raise UserError(f"{path}: no such file (named by {found_by})") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a profiles.toml file (named by {found_by})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not valid UTF-8 text (byte {exc.start})") from None
    return parse_config(text, str(path), found_by=found_by)


_TOML_POSITION = re.compile(r"\s*\((?:at line (\d+), column \d+|at end of document)\)$")


def parse_config(text: str, source: str, found_by: str = "") -> Config:
    """Parse and validate profiles.toml text; `source` names the file in error messages."""
    try:
        return _parse_config(text, source, found_by)
    except RecursionError:
        # tomllib and the validator recurse per nesting level; hundreds of levels are never a profiles file.
        lines = text.splitlines() or [""]
        deepest = max(range(len(lines)), key=lambda i: lines[i].count("[") + lines[i].count("{"))
        raise UserError(f"{source}:{deepest + 1}: nested too deeply (arrays or tables inside each other hundreds "
                        "of levels deep); not a profiles file") from None


def _parse_config(text: str, source: str, found_by: str) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        # Python >= 3.14 and tomli >= 2.1 carry the position as attributes; older ones only in the message.
        line = getattr(exc, "lineno", None)
        match = _TOML_POSITION.search(message)
        if match:
            message = message[: match.start()]
            # "at end of document" (an unclosed array or string): point at the last line with text on it.
            line = line or (int(match.group(1)) if match.group(1) else text.rstrip().count("\n") + 1)
        raise UserError(f"{source}:{line or 1}: invalid TOML: {getattr(exc, 'msg', message)}") from None
    validator = _Validator()
    config = validator.config(data, source, found_by)
    lines = locate_keys(text)
    if validator.problems:
        located = sorted(((_line_of(lines, p), p, m) for p, m in validator.problems), key=lambda t: t[0])
        line, path, message = located[0]
        more = len(located) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''} after this one)" if more else ""
        raise UserError(f"{source}:{line}: {format_key(path)}: {message}{suffix}")
    assert config is not None
    warnings = tuple(f"{source}:{_line_of(lines, p)}: {format_key(p)}: {m}" for p, m in validator.warnings)
    return replace(config, key_lines=lines, warnings=warnings)


# ---------------------------------------------------------------------------------------------------------------
# Validation

_PROFILE_KEYS = (
    "host", "server", "command", "env", "workdir", "port", "health_path", "python",
    "expected_load_s", "notify_cmd", "stall_timeout_s", "url", "hosts", "master_addr", "master_port", "slurm",
    "metrics_interval_s", "alert_waiting_s", "alert_kv_pct",
)
_SWEEP_KEYS = ("levels", "requests_per_level", "duration_s", "warmup_requests", "input_len", "output_len", "api",
               "rates", "slo", "dataset", "dataset_path", "input_range", "output_range", "seed")
_SSH_KEYS = ("config", "known_hosts", "connect_timeout_s", "keepalive_s")
_EXPERIMENT_KEYS = ("profiles", "repeats", "max_load_s", "stall_s", "on_failure", "retries", "on_busy",
                    "busy_wait_s") + _SWEEP_KEYS
_TOP_KEYS = ("profiles", "sweep", "keys", "ssh", "experiments")

_KeyPath = tuple[str, ...]


def _toml_type(value: object) -> str:
    """The TOML name of a parsed value's type, for messages."""
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}
    return names.get(type(value), "date/time")


def _shown(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Validator:
    """Turns the parsed TOML document into a Config, collecting (key path, problem) pairs instead of stopping."""

    def __init__(self) -> None:
        self.problems: list[tuple[_KeyPath, str]] = []
        self.warnings: list[tuple[_KeyPath, str]] = []
        self.base = Path(".")   # the profiles file's directory: relative paths in it are taken from there

    def problem(self, path: _KeyPath, message: str) -> None:
        self.problems.append((path, message))

    def warning(self, path: _KeyPath, message: str) -> None:
        self.warnings.append((path, message))

    def wrong_type(self, path: _KeyPath, expected: str, value: object) -> None:
        self.problem(path, f"must be {expected}, got {_toml_type(value)} {_shown(value)}")

    def unknown_keys(self, table: Mapping[str, Any], path: _KeyPath, allowed: tuple[str, ...]) -> None:
        for key in table:
            if key in allowed:
                continue
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "allowed: " + ", ".join(allowed)
            self.problem(path + (key,), f"unknown key ({hint})")

    def no_nul(self, value: object, path: _KeyPath) -> None:
        """A NUL byte (TOML's "\\u0000") in any key or string: no command, argument, path or variable can hold one;
        left in, it would crash `launch` or silently cut an argument short."""
        if isinstance(value, dict):
            for key, item in value.items():
                if "\0" in key:
                    self.problem(path + (key,), "key contains a NUL byte (\\u0000)")
                self.no_nul(item, path + (key,))
        elif isinstance(value, list):
            for item in value:
                self.no_nul(item, path)
        elif isinstance(value, str) and "\0" in value:
            self.problem(path, "contains a NUL byte (\\u0000), which no command, path or argument can hold: "
                               + _shown(value))

    def table(self, value: object, path: _KeyPath) -> Mapping[str, Any] | None:
        if isinstance(value, dict):
            return value
        self.wrong_type(path, "a table", value)
        return None

    # -- scalars --------------------------------------------------------------------------------------------------

    def string(self, table: Mapping[str, Any], path: _KeyPath, key: str, default: str | None) -> str | None:
        value = table.get(key, default)
        if value is None or (isinstance(value, str) and value):
            return value
        if isinstance(value, str):
            self.problem(path + (key,), "must not be empty")
        else:
            self.wrong_type(path + (key,), "a string", value)
        return default

    def choice(self, table: Mapping[str, Any], path: _KeyPath, key: str, default: str, options: tuple[str, ...]) -> str:
        value = table.get(key, default)
        if isinstance(value, str) and value in options:
            return value
        close = difflib.get_close_matches(value, options, n=1, cutoff=0.6) if isinstance(value, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        self.problem(path + (key,), f"must be one of {', '.join(repr(o) for o in options)}, got {_shown(value)}{hint}")
        return default

    def integer(self, table: Mapping[str, Any], path: _KeyPath, key: str, default: int | None,
                low: int, high: int | None = None) -> int | None:
        value = table.get(key, default)
        if value is None:
            return None
        wanted = f"an integer >= {low}" if high is None else f"an integer in {low}..{high}"
        if isinstance(value, bool) or not isinstance(value, int):
            self.wrong_type(path + (key,), wanted, value)
        elif value < low or (high is not None and value > high):
            self.problem(path + (key,), f"must be {wanted}, got {value}")
        else:
            return value
        return default

    def seconds(self, table: Mapping[str, Any], path: _KeyPath, key: str, default: float | None) -> float | None:
        value = table.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.wrong_type(path + (key,), "a number of seconds", value)
        elif not math.isfinite(value) or value <= 0:
            self.problem(path + (key,), f"must be a number of seconds > 0, got {value}")
        else:
            return float(value)
        return default

    # -- document -------------------------------------------------------------------------------------------------

    def config(self, data: Mapping[str, Any], source: str, found_by: str) -> Config | None:
        self.base = Path(source).parent
        self.no_nul(data, ())
        self.unknown_keys(data, (), _TOP_KEYS)
        profiles: dict[str, Profile] = {}
        raw_profiles = self.table(data.get("profiles", {}), ("profiles",))
        if raw_profiles is not None:
            if not raw_profiles:
                self.problem(("profiles",), "no profiles defined (add a [profiles.NAME] table with a command)")
            for name, raw in raw_profiles.items():
                profile = self.profile(name, raw)
                if profile is not None:
                    profiles[name] = profile
        sweep_table = self.table(data.get("sweep", {}), ("sweep",))
        sweep = self.sweep(sweep_table) if sweep_table is not None else SweepDefaults()
        keys = self.keys(data.get("keys", {}))
        ssh_table = self.table(data.get("ssh", {}), ("ssh",))
        ssh = self.ssh(ssh_table, Path(source).parent) if ssh_table is not None else SshSettings()
        experiments: dict[str, ExperimentSpec] = {}
        raw_experiments = self.table(data.get("experiments", {}), ("experiments",))
        for name, raw in (raw_experiments or {}).items():
            experiment = self.experiment(name, raw, sweep, raw_profiles or {})
            if experiment is not None:
                experiments[name] = experiment
        if self.problems:
            return None
        return Config(source=source, profiles=profiles, sweep=sweep, keys=keys, ssh=ssh, experiments=experiments,
                      found_by=found_by)

    def profile(self, name: str, raw: object) -> Profile | None:
        path = ("profiles", name)
        if not _PROFILE_NAME.fullmatch(name):
            self.problem(path, "profile names use letters, digits, '.', '_' and '-' (at most 64, "
                               "starting with a letter or digit)")
        table = self.table(raw, path)
        if table is None:
            return None
        self.unknown_keys(table, path, _PROFILE_KEYS)
        host = self.string(table, path, "host", "local") or "local"
        self.check_host(host, path + ("host",))
        hosts = self.hosts(table, path)
        if hosts:
            host = hosts[0]
        server = self.choice(table, path, "server", "sglang", SERVER_KINDS)
        command = self.command(table, path)
        url = self.string(table, path, "url", None)
        if url is not None and not re.fullmatch(r"https?://[^/\s]+/?", url):
            self.problem(path + ("url",), f"must be http://HOST:PORT or https://HOST:PORT, got {_shown(url)}")
        elif url is not None and "@" in url:
            # Like `sweep --url`: a password here would be copied into every result file's meta line.
            self.problem(path + ("url",), "must not hold a user name or password (it would be written to result "
                                          "files); give an API key through `sweep --api-key-env` instead")
        health_path = self.string(table, path, "health_path", "/health") or "/health"
        if not health_path.startswith("/"):
            self.problem(path + ("health_path",), f"must start with '/', got {_shown(health_path)}")
        port = self.integer(table, path, "port", 30000, 1, 65535) or 30000
        self.command_port(command, server, port, "port" in table, path)
        python = self.string(table, path, "python", "python3") or "python3"
        if host == "local" and command[:1] == ("specmon",):
            # The running specmon (`specmon sim` in the demo profiles), whether or not its venv is on PATH or
            # another `specmon` comes first there; its env view then shows the interpreter that runs it.
            command = (*python_module("specmon"), *command[1:])
            python = python if "python" in table else sys.executable
        return Profile(
            name=name,
            command=command,
            host=host,
            server=server,
            env=self.env(table.get("env", {}), path + ("env",)),
            workdir=self.string(table, path, "workdir", None),
            port=port,
            health_path=health_path,
            python=python,
            expected_load_s=self.seconds(table, path, "expected_load_s", None),
            notify_cmd=self.string(table, path, "notify_cmd", None),
            stall_timeout_s=self.seconds(table, path, "stall_timeout_s", 300.0) or 300.0,
            metrics_interval_s=self.seconds(table, path, "metrics_interval_s", 1.0) or 1.0,
            alert_waiting_s=self.seconds(table, path, "alert_waiting_s", 30.0) or 30.0,
            alert_kv_pct=self.integer(table, path, "alert_kv_pct", 95, 1, 100) or 95,
            url=url.rstrip("/") if url else None,
            hosts=hosts,
            **self.rendezvous(table, path, hosts, server, command, slurm_nodes=_slurm_nodes(table)),
            slurm=self.slurm(table, path, hosts),
        )

    def slurm(self, table: Mapping[str, Any], path: _KeyPath, hosts: tuple[str, ...]) -> SlurmRequest | None:
        """A Slurm profile's job request ([profiles.NAME.slurm]); `host` is then where sbatch runs."""
        if "slurm" not in table:
            return None
        path += ("slurm",)
        request = self.table(table["slurm"], path)
        if request is None:
            return None
        if hosts:
            self.problem(path, "a Slurm profile runs one job on the nodes Slurm gives it: use slurm.nodes, not hosts")
        self.unknown_keys(request, path, slurm.KEYS)
        values: dict[str, Any] = {}
        for key in slurm.STRING_OPTIONS:
            value = self.string(request, path, key, None)
            check = {"time": slurm.time_problem, "mem": slurm.mem_problem}.get(key)
            problem = None if value is None else (check(value) if check else slurm.name_problem(value))
            if problem:
                self.problem(path + (key,), f"{problem}, got {_shown(value)}")
            values[key] = value
        for key in slurm.INTEGER_OPTIONS:
            values[key] = self.integer(request, path, key, None, 1)
        if values["gpus"] is not None and values["gres"] is not None:
            self.problem(path + ("gres",), "set gpus or gres, not both (gres = \"gpu:TYPE:N\" names a GPU type)")
        extra = request.get("extra_args", [])
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            self.wrong_type(path + ("extra_args",), 'an array of sbatch options such as ["--exclusive"]', extra)
            extra = []
        for arg in extra:
            problem = slurm.extra_arg_problem(arg)
            if problem:
                self.problem(path + ("extra_args",), problem)
        return SlurmRequest(**values, extra_args=tuple(extra))

    def check_host(self, host: str, key_path: _KeyPath) -> None:
        if host == "local":
            return
        try:
            parse_host(host)
        except ValueError as exc:
            self.problem(key_path, f"must be \"local\", an ssh alias or [user@]host[:port]: {exc}, got {_shown(host)}")

    def hosts(self, table: Mapping[str, Any], path: _KeyPath) -> tuple[str, ...]:
        """A multi-node profile's hosts: two or more distinct hosts, node rank i on hosts[i]."""
        key_path = path + ("hosts",)
        if "hosts" not in table:
            return ()
        value = table["hosts"]
        if "host" in table:
            self.problem(key_path, "set host (one node) or hosts (several nodes), not both")
            return ()
        if not isinstance(value, list) or not all(isinstance(h, str) for h in value):
            self.wrong_type(key_path, 'an array of host names such as ["gpu1", "gpu2"]', value)
            return ()
        if len(value) < 2:
            self.problem(key_path, f"a multi-node profile needs at least two hosts, got {len(value)} "
                                   "(use host = \"...\" for one)")
            return ()
        for item in value:
            self.check_host(item, key_path)
        repeated = sorted({h for h in value if value.count(h) > 1})
        if repeated:
            self.problem(key_path, f"each host may appear once (node ranks are positions), {repeated[0]!r} repeats")
            return ()
        return tuple(value)

    def rendezvous(self, table: Mapping[str, Any], path: _KeyPath, hosts: tuple[str, ...], server: str,
                   command: tuple[str, ...], slurm_nodes: int = 1) -> dict[str, Any]:
        """master_addr / master_port, only meaningful with hosts (or master_port with a multi-node Slurm job, whose
        master is rank 0's node); and the command's own SGLang multi-node flags."""
        if not hosts and slurm_nodes > 1:
            if "master_addr" in table:
                self.problem(path + ("master_addr",), "a multi-node Slurm job's master address is its rank 0 node's, "
                                                      "known when the job starts: leave master_addr out")
            hosts = ("",) * slurm_nodes   # for the checks below
        if not hosts:
            for key in ("master_addr", "master_port"):
                if key in table:
                    self.problem(path + (key,), "only for multi-node profiles (hosts = [...] or slurm.nodes >= 2)")
            return {}
        addr = self.string(table, path, "master_addr", None)
        if addr is not None and not (_HOSTNAME.fullmatch(addr) or _IPV6.fullmatch(f"[{addr}]")):
            self.problem(path + ("master_addr",), f"must be a host name or IP address, got {_shown(addr)}")
        problem = dist_flag_problem(command) if server == "sglang" else None
        if problem:
            self.problem(path + ("command",), problem)
        return {"master_addr": addr,
                "master_port": self.integer(table, path, "master_port", DEFAULT_MASTER_PORT, 1, 65535)
                or DEFAULT_MASTER_PORT}

    def command(self, table: Mapping[str, Any], path: _KeyPath) -> tuple[str, ...]:
        key_path = path + ("command",)
        if "command" not in table:
            self.problem(key_path, "missing; every profile needs the command that starts its server")
            return ()
        value = table["command"]
        if isinstance(value, str):
            try:
                argv = shlex.split(value)
            except ValueError as exc:
                self.problem(key_path, f"cannot split into arguments: {exc}")
                return ()
        elif isinstance(value, list):
            bad = next((item for item in value if not isinstance(item, str)), None)
            if bad is not None:
                self.problem(key_path, f"each item must be a string, got {_toml_type(bad)} {_shown(bad)}")
                return ()
            argv = list(value)
        else:
            self.wrong_type(key_path, "a string or an array of strings", value)
            return ()
        if not argv or not argv[0]:
            self.problem(key_path, "must not be empty")
        return tuple(argv)

    def command_port(self, argv: tuple[str, ...], server: str, port: int, written: bool, path: _KeyPath) -> None:
        """The port is written twice (`port`, which specmon probes, and the command's `--port`): they must agree,
        or the server listens where nobody looks and the load reads as stalled."""
        given = command_port(argv)
        shown = f"port = {port}" if written else f"port = {port} (the default; no port key)"
        if given is not None and given != port:
            self.problem(path + ("command",), f"--port {given} differs from {shown}; make them the same")
        elif given is None and server in ("sglang", "vllm") and not any("--port" in arg for arg in argv):
            self.warning(path + ("command",), f"has no --port: the {server} server picks its own default port, "
                                              f"while specmon probes {shown}")

    def env(self, raw: object, path: _KeyPath) -> tuple[tuple[str, str], ...]:
        table = self.table(raw, path)
        if table is None:
            return ()
        pairs: list[tuple[str, str]] = []
        for name, value in table.items():
            if not ENV_NAME.fullmatch(name):
                self.problem(path + (name,), "bad environment variable name (use letters, digits and _, "
                                             "not starting with a digit)")
            elif name in RESERVED_ENV:
                self.problem(path + (name,), "is reserved: specmon sets it on every server it starts")
            elif not isinstance(value, str):
                self.wrong_type(path + (name,), f"a string (write {name} = \"{_shown(value)}\")", value)
            elif "\0" in value:
                self.problem(path + (name,), "must not contain a NUL character")
            else:
                pairs.append((name, value))
        return tuple(pairs)

    def sweep(self, table: Mapping[str, Any], path: _KeyPath = ("sweep",),
              defaults: SweepDefaults | None = None) -> SweepDefaults:
        """The workload keys of `table` over `defaults` (the `[sweep]` table itself, or an experiment's)."""
        defaults = defaults or SweepDefaults()
        if path == ("sweep",):
            self.unknown_keys(table, path, _SWEEP_KEYS)
        given_requests = self.integer(table, path, "requests_per_level", None, 1)
        given_duration = self.seconds(table, path, "duration_s", None)
        if given_requests is not None and given_duration is not None:
            self.problem(path + ("duration_s",), "set requests_per_level or duration_s, not both")
        # One stop rule: a table that names one of them replaces the defaults' rule.
        requests, duration = (given_requests, given_duration) if (
            given_requests is not None or given_duration is not None) else (
            defaults.requests_per_level, defaults.duration_s)
        levels = self.levels(table, path, defaults.levels)
        rates = self.rates(table, path, defaults.rates)
        if not rates and requests is not None and duration is None and requests < levels[-1]:
            self.problem(path + ("requests_per_level",), one_wave_problem(requests, levels[-1]))
        return SweepDefaults(
            rates=rates,
            slo=self.slo(table, path, defaults.slo),
            levels=levels,
            requests_per_level=requests,
            duration_s=duration,
            warmup_requests=self.integer(table, path, "warmup_requests", defaults.warmup_requests, 0)
            or 0,
            input_len=self.integer(table, path, "input_len", defaults.input_len, 1) or defaults.input_len,
            output_len=self.integer(table, path, "output_len", defaults.output_len, 1) or defaults.output_len,
            api=self.choice(table, path, "api", defaults.api, SWEEP_APIS),
            **self.dataset(table, path, defaults),
        )

    def dataset(self, table: Mapping[str, Any], path: _KeyPath, defaults: SweepDefaults) -> dict[str, Any]:
        """The prompt-set keys of a sweep table: dataset, dataset_path, the length ranges and the seed."""
        given = "dataset" in table or "dataset_path" in table
        name = self.choice(table, path, "dataset", defaults.dataset, DATASETS)
        data_path = self.string(table, path, "dataset_path", None if given else defaults.dataset_path)
        if name in FILE_DATASETS and data_path is None:
            self.problem(path + ("dataset",), f"dataset {name!r} needs dataset_path = \"FILE\"")
        elif name not in FILE_DATASETS and data_path is not None and given:
            self.problem(path + ("dataset_path",), f"dataset {name!r} takes no file (dataset_path is for "
                                                   + ", ".join(FILE_DATASETS) + ")")
            data_path = None
        if data_path is not None and "dataset_path" in table:
            expanded = Path(data_path).expanduser()
            data_path = str(expanded if expanded.is_absolute() else self.base / expanded)
        return {
            "dataset": name, "dataset_path": data_path,
            "input_range": self.fraction(table, path, "input_range", defaults.input_range),
            "output_range": self.fraction(table, path, "output_range", defaults.output_range),
            "seed": self.integer(table, path, "seed", defaults.seed, 0) or 0,
            "output_from_dataset": "output_len" not in table and defaults.output_from_dataset,
        }

    def fraction(self, table: Mapping[str, Any], path: _KeyPath, key: str, default: float) -> float:
        """A length range: a number in [0, 1) (0.2 means +-20 %)."""
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.wrong_type(path + (key,), "a fraction in [0, 1), e.g. 0.2 for +-20 %", value)
        elif not 0 <= value < 1:
            self.problem(path + (key,), f"must be a fraction in [0, 1), e.g. 0.2 for +-20 %, got {value}")
        else:
            return float(value)
        return default

    def experiment(self, name: str, raw: object, sweep: SweepDefaults,
                   profiles: Mapping[str, Any]) -> ExperimentSpec | None:
        path = ("experiments", name)
        if not _PROFILE_NAME.fullmatch(name):
            self.problem(path, "experiment names use letters, digits, '.', '_' and '-' (at most 64, "
                               "starting with a letter or digit)")
        table = self.table(raw, path)
        if table is None:
            return None
        self.unknown_keys(table, path, _EXPERIMENT_KEYS)
        names = table.get("profiles")
        key_path = path + ("profiles",)
        if names is None:
            self.problem(key_path, "missing; list the profiles to compare, e.g. [\"baseline\", \"eagle3\"]")
            names = []
        elif not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            self.wrong_type(key_path, "an array of profile names", names)
            names = []
        elif len(names) < 2:
            self.problem(key_path, "an experiment compares at least two profiles")
        elif len(set(names)) != len(names):
            self.problem(key_path, "names a profile twice")
        else:
            for n in names:
                if n not in profiles:
                    close = difflib.get_close_matches(n, list(profiles), n=1, cutoff=0.6)
                    hint = f"did you mean {close[0]!r}?" if close else "known: " + (", ".join(profiles) or "none")
                    self.problem(key_path, f"unknown profile {n!r} ({hint})")
        if "rates" in table:
            self.problem(path + ("rates",), "experiments sweep concurrency levels only; use `specmon sweep "
                                            "--rates` for an open-loop comparison")
        max_load = self.seconds(table, path, "max_load_s", None)
        return ExperimentSpec(
            name=name,
            profiles=tuple(names),
            sweep=self.sweep(table, path, sweep),
            repeats=self.integer(table, path, "repeats", 3, 1, 100) or 3,
            max_load_s=max_load if max_load is not None else ExperimentSpec.max_load_s,
            stall_s=self.seconds(table, path, "stall_s", None),
            on_failure=self.choice(table, path, "on_failure", "retry", ON_FAILURE),
            retries=self.integer(table, path, "retries", 1, 0, 20) or 0,
            on_busy=self.choice(table, path, "on_busy", "wait", ON_BUSY),
            busy_wait_s=self.seconds(table, path, "busy_wait_s", 600.0) or 600.0,
        )

    def levels(self, table: Mapping[str, Any], path: _KeyPath,
               default: tuple[int, ...] = DEFAULT_LEVELS) -> tuple[int, ...]:
        """Concurrency levels: a non-empty array under the one rule of check_levels (positive, strictly increasing)."""
        key_path = path + ("levels",)
        value = table.get("levels", list(default))
        if not isinstance(value, list):
            self.wrong_type(key_path, "an array of concurrency levels such as [1, 2, 5, 10]", value)
            return DEFAULT_LEVELS
        try:
            check_levels(value)
        except ValueError as exc:
            self.problem(key_path, str(exc).removeprefix("levels: "))
            return DEFAULT_LEVELS
        return tuple(value)

    def rates(self, table: Mapping[str, Any], path: _KeyPath, default: tuple[float, ...] = ()) -> tuple[float, ...]:
        """Open-loop request rates: an array under check_rates (positive, finite, strictly increasing)."""
        if "rates" not in table:
            return default
        value = table["rates"]
        key_path = path + ("rates",)
        if not isinstance(value, list):
            self.wrong_type(key_path, "an array of request rates in requests/s such as [1, 2, 4.5]", value)
            return ()
        try:
            check_rates(value)
        except ValueError as exc:
            self.problem(key_path, str(exc).removeprefix("rates: "))
            return ()
        return tuple(float(v) for v in value)

    def slo(self, table: Mapping[str, Any], path: _KeyPath, default: Mapping[str, float]) -> Mapping[str, float]:
        """Goodput targets: a string as `--slo` takes it, e.g. "ttft:500,tpot:50" (milliseconds)."""
        if "slo" not in table:
            return default
        value = table["slo"]
        if not isinstance(value, str):
            self.wrong_type(path + ("slo",), 'a string of targets in ms such as "ttft:500,tpot:50"', value)
            return {}
        try:
            return parse_slo(value)
        except ValueError as exc:
            self.problem(path + ("slo",), str(exc))
            return {}

    def ssh(self, table: Mapping[str, Any], base: Path) -> SshSettings:
        """The [ssh] table; relative file names are taken from the profiles file's directory."""
        path = ("ssh",)
        self.unknown_keys(table, path, _SSH_KEYS)
        defaults = SshSettings()
        files = {}
        for key in ("config", "known_hosts"):
            name = self.string(table, path, key, getattr(defaults, key)) or getattr(defaults, key)
            if key in table and not name.startswith("~") and not os.path.isabs(name):
                name = str(base / name)
            files[key] = name
        return SshSettings(
            config=files["config"], known_hosts=files["known_hosts"],
            connect_timeout_s=self.seconds(table, path, "connect_timeout_s", defaults.connect_timeout_s)
            or defaults.connect_timeout_s,
            keepalive_s=self.seconds(table, path, "keepalive_s", defaults.keepalive_s) or defaults.keepalive_s,
        )

    def keys(self, raw: object) -> dict[str, str]:
        path = ("keys",)
        table = self.table(raw, path)
        if table is None:
            return {}
        bindings: dict[str, str] = {}
        for binding, key in table.items():
            if isinstance(key, str) and key.strip():
                bindings[binding] = key
            else:
                self.wrong_type(path + (binding,), "a non-empty key name such as \"ctrl+l\"", key)
        checked, problems = keymap_problems(bindings)
        for binding, message in problems:
            self.problem(path + (binding,), message)
        return checked


# ---------------------------------------------------------------------------------------------------------------
# Locating keys in the source text

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_key(path: Iterable[str]) -> str:
    """A key path written the way TOML would (`profiles."my model".port`)."""
    parts = [part if _BARE_KEY.fullmatch(part) else _quoted_key(part) for part in path]
    return ".".join(parts) or "(top level)"


def _quoted_key(key: str) -> str:
    """A TOML basic-string key with every control character escaped, so echoing it can neither break the one-line
    error (a newline) nor act on the terminal (ESC, C1)."""
    body = key.replace("\\", "\\\\").replace('"', '\\"')
    body = _KEY_CONTROL.sub(lambda m: _KEY_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), body)
    return '"' + body + '"'


_KEY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_KEY_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _line_of(lines: Mapping[_KeyPath, int], path: _KeyPath) -> int:
    """The line of `path`, else of its closest enclosing table that is written down, else 1."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return 1


def locate_keys(text: str) -> dict[_KeyPath, int]:
    """Map each key path in valid TOML `text` to the 1-based line where it is first written.

    Table headers (`[a.b]`, `[[a]]`), dotted keys (`a.b = 1`) and keys inside inline tables are all recorded, and
    the implicit parents of each (`a` for `a.b`) map to the first line that mentions them. Array-of-tables entries
    share their array's path. Only meant for text tomllib has already accepted.
    """
    return _KeyScanner(text).scan()


class _KeyScanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.newlines = [i for i, char in enumerate(text) if char == "\n"]
        self.found: dict[_KeyPath, int] = {}

    def line(self) -> int:
        return bisect.bisect_left(self.newlines, self.pos) + 1

    def peek(self, count: int = 1) -> str:
        return self.text[self.pos: self.pos + count]

    def record(self, path: _KeyPath) -> None:
        line = self.line()
        for end in range(1, len(path) + 1):
            self.found.setdefault(path[:end], line)

    def skip_blank(self, newlines: bool) -> None:
        """Skip spaces and tabs, and with `newlines` also line breaks and comments."""
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t" or (newlines and char in "\r\n"):
                self.pos += 1
            elif newlines and char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                break

    def scan(self) -> dict[_KeyPath, int]:
        table: _KeyPath = ()
        while True:
            self.skip_blank(newlines=True)
            if self.pos >= len(self.text):
                return self.found
            if self.peek() == "[":
                width = 2 if self.peek(2) == "[[" else 1
                self.pos += width
                self.skip_blank(newlines=False)
                table = self.key()
                self.record(table)
                self.skip_blank(newlines=False)
                self.pos += width
            else:
                self.key_value(table)

    def key_value(self, table: _KeyPath) -> None:
        path = table + self.key()
        self.record(path)
        self.skip_blank(newlines=False)
        self.pos += 1  # "="
        self.skip_blank(newlines=False)
        self.value(path)

    def key(self) -> _KeyPath:
        parts: list[str] = []
        while True:
            self.skip_blank(newlines=False)
            char = self.peek()
            if char in ("'", '"'):
                parts.append(self.string())
            else:
                match = _BARE_KEY.match(self.text, self.pos)
                end = match.end() if match else self.pos + 1
                parts.append(self.text[self.pos: end])
                self.pos = end
            self.skip_blank(newlines=False)
            if self.peek() != ".":
                return tuple(parts)
            self.pos += 1

    def string(self) -> str:
        """Consume a string of any of TOML's four kinds; return its body (escapes decoded for basic strings)."""
        quote = self.peek()
        triple = self.peek(3) == quote * 3
        delimiter = quote * 3 if triple else quote
        start = self.pos + len(delimiter)
        index = start
        while True:
            end = self.text.find(delimiter, index)
            if end < 0:
                end = len(self.text)
                break
            backslashes = 0
            while quote == '"' and end - 1 - backslashes >= start and self.text[end - 1 - backslashes] == "\\":
                backslashes += 1
            if backslashes % 2 == 0:
                break
            index = end + 1
        if triple:  # up to two extra quotes may close a multi-line string ('''a''''' is "a''")
            while self.text[end + 3: end + 4] == quote and end + 3 < len(self.text):
                end += 1
        body = self.text[start:end]
        self.pos = end + len(delimiter)
        if quote == '"' and "\\" in body:
            try:
                body = tomllib.loads(f'k = "{body}"')["k"]
            except tomllib.TOMLDecodeError:
                pass  # a name only used to find a line; the raw form is still good enough
        return body

    def value(self, path: _KeyPath) -> None:
        char = self.peek()
        if char in ("'", '"'):
            self.string()
        elif char == "[":
            self.pos += 1
            while True:
                self.skip_blank(newlines=True)
                if self.peek() in ("]", ""):
                    self.pos += 1
                    return
                self.value(path)
                self.skip_blank(newlines=True)
                if self.peek() == ",":
                    self.pos += 1
        elif char == "{":
            self.pos += 1
            while True:
                self.skip_blank(newlines=True)
                if self.peek() in ("}", ""):
                    self.pos += 1
                    return
                self.key_value(path)
                self.skip_blank(newlines=True)
                if self.peek() == ",":
                    self.pos += 1
        else:
            while self.pos < len(self.text) and self.text[self.pos] not in ",]}\r\n#":
                self.pos += 1


def parse_levels(text: str) -> tuple[int, ...]:
    """Concurrency levels typed by a user (`--levels`, the sweep form): `1,2,5,10` -> (1, 2, 5, 10).

    The rule is the one `[sweep] levels` follows (check_levels): positive whole numbers, strictly increasing. A list
    out of order or with a repeat is refused rather than quietly sorted, so what runs is what was typed.
    ValueError saying what is wrong.
    """
    levels: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"levels: {part!r} is not a positive whole number")
        levels.append(int(part))
    check_levels(levels)
    return tuple(levels)


def check_levels(levels: Sequence[int]) -> None:
    """The one rule for concurrency levels everywhere: at least one, each >= 1, strictly increasing.

    Strictly increasing (not just unique) because sweeps run the levels in the order given and charts and the
    crossover read them as an ordered axis; an unordered list is almost always a typo. ValueError otherwise.
    """
    if not levels:
        raise ValueError("levels: give at least one concurrency level, e.g. 1,4,16")
    for c in levels:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise ValueError(f"levels: each level must be a positive integer, got {_shown(c)}")
    for before, after in zip(levels, levels[1:]):
        if after <= before:
            raise ValueError(f"levels must be strictly increasing ({before} then {after})")


def parse_rates(text: str) -> tuple[float, ...]:
    """Request rates typed by a user (`--rates`): `1,2,4.5` -> (1.0, 2.0, 4.5); the rule of check_rates.

    ValueError saying what is wrong.
    """
    rates: list[float] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            rates.append(float(part))
        except ValueError:
            raise ValueError(f"rates: {part!r} is not a number of requests per second") from None
    check_rates(rates)
    return tuple(rates)


def check_rates(rates: Sequence[object]) -> None:
    """The rule for open-loop request rates: at least one, each a finite number > 0, strictly increasing."""
    if not rates:
        raise ValueError("rates: give at least one request rate, e.g. 1,2,4")
    for r in rates:
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r < math.inf:
            raise ValueError(f"rates: each rate must be a finite number of requests/s > 0, got {_shown(r)}")
    for before, after in zip(rates, rates[1:]):
        if after <= before:  # type: ignore[operator]
            raise ValueError(f"rates must be strictly increasing ({before} then {after})")


def one_wave_problem(requests: int, top: int) -> str:
    """Why `requests` per level cannot measure concurrency `top`: a level must run at least one full wave.

    With fewer requests than C, no moment of the level has C requests in flight, so its figures would be
    labelled with a concurrency it never reached.
    """
    return (f"requests per level ({requests}) is below the highest level C={top}: a level needs at least one full "
            f"wave of C requests; raise requests to {top} or more, or drop the higher levels")
