"""Launching a run: the preflight (what would make the launch fail, refused before anything starts), each host's
launch lock, and the start itself (run directory, launch.sh and meta.json on the host, the detached wrapper,
its pid in the record). A launch that fails before its server starts leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import time
from collections.abc import AsyncIterator, Sequence

from specmon.errors import PortBusy, UserError
from specmon.model.config import Profile
from specmon.model.runs.failure import Failure
from specmon.model.runs.record import NodeSeat, RunRecord, host_url, iso_utc
from specmon.model.runs.runstatus import RunStatus
from specmon.model.runs.slurm import MASTER_ADDR_VAR
from specmon.orchestration.runs import slurmjobs
from specmon.orchestration.runs.connections import HostPool
from specmon.orchestration.runs.index import RunIndex
from specmon.orchestration.runs.reconciler import PID_WAIT_S, Reconciler
from specmon.orchestration.runs.store import StateWriteError, new_run_id
from specmon.orchestration.runs.terminate import StopTimings, terminate
from specmon.sources.hostshell import HostOps, check_env, wrapper_script
from specmon.sources.transport import TransportError

LOCK_WAIT_S = 60.0        # a racing launch waits this long for the host's launch lock (a launch holds it ~1-10 s)


def check_profile(profile: Profile) -> None:
    """What is wrong with the profile itself: refused before anything reaches the host."""
    where = f"profile {profile.name}"
    check_env(profile.env, where)
    if not profile.command:
        raise UserError(f"{where}: command is empty")


class Launcher:
    """Preflights and starts runs, one host's launch lock at a time."""

    def __init__(self, index: RunIndex, hosts: HostPool, reconciler: Reconciler, stop_timings: StopTimings) -> None:
        self.index = index
        self.hosts = hosts
        self.reconciler = reconciler
        self.stop_timings = stop_timings   # how a server that started but cannot be recorded is stopped again

    async def preflight(self, profile: Profile, ops: HostOps, host: str) -> None:
        """Refuse a launch of `profile` on `host` that cannot work (UserError naming host, port or key)."""
        check_profile(profile)
        where = f"profile {profile.name}"
        for record in self.index.store.all():
            if record.host == host and record.port == profile.port and not record.terminal and not record.nodes:
                record = await self.reconciler.reconcile(record)
                if not record.terminal:
                    raise UserError(f"{where}: run {record.group or record.run_id} (profile {record.profile}) is "
                                    f"still {record.state} on {ops.host} port {record.port}; stop it first or use "
                                    "`specmon restart`")
        if profile.workdir and not await ops.workdir_exists(profile.workdir):
            raise UserError(f"{ops.host}: workdir {profile.workdir} does not exist ({where})")
        if profile.slurm is not None:
            return   # the server runs on a node Slurm picks: this host's ports and commands are not the node's
        for run_dir in await ops.live_runs_on_port(profile.port):
            raise UserError(f"{where}: run {run_dir.rsplit('/', 1)[1]} is still running on {ops.host} port "
                            f"{profile.port} ({run_dir}); stop it first")
        if profile.port in await ops.listening():
            others = [p.port for p in self.index.config.profiles.values() if p.host == host]
            busy = await ops.busy_port(profile.port, avoid=others)
            raise PortBusy(f"{ops.host}: port {profile.port} is already in use ({where}) {busy.by}; {busy.advice}",
                           profile.port, busy.free)
        if not await ops.find_command(profile.command[0], profile.env, profile.workdir):
            raise UserError(f"{ops.host}: command not found: {profile.command[0]} ({where}: command)")

    async def launch(self, profile: Profile) -> RunRecord:
        """Start a run of a single-node profile, detached from specmon. Returns once its pid is known.

        The host's launch lock is held from the preflight to the recorded pid, so of two racing launches for
        one port exactly one starts a server; the other fails the preflight. A launch that fails leaves no
        run directory and no record behind.
        """
        check_profile(profile)
        ops = self.hosts.ops(profile.host)
        try:
            async with self.launch_locks(profile, [profile.host]):
                await self.preflight(profile, ops, profile.host)
                record = await self.start_run(profile, profile.host, new_run_id(), profile.command)
        except TransportError as exc:
            raise UserError(str(exc)) from None
        return record

    @contextlib.asynccontextmanager
    async def launch_locks(self, profile: Profile, hosts: Sequence[str]) -> AsyncIterator[None]:
        """Hold the launch lock of every host in `hosts` (from the preflight to the recorded pids).

        Hosts are locked one by one in name order, so two launches over the same hosts never each hold one lock
        while waiting for the other's; two names for one machine (one lock directory) take its lock once."""
        token = f"{socket.gethostname()} pid {os.getpid()} {new_run_id()}"
        held: list[HostOps] = []
        try:
            for host in sorted(set(hosts)):
                ops = self.hosts.ops(host)
                await self._lock(ops, token, profile)
                held.append(ops)
            yield
        finally:
            for ops in reversed(held):
                with contextlib.suppress(TransportError, TimeoutError):
                    await asyncio.shield(ops.unlock(token))

    async def _lock(self, ops: HostOps, token: str, profile: Profile) -> None:
        deadline = time.monotonic() + LOCK_WAIT_S
        # Our own token as the holder: another name of a host already locked in this launch.
        while (holder := await ops.try_lock(token)) not in (None, token):
            if time.monotonic() >= deadline:
                raise UserError(f"{ops.host}: another launch holds the launch lock ({holder}) for over "
                                f"{LOCK_WAIT_S:.0f} s (profile {profile.name})")
            await asyncio.sleep(0.1)

    async def start_run(self, profile: Profile, host: str, run_id: str, argv: tuple[str, ...], *,
                        submit: bool = True, node: NodeSeat | None = None) -> RunRecord:
        """Make the run dir, write launch.sh and meta.json, start it detached and wait for its pid (a Slurm
        profile: submit launch.sh as its job; with `submit` False, not: a node rank of a multi-node job, which
        `slurmjobs.launch_nodes` submits once for every rank).

        `node`: the run is a node of a multi-node run (its record and meta.json say which; it notifies nobody:
        its multi-node run does). The record is saved before anything exists on the host (a full state disk stops
        us there, with nothing made); a failure before the start removes the run dir and the record again."""
        ops = self.hosts.ops(host)
        try:
            run_dir = f"{await ops.runs_root()}/{run_id}"
        except TransportError as exc:
            raise UserError(str(exc)) from None
        started_at = time.time()
        record = RunRecord(
            run_id=run_id, profile=profile.name, host=host, run_dir=run_dir, port=profile.port,
            url=profile.url or host_url(profile.port), server=profile.server, health_path=profile.health_path,
            stall_timeout_s=profile.stall_timeout_s, notify_cmd=profile.notify_cmd if node is None else None,
            expected_load_s=profile.expected_load_s, started_at=started_at, config=self.index.config_key,
            group=None if node is None else node.group, node_rank=None if node is None else node.rank,
            dist_init_addr=None if node is None else node.dist_init_addr)
        # Written before the start, so a crash right after still leaves a trace to reconcile.
        self.index.store.save(record)
        made = False
        try:
            problem = await ops.make_run_dir(run_dir)
            if problem is not None:
                raise UserError(f"{ops.host}: cannot create run directory {run_dir}: {problem}")
            made = True
            # A node of a multi-node job learns rank 0's address only when the job runs (its script exports it).
            runtime = {"{master_addr}": MASTER_ADDR_VAR} if profile.slurm is not None and node is not None \
                else None
            await ops.transport.write_file(f"{run_dir}/launch.sh", wrapper_script(
                run_dir, argv, profile.env, profile.workdir, run_id, runtime).encode())
            await ops.write_json(f"{run_dir}/meta.json", {
                "run_id": run_id, "profile": profile.name, "host": host, "argv": list(argv),
                "port": profile.port, "server": profile.server, "launched_at": iso_utc(started_at),
                "config": self.index.config_key, **({"slurm": True} if profile.slurm is not None else {}),
                **({} if node is None else
                   {"group": node.group, "node_rank": node.rank, "dist_init_addr": node.dist_init_addr}),
            })
            if profile.slurm is not None:
                # The job holds the run from here: its state says when the server starts (slurmjobs).
                if submit:
                    await slurmjobs.submit(ops, self.index.store, profile.slurm, run_id, run_dir, f"{run_dir}/launch.sh",
                                           [run_id])
                return self.index.store.load(run_id) or record
            await ops.start_detached(run_dir, run_id)
        except TransportError as exc:
            await asyncio.shield(self.unmake(ops, record, made))
            raise UserError(str(exc)) from None
        except BaseException:
            await asyncio.shield(self.unmake(ops, record, made))
            raise
        pid = await self._wait_pid(ops, run_dir)
        try:
            if pid is None:
                failure = Failure(RunStatus.EXITED, f"the launch wrapper did not start within {PID_WAIT_S:.0f} s")
                self.index.store.change(run_id, lambda r: dataclasses.replace(r, state=RunStatus.FAILED, failure=failure))
            else:
                info = await ops.proc(pid)
                starttime, boot_id = info.starttime if info else None, await ops.boot_id()
                self.index.store.change(run_id, lambda r: dataclasses.replace(
                    r, pid=pid, starttime=starttime, boot_id=boot_id, state=RunStatus.LOADING))
        except StateWriteError:
            # The server runs but cannot be recorded: end it rather than leave one specmon cannot see.
            if pid is not None:
                info = await ops.proc(pid)
                gone = dataclasses.replace(record, pid=pid, starttime=info.starttime if info else None)
                with contextlib.suppress(TransportError, TimeoutError):
                    await terminate(ops, gone, force=True, timings=self.stop_timings)
            await self.unmake(ops, record, True)
            raise
        return self.index.store.load(run_id) or record

    async def unmake(self, ops: HostOps, record: RunRecord, made: bool) -> None:
        """Undo a launch that failed before its server started: its run directory and its record."""
        with contextlib.suppress(TransportError, TimeoutError, ValueError):
            if made:
                await ops.remove_run_dir(record.run_dir)
        with contextlib.suppress(StateWriteError):
            self.index.store.forget(record.run_id)

    async def _wait_pid(self, ops: HostOps, run_dir: str) -> int | None:
        deadline = time.monotonic() + PID_WAIT_S
        while time.monotonic() < deadline:
            text = await ops.read_file(f"{run_dir}/pid")
            if text and text.strip().isdigit():
                return int(text.strip())
            await asyncio.sleep(0.02)
        return None
