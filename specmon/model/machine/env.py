"""A server's effective environment and set-up, as pure data: four views of its environment, its key launch
arguments, versions and server facts, and the differences between two of them.

The four environment views of one profile or run (`EnvReport`):
    launch     the profile's `env` table (what specmon exports before the command)
    injected   what the profile's `python` adds or changes while it starts (sitecustomize, usercustomize, .pth
               hooks), with the file that did it where it can be named
    process    /proc/PID/environ of the running server (and of each worker, shown where they differ)
    nccl log   NCCL's own "NCCL_X set by environment to V" lines and its version banner (NCCL_DEBUG=INFO)

`diff_reports(a, b)` lists every difference; `confounds(diffs)` turns them into one-line warnings for comparisons
and experiments. Secrets are redacted when a report is built (`secrets.redact_env`), so nothing downstream sees them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from specmon.model.text.numbers import counted
from specmon.model.text.secrets import REDACTED, is_secret_name, redact_env, redact_value

FAMILY_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "SGLANG_", "VLLM_", "NVSHMEM_", "OMP_")
# Set by specmon on every run: always differs, says nothing about the server.
# Set by specmon's launch wrapper or by the shell for every process, never by the user: not worth comparing.
IGNORED = frozenset({"SPECMON_RUN_ID", "PYTHONUNBUFFERED", "_", "SHLVL", "OLDPWD"})
_NCCL_SET = re.compile(r"NCCL INFO (NCCL_[A-Za-z0-9_]+) set by environment to (.*?)\s*$")
_NCCL_VERSION = re.compile(r"NCCL INFO NCCL version (\S+)")
VIEWS = ("launch", "injected", "process", "nccl log")


def is_relevant(name: str) -> bool:
    """Whether a variable belongs to the families that change GPU-server performance (the default filter)."""
    return name.startswith(FAMILY_PREFIXES) or name.endswith("_VISIBLE_DEVICES")


def parse_environ(data: bytes) -> dict[str, str]:
    """The NUL-separated NAME=VALUE entries of /proc/PID/environ (entries without '=' are skipped)."""
    env: dict[str, str] = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.decode("utf-8", errors="replace").partition("=")
        if sep and name:
            env[name] = value
    return env


@dataclass(frozen=True)
class NcclLog:
    """What NCCL itself reported in a server log (NCCL_DEBUG=INFO): its version and the variables it read."""

    version: str | None = None
    settings: dict[str, str] = field(default_factory=dict)


def parse_nccl_log(lines: Iterable[str]) -> NcclLog:
    """NCCL's version banner and "NCCL_X set by environment to V" lines (the last value of each name wins)."""
    version = None
    settings: dict[str, str] = {}
    for line in lines:
        match = _NCCL_SET.search(line)
        if match:
            settings[match.group(1)] = match.group(2)
            continue
        match = _NCCL_VERSION.search(line)
        if match:
            version = match.group(1)
    return NcclLog(version, redact_env(settings))


@dataclass(frozen=True)
class Injection:
    """A variable that the interpreter's start-up added (before None), changed or removed (value None)."""

    name: str
    value: str | None
    before: str | None
    file: str | None        # the sitecustomize.py / .pth that did it; None when it could not be told


@dataclass(frozen=True)
class Startup:
    """What running the profile's `python` found: its start-up injections and package versions."""

    python: str                                   # the interpreter that ran (sys.executable)
    injections: tuple[Injection, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)
    # The environment it started with, redacted: what the host's shell passes on plus the launch env, i.e. what a
    # server launched now would inherit.
    environ: dict[str, str] = field(default_factory=dict)


def parse_startup(data: Mapping[str, object]) -> Startup:
    """The start-up probe's JSON object (see specmon/sources/startup_probe.py); ValueError if malformed."""
    raw = data.get("injections", [])
    versions = data.get("versions", {})
    environ = data.get("environ", {})
    if not isinstance(raw, list) or not isinstance(versions, dict) or not isinstance(environ, dict):
        raise ValueError("start-up probe: malformed answer")
    injections = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError("start-up probe: malformed injection")
        name = item["name"]
        value, before, file = item.get("value"), item.get("before"), item.get("file")
        if is_secret_name(name):
            value = None if value is None else REDACTED
            before = None if before is None else REDACTED
        else:
            value = redact_value(value) if isinstance(value, str) else value
            before = redact_value(before) if isinstance(before, str) else before
        injections.append(Injection(name, value if isinstance(value, str) else None,
                                    before if isinstance(before, str) else None,
                                    file if isinstance(file, str) else None))
    return Startup(python=str(data.get("python", "")),
                   injections=tuple(sorted(injections, key=lambda i: i.name)),
                   versions={str(k): str(v) for k, v in versions.items()},
                   environ=redact_env({str(k): str(v) for k, v in environ.items()}))


@dataclass(frozen=True)
class ProcessEnv:
    """One live process of a run and its environment (redacted)."""

    pid: int
    name: str
    env: dict[str, str]
    role: str = "worker"        # "server" (the launch wrapper's child) or "worker"


# ---------------------------------------------------------------------------------------------------------------
# Launch arguments

# Option spellings (SGLang and vLLM) -> the label shown and compared.
_ARG_LABELS: dict[str, str] = {
    "--tp": "tp", "--tp-size": "tp", "--tensor-parallel-size": "tp", "-tp": "tp",
    "--dp": "dp", "--dp-size": "dp", "--data-parallel-size": "dp", "-dp": "dp",
    "--attention-backend": "attention backend", "--decode-attention-backend": "decode attention backend",
    "--prefill-attention-backend": "prefill attention backend",
    "--mem-fraction-static": "mem fraction", "--gpu-memory-utilization": "mem fraction",
    "--cuda-graph-bs": "cuda graph sizes", "--cuda-graph-sizes": "cuda graph sizes",
    "--cuda-graph-max-bs": "cuda graph max bs", "--max-seq-len-to-capture": "cuda graph max len",
    "--disable-cuda-graph": "cuda graph disabled", "--enforce-eager": "cuda graph disabled",
    "--quantization": "quantization", "-q": "quantization", "--kv-cache-dtype": "kv cache dtype",
    "--dtype": "dtype", "--num-speculative-tokens": "speculative tokens",
    "--max-running-requests": "max running requests", "--max-num-seqs": "max running requests",
    "--context-length": "context length", "--max-model-len": "context length",
    "--model-path": "model", "--model": "model",
}


# `specmon sim`'s own spellings (the demo's servers): its speculative set-up and its KV cache size, which are what
# the demo's two profiles differ in (a diff that left them out said "no differences" beside a KV warning).
_SIM_ARG_LABELS: dict[str, str] = {
    "--spec": "speculative algorithm", "--spec-steps": "speculative num steps",
    "--spec-step-cost": "speculative step cost", "--kv-tokens": "kv cache tokens",
}


def key_launch_args(argv: Sequence[str]) -> dict[str, str]:
    """The launch arguments that change performance, by label: tp, attention backend, mem fraction, speculative
    settings (every `--speculative-*` option, and `specmon sim`'s `--spec*`), KV cache size of `specmon sim`,
    CUDA-graph sizes, quantisation... Flags read as "true"; an option followed by several values
    (`--cuda-graph-bs 1 2 4`) keeps them all."""
    found: dict[str, str] = {}
    words = list(argv)
    sim = any(a.endswith("specmon") and b == "sim" for a, b in zip(words, words[1:]))
    labels = {**_ARG_LABELS, **_SIM_ARG_LABELS} if sim else _ARG_LABELS
    index = 0
    while index < len(argv):
        word = argv[index]
        index += 1
        if not word.startswith("-"):
            continue
        name, eq, inline = word.partition("=")
        label = labels.get(name) or (name[2:].replace("-", " ") if name.startswith("--speculative") else None)
        if label is None:
            continue
        if eq:
            found[label] = inline
            continue
        values = []
        while index < len(argv) and not (argv[index].startswith("-") and not _is_number(argv[index])):
            values.append(argv[index])
            index += 1
        found[label] = " ".join(values) if values else "true"
    return found


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------------------------
# A report and the difference of two


@dataclass(frozen=True)
class EnvReport:
    """Everything specmon knows about how one profile (or one run of it) is set up."""

    subject: str                                  # "profile NAME" or "run ID (profile NAME)"
    host: str
    launch_env: dict[str, str] = field(default_factory=dict)
    startup: Startup | None = None
    processes: tuple[ProcessEnv, ...] = ()
    nccl: NcclLog | None = None
    args: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)   # python packages + driver, CUDA, GPU model
    facts: dict[str, str] = field(default_factory=dict)      # server-reported: KV tokens, ...
    notes: tuple[str, ...] = ()                   # what could not be read, in one line each

    @property
    def server_env(self) -> dict[str, str] | None:
        """The server process's environment (None when no process of the run is live)."""
        for process in self.processes:
            if process.role == "server":
                return process.env
        return self.processes[0].env if self.processes else None

    def view(self, name: str) -> dict[str, str] | None:
        """One environment view by name (VIEWS) as {name: value}; None where it was not available."""
        if name == "launch":
            return dict(self.launch_env)
        if name == "injected":
            if self.startup is None:
                return None
            return {i.name: "(removed)" if i.value is None else i.value for i in self.startup.injections}
        if name == "process":
            return self.server_env
        if name == "nccl log":
            return None if self.nccl is None else dict(self.nccl.settings)
        raise KeyError(name)

    def effective(self) -> dict[str, str]:
        """The environment the server runs with: the process's when live, else what a launch now would give it:
        the environment the profile's python started with (inherited from the host's shell, plus the launch env),
        then the start-up injections."""
        live = self.server_env
        if live is not None:
            return dict(live)
        env = dict(self.startup.environ) if self.startup is not None else {}
        env.update(self.launch_env)
        for injection in self.startup.injections if self.startup is not None else ():
            if injection.value is None:
                env.pop(injection.name, None)
            else:
                env[injection.name] = injection.value
        return env

    def to_json(self, everything: bool = False) -> dict[str, object]:
        """A JSON-ready dict; env views keep only the families that matter unless `everything`."""
        keep = (lambda _: True) if everything else is_relevant

        def env(values: Mapping[str, str]) -> dict[str, str]:
            return {k: v for k, v in sorted(values.items()) if keep(k) and k not in IGNORED}

        server = self.server_env
        return {
            "subject": self.subject, "host": self.host,
            "launch_env": env(self.launch_env),
            "python": None if self.startup is None else self.startup.python,
            "injected": None if self.startup is None else [
                {"name": i.name, "value": i.value, "before": i.before, "file": i.file}
                for i in self.startup.injections],
            "process_env": None if server is None else env(server),
            "processes": [{"pid": p.pid, "name": p.name, "role": p.role,
                           "differs_from_server": env(worker_only(p.env, server or {}))}
                          for p in self.processes],
            "nccl_log": None if self.nccl is None else {"version": self.nccl.version,
                                                        "settings": dict(sorted(self.nccl.settings.items()))},
            "args": dict(self.args), "versions": dict(sorted(self.versions.items())), "facts": dict(self.facts),
            "notes": list(self.notes),
        }


def worker_only(env: Mapping[str, str], server: Mapping[str, str]) -> dict[str, str]:
    """The variables of a worker that differ from the server's ("(unset)" for those it lacks)."""
    out = {k: v for k, v in env.items() if server.get(k) != v}
    out.update({k: "(unset)" for k in server if k not in env})
    return out


@dataclass(frozen=True)
class Difference:
    """One thing that differs between two reports: section ("env: injected", "args", "versions", "facts"),
    the key, and each side's value (None: not set / not known)."""

    section: str
    key: str
    a: str | None
    b: str | None

    def describe(self) -> str:
        """"NCCL_PROTO: LL vs (unset) [env: injected]"."""
        return f"{self.key}: {self.a if self.a is not None else '(unset)'} vs " \
               f"{self.b if self.b is not None else '(unset)'} [{self.section}]"


def diff_reports(a: EnvReport, b: EnvReport, everything: bool = False) -> list[Difference]:
    """Every difference between two reports: each env view (families that matter unless `everything`), the key
    launch arguments, versions and server facts. Views missing on either side are compared as the effective
    environment instead, so a profile and a live run can still be compared."""
    keep = (lambda _: True) if everything else is_relevant
    diffs: list[Difference] = []

    def compare(section: str, left: Mapping[str, str], right: Mapping[str, str], filtered: bool) -> None:
        for key in sorted(set(left) | set(right)):
            if key in IGNORED or filtered and not keep(key):
                continue
            if left.get(key) != right.get(key):
                diffs.append(Difference(section, key, left.get(key), right.get(key)))

    for view in VIEWS:
        left, right = a.view(view), b.view(view)
        if left is not None and right is not None:
            compare(f"env: {view}", left, right, True)
    # A profile against a live run: compare what each server gets (launch env + injections vs the process's).
    if (a.view("process") is None) != (b.view("process") is None):
        compare("env: effective", a.effective(), b.effective(), True)
    compare("args", a.args, b.args, False)
    compare("versions", a.versions, b.versions, False)
    compare("facts", a.facts, b.facts, False)
    return diffs


def confounds(diffs: Iterable[Difference]) -> list[str]:
    """One-line warnings for a comparison of two servers: what differs besides the thing being compared.

    The speculative settings are what specmon's comparisons compare, so they are left out; so are KV tokens, which
    the comparison's own rule judges (specmon.model.sweeps.compare). Environment differences are reported once per
    variable (the view that shows it first: injected beats launch beats process), so a sitecustomize setting
    NCCL_PROTO is named as such."""
    seen: set[str] = set()
    order = {"env: injected": 0, "env: launch": 1, "env: process": 2, "env: effective": 3, "env: nccl log": 4}
    lines = []
    for diff in sorted(diffs, key=lambda d: (order.get(d.section, 9), d.section, d.key)):
        if diff.section == "args" and diff.key.startswith("speculative") or diff.key == "kv cache tokens":
            continue
        if diff.section.startswith("env") and diff.key in seen:
            continue
        seen.add(diff.key)
        lines.append(f"differs: {diff.describe()}")
    return lines


# ---------------------------------------------------------------------------------------------------------------
# Text, for `specmon env` / `specmon diff` and the TUI pane


def _env_lines(values: Mapping[str, str], everything: bool, indent: str = "  ") -> tuple[list[str], int]:
    shown = {k: v for k, v in values.items() if k not in IGNORED and (everything or is_relevant(k))}
    return [f"{indent}{k}={v}" for k, v in sorted(shown.items())], len(values) - len(shown)


def report_lines(report: EnvReport, everything: bool = False) -> list[str]:
    """The report as plain text lines (families that matter only, unless `everything`)."""
    hidden = 0
    lines = [f"{report.subject} on {report.host}"]
    env, more = _env_lines(report.launch_env, everything)
    hidden += more
    lines += ["launch env (profile):"] + (env or ["  (none)"])
    if report.startup is not None:
        lines.append(f"injected at start-up by {report.startup.python}:")
        injected = [i for i in report.startup.injections if everything or is_relevant(i.name)]
        hidden += len(report.startup.injections) - len(injected)
        for item in injected:
            value = "(removed)" if item.value is None else item.value
            was = f" (was {item.before})" if item.before is not None else ""
            lines.append(f"  {item.name}={value}{was}  by {item.file or 'site start-up (file unknown)'}")
        if not injected:
            lines.append("  (nothing)")
    server = report.server_env
    for process in report.processes:
        if server is not None and process.env is server:
            env, more = _env_lines(process.env, everything)
            hidden += more
            lines += [f"process env ({process.role} pid {process.pid} {process.name}):"] + (env or ["  (none)"])
        else:
            env, _ = _env_lines(worker_only(process.env, server or {}), everything, "    ")
            lines.append(f"  {process.role} pid {process.pid} {process.name}: "
                         + ("same" if not env else "differs:"))
            lines += env
    if report.nccl is not None and (report.nccl.version or report.nccl.settings):
        lines.append(f"nccl log: version {report.nccl.version or '?'}")
        lines += [f"  {k}={v}" for k, v in sorted(report.nccl.settings.items())]
    if report.args:
        lines.append("launch args: " + ", ".join(f"{k}={v}" for k, v in report.args.items()))
    if report.versions:
        lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(report.versions.items())))
    if report.facts:
        lines.append("facts: " + ", ".join(f"{k} {v}" for k, v in report.facts.items()))
    lines += [f"note: {note}" for note in report.notes]
    if hidden and not everything:
        lines.append(f"({counted(hidden, 'other variable')} not shown; --all shows them)")
    return lines


def diff_lines(a: EnvReport, b: EnvReport, diffs: Sequence[Difference]) -> list[str]:
    """The differences as aligned text lines, one per difference, grouped by section."""
    lines = [f"A: {a.subject} on {a.host}", f"B: {b.subject} on {b.host}"]
    if not diffs:
        return lines + ["no differences"]
    width = max(len(d.key) for d in diffs)
    section = None
    for diff in diffs:
        if diff.section != section:
            section = diff.section
            lines.append(f"{section}:")
        left = diff.a if diff.a is not None else "(unset)"
        right = diff.b if diff.b is not None else "(unset)"
        lines.append(f"  {diff.key.ljust(width)}  A {left}  |  B {right}")
    return lines
