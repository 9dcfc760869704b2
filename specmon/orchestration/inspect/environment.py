"""Shared verbs behind `specmon env`, `specmon diff`, `specmon gpus` and the TUI's GPU/env pane.

    report = await env_report(manager, "profile" | "run_id")    -> EnvReport
    a, b, diffs = await diff_targets(manager, "A", "B", everything=False)
    board, known = await gpu_board(manager, host)                 -> (GpuBoard, {run_id: profile})
    transport = await gpu_transport(manager, profile)             -> where its GPUs are read

A Slurm run's processes and GPUs are on its job's node: while the job runs, the start-up probe, the processes and
the GPU inventory (and `gpu_board` of the run or its profile) go there through the allocation (`srun --overlap`).

A profile name means the profile (and its live run, if one is running: then its processes and log count too); a
run id means that run (its launch arguments as recorded at launch, its log, its processes while it lives). Every
probe that cannot answer leaves a one-line note in the report instead of failing the whole report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from specmon.errors import UserError
from specmon.model.config import Profile
from specmon.model.machine.env import (
    Difference,
    EnvReport,
    NcclLog,
    ProcessEnv,
    Startup,
    diff_reports,
    key_launch_args,
)
from specmon.model.machine.gpu import GpuBoard, SmiInventory
from specmon.model.runs.record import RunRecord
from specmon.model.text.secrets import redact_env
from specmon.model.text.textfile import loads
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.slurmjobs import job_transport
from specmon.sources.env import EnvProbeError, gpu_inventory, nccl_log, run_processes, startup
from specmon.sources.gpu import snapshot
from specmon.sources.hostshell import RUN_ID
from specmon.sources.transport import Transport, TransportError

T = TypeVar("T")


async def _noted(probe: Awaitable[T], notes: list[str]) -> T | None:
    try:
        return await probe
    except EnvProbeError as exc:
        notes.append(str(exc))
        return None


def _target(manager: RunManager, target: str) -> tuple[Profile | None, RunRecord | None]:
    """(profile, run) named by `target`: a run id, or a profile and its latest run that may still be running. A
    multi-node run stands for its rank 0 node (where the server answers)."""
    record = manager.index.store.load(target) if RUN_ID.match(target) else None
    if record is not None and record.nodes:
        record = manager.index.store.load(record.nodes[0]) or record
    if record is not None:
        return manager.config.profiles.get(record.profile), record
    profile = manager.config.profiles.get(target)
    if profile is None:
        known = ", ".join(sorted(manager.config.profiles)) or "none"
        raise UserError(f"{target!r} is neither a profile of {manager.config.source} (known: {known}) "
                        "nor a known run id (see `specmon status`)")
    live = [r for r in manager.index.store.all() if r.profile == profile.name and not r.terminal and r.group is None]
    if live and live[-1].nodes:
        return _target(manager, live[-1].run_id)
    return profile, (live[-1] if live else None)


def _versions(started: Startup | None, inventory: SmiInventory | None) -> dict[str, str]:
    versions = dict(started.versions) if started is not None else {}
    if inventory is not None:
        if inventory.driver_version:
            versions["nvidia driver"] = inventory.driver_version
        if inventory.cuda_version:
            versions["cuda (driver)"] = inventory.cuda_version
        names = [g.name for g in inventory.gpus]
        if names:
            versions["gpu"] = ", ".join(f"{names.count(n)}x {n}" for n in sorted(set(names)))
    return versions


async def env_report(manager: RunManager, target: str) -> EnvReport:
    """Everything about how `target` (profile or run id) is set up; see the module docstring."""
    profile, record = _target(manager, target)
    host = record.host if record is not None else profile.host if profile is not None else "local"
    files = manager.ops(host).transport   # the log is on the host (a Slurm run's: the shared run directory)
    transport = await _job_node(manager, record) or files
    where = transport.host   # where the server runs: the host, or a Slurm job's node
    notes: list[str] = []
    argv: list[str] = list(profile.command) if profile is not None else []
    if record is not None:
        subject = f"run {record.run_id} (profile {record.profile}, {record.state})"
        meta = await manager.ops(host).read_file(f"{record.run_dir}/meta.json")
        try:
            data = loads(meta or "{}")
            recorded = data.get("argv") if isinstance(data, dict) else None
            if isinstance(recorded, list):
                argv = [str(word) for word in recorded]
        except ValueError:
            notes.append(f"{host}: {record.run_dir}/meta.json is not JSON; launch arguments from the profile")
    else:
        assert profile is not None
        subject = f"profile {profile.name}"
    if profile is None:
        notes.append(f"profile {record.profile if record else target} is no longer in {manager.config.source}: "
                     "no launch env or start-up probe")

    async def startup_() -> Startup | None:
        if profile is None:
            return None
        return await _noted(startup(transport, profile.python, profile.env, profile.workdir), notes)

    async def processes_() -> tuple[ProcessEnv, ...] | None:
        if record is None or record.terminal:
            return None
        wrapper = record.pid
        if record.slurm_job is not None:   # the wrapper's pid as its node sees it, from the shared run directory
            text = (await manager.ops(record.host).read_file(f"{record.run_dir}/pid") or "").strip()
            wrapper = int(text) if text.isdigit() else None
        return await _noted(run_processes(transport, record.run_id, wrapper), notes)

    async def log_() -> NcclLog | None:
        return None if record is None else await _noted(nccl_log(files, record.log_path), notes)

    async def inventory_() -> SmiInventory | None:
        try:
            found = await gpu_inventory(transport)
        except EnvProbeError as exc:
            notes.append(str(exc))
            return None
        if found is None:
            notes.append(f"{where}: no nvidia-smi: no NVIDIA driver, CUDA driver or GPU versions")
        return found

    started, inventory, processes, nccl = await asyncio.gather(startup_(), inventory_(), processes_(), log_())
    if started is not None and not started.versions:
        notes.append(f"{where}: {started.python} has none of torch, sglang, vllm, transformers, flashinfer, the NCCL "
                     "wheel or triton installed: no framework versions")
    facts = {}
    if record is not None and record.kv_cache_tokens is not None:
        facts["kv cache tokens"] = str(record.kv_cache_tokens)
    return EnvReport(
        subject=subject, host=where, launch_env=redact_env(profile.env) if profile is not None else {},
        startup=started, processes=processes or (), nccl=nccl, args=key_launch_args(argv),
        versions=_versions(started, inventory), facts=facts, notes=tuple(notes))


async def diff_targets(manager: RunManager, a: str, b: str,
                       everything: bool = False) -> tuple[EnvReport, EnvReport, list[Difference]]:
    """The reports of two profiles or runs and their differences."""
    left, right = await asyncio.gather(env_report(manager, a), env_report(manager, b))
    return left, right, diff_reports(left, right, everything)


async def _job_node(manager: RunManager, record: RunRecord | None) -> Transport | None:
    """A running Slurm run's node, through its job's allocation; None for any other run."""
    if record is None or record.slurm_job is None:
        return None
    try:
        return await job_transport(manager.ops(record.host), record)
    except (TransportError, TimeoutError) as exc:
        raise UserError(str(exc)) from None


async def gpu_transport(manager: RunManager, target: str) -> Transport:
    """Where the GPUs of `target` are read: a host's own; a Slurm run's (its id) or a Slurm profile's (its latest
    run) on its job's node, through the allocation (UserError while no job of it runs); a run's or any other
    profile's on its host. The one choice behind `specmon gpus` and the TUI's GPU pane."""
    profile = manager.config.profiles.get(target)
    record = manager.index.store.load(target) if RUN_ID.match(target) else None
    if profile is not None and profile.slurm is not None:
        record = _target(manager, target)[1]
    elif profile is not None:
        return manager.ops(profile.host).transport
    if record is None and profile is None:
        return manager.ops(target).transport
    if record is not None and record.slurm_job is None:
        return manager.ops(record.host).transport
    transport = await _job_node(manager, record)
    if transport is None:
        raise UserError(f"{target}: no Slurm job of it is running (its GPUs are those of the node Slurm gives it)")
    return transport


async def gpu_board(manager: RunManager, host: str, timeout_s: float = 20.0) -> tuple[GpuBoard, dict[str, str]]:
    """One reading of the GPUs of `host` (see gpu_transport: a host, profile or run) and their holders, with the
    runs this specmon knows (run id -> profile)."""
    board = await snapshot(await gpu_transport(manager, host), timeout_s=timeout_s)
    return board, {r.run_id: r.profile for r in manager.index.store.all()}
