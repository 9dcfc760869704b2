"""Checking profiles.toml text: `parse_config` parses it (tomllib) and validates every table into a Config,
reporting the first problem as UserError("FILE:LINE: key: what is wrong") at the line of its key (or of the
enclosing table when the key is missing), with warnings kept on the Config; and the one rule for each value a
user may also type elsewhere (parse_levels/check_levels, parse_rates/check_rates, one_wave_problem)."""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from specmon.errors import UserError
from specmon.model.config.grid import expand_grid
from specmon.model.config.keymap import keymap_problems
from specmon.model.config.keys import KeyPath, format_key, line_of, locate_keys
from specmon.model.config.types import (
    DEFAULT_LEVELS,
    ENV_NAME,
    HOSTNAME,
    IPV6,
    MAX_PROCESSES,
    ON_BUSY,
    ON_FAILURE,
    RESERVED_ENV,
    SERVER_KINDS,
    SWEEP_APIS,
    Config,
    ExperimentSpec,
    Profile,
    SshSettings,
    SweepDefaults,
    command_port,
    parse_host,
)
from specmon.model.machine.interpreter import python_module
from specmon.model.runs import slurm
from specmon.model.runs.multinode import DEFAULT_MASTER_PORT, dist_flag_problem
from specmon.model.runs.slurm import SlurmRequest
from specmon.model.workload.datasets import DATASETS, FILE_DATASETS
from specmon.model.workload.goodput import parse_slo

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _slurm_nodes(table: Mapping[str, Any]) -> int:
    """The node count a profile's slurm table asks for (1 when it asks none, or not as an integer: that key's own
    check reports it)."""
    slurm_table = table.get("slurm")
    nodes = slurm_table.get("nodes") if isinstance(slurm_table, dict) else None
    return nodes if isinstance(nodes, int) and not isinstance(nodes, bool) else 1


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
        located = sorted(((line_of(lines, p), p, m) for p, m in validator.problems), key=lambda t: t[0])
        line, path, message = located[0]
        more = len(located) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''} after this one)" if more else ""
        raise UserError(f"{source}:{line}: {format_key(path)}: {message}{suffix}")
    assert config is not None
    warnings = tuple(f"{source}:{line_of(lines, p)}: {format_key(p)}: {m}" for p, m in validator.warnings)
    return replace(config, key_lines=lines, warnings=warnings)


_PROFILE_KEYS = (
    "host", "server", "command", "env", "workdir", "port", "health_path", "python",
    "expected_load_s", "notify_cmd", "stall_timeout_s", "url", "hosts", "master_addr", "master_port", "slurm",
    "metrics_interval_s", "alert_waiting_s", "alert_kv_pct",
)
_SWEEP_KEYS = ("levels", "requests_per_level", "duration_s", "warmup_requests", "input_len", "output_len", "api",
               "rates", "slo", "dataset", "dataset_path", "input_range", "output_range", "seed", "processes",
               "ignore_eos")
_SSH_KEYS = ("config", "known_hosts", "connect_timeout_s", "keepalive_s")
_EXPERIMENT_KEYS = ("profiles", "base", "baseline", "vary", "repeats", "max_load_s", "stall_s", "on_failure", "retries", "on_busy",
                    "busy_wait_s") + _SWEEP_KEYS
_TOP_KEYS = ("profiles", "sweep", "keys", "ssh", "experiments")

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
        self.problems: list[tuple[KeyPath, str]] = []
        self.warnings: list[tuple[KeyPath, str]] = []
        self.base = Path(".")   # the profiles file's directory: relative paths in it are taken from there
        self.variants: dict[str, Profile] = {}   # the tuning grids' variants (model.config.grid)

    def problem(self, path: KeyPath, message: str) -> None:
        self.problems.append((path, message))

    def warning(self, path: KeyPath, message: str) -> None:
        self.warnings.append((path, message))

    def wrong_type(self, path: KeyPath, expected: str, value: object) -> None:
        self.problem(path, f"must be {expected}, got {_toml_type(value)} {_shown(value)}")

    def unknown_keys(self, table: Mapping[str, Any], path: KeyPath, allowed: tuple[str, ...]) -> None:
        for key in table:
            if key in allowed:
                continue
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "allowed: " + ", ".join(allowed)
            self.problem(path + (key,), f"unknown key ({hint})")

    def no_nul(self, value: object, path: KeyPath) -> None:
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

    def table(self, value: object, path: KeyPath) -> Mapping[str, Any] | None:
        if isinstance(value, dict):
            return value
        self.wrong_type(path, "a table", value)
        return None

    # -- scalars --------------------------------------------------------------------------------------------------

    def string(self, table: Mapping[str, Any], path: KeyPath, key: str, default: str | None) -> str | None:
        value = table.get(key, default)
        if value is None or (isinstance(value, str) and value):
            return value
        if isinstance(value, str):
            self.problem(path + (key,), "must not be empty")
        else:
            self.wrong_type(path + (key,), "a string", value)
        return default

    def boolean(self, table: Mapping[str, Any], path: KeyPath, key: str, default: bool) -> bool:
        value = table.get(key, default)
        if isinstance(value, bool):
            return value
        self.wrong_type(path + (key,), "true or false", value)
        return default

    def choice(self, table: Mapping[str, Any], path: KeyPath, key: str, default: str, options: tuple[str, ...]) -> str:
        value = table.get(key, default)
        if isinstance(value, str) and value in options:
            return value
        close = difflib.get_close_matches(value, options, n=1, cutoff=0.6) if isinstance(value, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        self.problem(path + (key,), f"must be one of {', '.join(repr(o) for o in options)}, got {_shown(value)}{hint}")
        return default

    def integer(self, table: Mapping[str, Any], path: KeyPath, key: str, default: int | None,
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

    def seconds(self, table: Mapping[str, Any], path: KeyPath, key: str, default: float | None) -> float | None:
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
            experiment = self.experiment(name, raw, sweep, raw_profiles or {}, profiles)
            if experiment is not None:
                experiments[name] = experiment
        if self.problems:
            return None
        return Config(source=source, profiles=profiles, sweep=sweep, keys=keys, ssh=ssh, experiments=experiments,
                      found_by=found_by, variants=self.variants)

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

    def slurm(self, table: Mapping[str, Any], path: KeyPath, hosts: tuple[str, ...]) -> SlurmRequest | None:
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

    def check_host(self, host: str, key_path: KeyPath) -> None:
        if host == "local":
            return
        try:
            parse_host(host)
        except ValueError as exc:
            self.problem(key_path, f"must be \"local\", an ssh alias or [user@]host[:port]: {exc}, got {_shown(host)}")

    def hosts(self, table: Mapping[str, Any], path: KeyPath) -> tuple[str, ...]:
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

    def rendezvous(self, table: Mapping[str, Any], path: KeyPath, hosts: tuple[str, ...], server: str,
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
        if addr is not None and not (HOSTNAME.fullmatch(addr) or IPV6.fullmatch(f"[{addr}]")):
            self.problem(path + ("master_addr",), f"must be a host name or IP address, got {_shown(addr)}")
        problem = dist_flag_problem(command) if server == "sglang" else None
        if problem:
            self.problem(path + ("command",), problem)
        return {"master_addr": addr,
                "master_port": self.integer(table, path, "master_port", DEFAULT_MASTER_PORT, 1, 65535)
                or DEFAULT_MASTER_PORT}

    def command(self, table: Mapping[str, Any], path: KeyPath) -> tuple[str, ...]:
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

    def command_port(self, argv: tuple[str, ...], server: str, port: int, written: bool, path: KeyPath) -> None:
        """The port is written twice (`port`, which specmon probes, and the command's `--port`): they must agree,
        or the server listens where nobody looks and the load reads as stalled."""
        given = command_port(argv)
        shown = f"port = {port}" if written else f"port = {port} (the default; no port key)"
        if given is not None and given != port:
            self.problem(path + ("command",), f"--port {given} differs from {shown}; make them the same")
        elif given is None and server in ("sglang", "vllm") and not any("--port" in arg for arg in argv):
            self.warning(path + ("command",), f"has no --port: the {server} server picks its own default port, "
                                              f"while specmon probes {shown}")

    def env(self, raw: object, path: KeyPath) -> tuple[tuple[str, str], ...]:
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

    def sweep(self, table: Mapping[str, Any], path: KeyPath = ("sweep",),
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
        wave = one_wave_problem(requests if duration is None else None, levels)
        if not rates and wave is not None:
            self.problem(path + ("requests_per_level",), wave)
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
            processes=self.integer(table, path, "processes", defaults.processes, 1, MAX_PROCESSES),
            ignore_eos=self.boolean(table, path, "ignore_eos", defaults.ignore_eos),
            **self.dataset(table, path, defaults),
        )

    def dataset(self, table: Mapping[str, Any], path: KeyPath, defaults: SweepDefaults) -> dict[str, Any]:
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

    def fraction(self, table: Mapping[str, Any], path: KeyPath, key: str, default: float) -> float:
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
                   profiles: Mapping[str, Any], parsed: Mapping[str, Profile]) -> ExperimentSpec | None:
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
        baseline: str | None = None
        if any(k in table for k in ("base", "baseline", "vary")):
            baseline, variants, problems = expand_grid(table, path, parsed)
            for problem in problems:
                self.problem(*problem)
            if names is not None:
                self.problem(key_path, "a grid's profiles are its baseline and its variants; drop `profiles`")
            self.variants.update((v.name, v) for v in variants)
            names = [baseline, *(v.name for v in variants)] if variants else []
        elif names is None:
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
            baseline=baseline,
        )

    def levels(self, table: Mapping[str, Any], path: KeyPath,
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

    def rates(self, table: Mapping[str, Any], path: KeyPath, default: tuple[float, ...] = ()) -> tuple[float, ...]:
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

    def slo(self, table: Mapping[str, Any], path: KeyPath, default: Mapping[str, float]) -> Mapping[str, float]:
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


def one_wave_problem(requests: int | None, levels: Sequence[int]) -> str | None:
    """Why `requests` per level cannot measure the highest of `levels` (None when it can, or when levels end by
    their duration: `requests` None): a level must run at least one full wave.

    With fewer requests than C, no moment of the level has C requests in flight, so its figures would be
    labelled with a concurrency it never reached.
    """
    top = max(levels)
    if requests is None or requests >= top:
        return None
    return (f"requests per level ({requests}) is below the highest level C={top}: a level needs at least one full "
            f"wave of C requests; raise requests to {top} or more, or drop the higher levels")
