"""Environment probes of one host, through a Transport (shell commands with shlex-quoted arguments only):

    await startup(transport, python, env, workdir)   -> Startup  (the profile's python: injections, versions)
    await run_processes(transport, run_id, wrapper_pid) -> tuple[ProcessEnv, ...]  (/proc/PID/environ)
    await nccl_log(transport, log_path)              -> NcclLog  (NCCL's own lines in the server log)
    await gpu_inventory(transport)                   -> SmiInventory | None  (`nvidia-smi -q -x`)

Each raises EnvProbeError with a one-line reason naming the host when it cannot answer; the pure parsing is in
specmon.model.machine.env and specmon.model.machine.gpu.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from specmon.model.logs.clean import one_line
from specmon.model.machine.env import NcclLog, ProcessEnv, Startup, parse_environ, parse_nccl_log, parse_startup
from specmon.model.machine.gpu import SmiError, SmiInventory, parse_xml
from specmon.model.text.secrets import redact_env
from specmon.sources.hostshell import RUN_ID
from specmon.sources.transport import Transport, TransportError

_STARTUP_MARK = "<<specmon-startup>>"
_PID_MARK = re.compile(rb"\n<<specmon-pid (\d+) (\d+) ([^\n]*)>>\n")
# The NCCL lines are few; the log may be gigabytes, so grep on the host and bring back only the tail.
NCCL_LINES = 5000


class EnvProbeError(Exception):
    """A probe could not answer; the message is one line and names the host."""


def launch_prefix(env: Iterable[tuple[str, str]], workdir: str | None) -> str:
    """Shell words that reproduce the launch wrapper's environment and directory for a following command."""
    exports = "".join(f"export {name}={shlex.quote(value)}; " for name, value in env)
    cd = f"cd {shlex.quote(workdir)} && " if workdir else ""
    return exports + cd


async def startup(transport: Transport, python: str, env: Iterable[tuple[str, str]], workdir: str | None,
                  timeout_s: float = 60.0) -> Startup:
    """Run `python -S -` with the launch env and the start-up probe on stdin; what site initialisation injected."""
    script = (Path(__file__).with_name("startup_probe.py")).read_bytes()
    command = f"{launch_prefix(env, workdir)}exec {shlex.quote(python)} -S - 2>&1"
    try:
        result = await transport.run(command, input=script, timeout=timeout_s)
    except TimeoutError:
        raise EnvProbeError(f"{transport.host}: {python} did not finish starting within {timeout_s:.0f} s") from None
    except TransportError as exc:
        raise EnvProbeError(str(exc)) from None
    text = result.out
    if _STARTUP_MARK not in text:
        last = text.strip().splitlines()[-1] if text.strip() else f"exit {result.exit_code}"
        raise EnvProbeError(f"{transport.host}: cannot run the profile's python {python}: {last}")
    try:
        data = json.loads(text.rsplit(_STARTUP_MARK, 1)[1].strip().splitlines()[0])
        probe = parse_startup(data)
    except (ValueError, IndexError) as exc:
        raise EnvProbeError(f"{transport.host}: start-up probe of {python}: {exc}") from None
    if isinstance(data.get("error"), str):
        raise EnvProbeError(f"{transport.host}: {python}: {data['error']}")
    return probe


async def run_processes(transport: Transport, run_id: str, wrapper_pid: int | None) -> tuple[ProcessEnv, ...]:
    """Every live process carrying the run's SPECMON_RUN_ID, with its environment (redacted). The server is the
    launch wrapper's child; the others are workers. The wrapper itself carries the marker too (stop checks it) but
    is not part of the server, so it is left out. Processes whose environ cannot be read are skipped."""
    if not RUN_ID.match(run_id):
        raise ValueError(f"bad run id {run_id!r}")
    marker = shlex.quote(f"SPECMON_RUN_ID={run_id}")
    command = (
        f"for f in $(grep -lzx -- {marker} /proc/[0-9]*/environ 2>/dev/null); do "
        "p=${f#/proc/}; p=${p%/environ}; "
        "pp=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$p/status 2>/dev/null); "
        "printf '\\n<<specmon-pid %s %s %s>>\\n' \"$p\" \"${pp:-0}\" \"$(cat /proc/$p/comm 2>/dev/null)\"; "
        "cat /proc/$p/environ 2>/dev/null; done; true")
    try:
        result = await transport.run(command, timeout=30)
    except (TimeoutError, TransportError) as exc:
        raise EnvProbeError(f"{transport.host}: cannot read the run's processes: {exc}") from None
    parts = _PID_MARK.split(result.stdout)
    processes = []
    for index in range(1, len(parts) - 3, 4):
        pid, ppid, name, environ = int(parts[index]), int(parts[index + 1]), parts[index + 2], parts[index + 3]
        if pid == wrapper_pid:
            continue
        env = parse_environ(environ)
        if env:
            role = "server" if wrapper_pid is not None and ppid == wrapper_pid else "worker"
            processes.append(ProcessEnv(pid, name.decode("utf-8", errors="replace"), redact_env(env), role))
    return tuple(sorted(processes, key=lambda p: (p.role != "server", p.pid)))


async def nccl_log(transport: Transport, log_path: str) -> NcclLog:
    """NCCL's version banner and "set by environment" lines from a server log (empty when NCCL_DEBUG is off)."""
    command = (f"grep -a -E 'NCCL INFO (NCCL_[A-Za-z0-9_]+ set by environment|NCCL version)' -- "
               f"{shlex.quote(log_path)} 2>/dev/null | tail -n {NCCL_LINES}; true")
    try:
        result = await transport.run(command, timeout=60)
    except (TimeoutError, TransportError) as exc:
        raise EnvProbeError(f"{transport.host}: cannot read {log_path}: {exc}") from None
    return parse_nccl_log(result.out.splitlines())


async def gpu_inventory(transport: Transport, timeout_s: float = 30.0) -> SmiInventory | None:
    """Driver, CUDA driver version and GPU models from `nvidia-smi -q -x`; None where nvidia-smi is absent."""
    try:
        result = await transport.run("command -v nvidia-smi >/dev/null 2>&1 || exit 127; nvidia-smi -q -x",
                                     timeout=timeout_s)
    except TimeoutError:
        raise EnvProbeError(f"{transport.host}: nvidia-smi -q -x did not answer within {timeout_s:.0f} s") from None
    except TransportError as exc:
        raise EnvProbeError(str(exc)) from None
    if result.exit_code == 127:
        return None
    if result.exit_code != 0:   # e.g. 9: the driver is not loaded; nvidia-smi says why on its first line
        said = next((line.strip() for line in (result.out + "\n" + result.err).splitlines() if line.strip()), "")
        raise EnvProbeError(f"{transport.host}: nvidia-smi -q -x exited with status {result.exit_code}"
                            + (f": {one_line(said, 300)}" if said else ""))
    try:
        return parse_xml(result.out)
    except SmiError as exc:
        raise EnvProbeError(f"{transport.host}: {exc}") from None
