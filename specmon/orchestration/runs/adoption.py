"""Runs found on a host that this specmon does not know (launched from another machine, or before the state
directory was wiped): `host_runs` lists them, `adopt` takes one into the index and checks it at once.

A multi-node Slurm job's ranks have one run directory each (RUN-n0, RUN-n1, …, their meta.json naming the run
RUN as their group) and one job named after RUN: it is listed and adopted as the one run RUN, every rank with it."""

from __future__ import annotations

import dataclasses
import shlex
import time
from dataclasses import dataclass
from datetime import datetime

from specmon.errors import UserError
from specmon.model.logs.clean import escape_controls
from specmon.model.runs.record import RunRecord, host_url
from specmon.model.runs.runstatus import RunStatus
from specmon.model.runs.slurm import JobInfo
from specmon.model.text.textfile import loads
from specmon.orchestration.runs import multinode, slurmjobs
from specmon.orchestration.runs.connections import HostPool
from specmon.orchestration.runs.index import RunIndex
from specmon.orchestration.runs.reconciler import Reconciler, replay
from specmon.orchestration.runs.view import RunView
from specmon.sources.hostshell import RUN_ID, HostOps
from specmon.sources.slurm import SlurmHost
from specmon.sources.transport import SMALL_FILE_BYTES, TransportError


@dataclass(frozen=True)
class HostRun:
    """A run directory found on a host that the local index does not know (adoptable)."""

    run_id: str
    profile: str
    port: int
    launched_at: str          # as meta.json says (UTC ISO-8601)
    pid: int | None
    running: bool
    exit_code: int | None


def _int_or(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _epoch(iso: object) -> float | None:
    """Epoch seconds of an ISO-8601 time as iso_utc writes it (None if it is not one)."""
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Adopter:
    """Finds and adopts runs on a host that the index does not know."""

    def __init__(self, index: RunIndex, hosts: HostPool, reconciler: Reconciler) -> None:
        self.index = index
        self.hosts = hosts
        self.reconciler = reconciler

    async def host_runs(self, host: str) -> list[HostRun]:
        """Runs whose directory is on `host` (in either runs root) but which this specmon does not know."""
        ops = self.hosts.ops(host)
        roots = await ops.run_roots()
        root = " and ".join(roots)
        # One round trip: each meta.json, its pid and exit code, separated by RS characters.
        code, out, err = await ops.sh(
            f"for d in {' '.join(shlex.quote(r) + '/*/' for r in roots)}; do [ -f \"$d/meta.json\" ] || continue; "
            f"head -c {SMALL_FILE_BYTES} -- \"$d/meta.json\"; "
            "printf '\\036'; cat -- \"$d/pid\" 2>/dev/null; printf '\\036'; cat -- \"$d/exit_code\" 2>/dev/null; "
            "printf '\\035'; done; true", timeout=60)
        if code != 0:
            raise UserError(f"{host}: cannot list {root}: {err or f'exit {code}'}")
        known = {r.run_id for r in self.index.store.all()}
        found: list[HostRun] = []
        for entry in out.split("\x1d"):
            meta_text, _, rest = entry.partition("\x1e")
            pid_text, _, exit_text = rest.partition("\x1e")
            try:
                meta = loads(meta_text)   # one cut at SMALL_FILE_BYTES is not JSON: skipped
            except ValueError:
                continue
            run_id = str(meta.get("run_id", "")) if isinstance(meta, dict) else ""
            if meta.get("slurm") and isinstance(meta.get("group"), str):   # a rank of a multi-node job: its run
                run_id = meta["group"]
            if not RUN_ID.match(run_id) or run_id in known or any(r.run_id == run_id for r in found):
                continue
            pid = int(pid_text) if pid_text.strip().isdigit() else None
            if meta.get("slurm"):   # a job's pid is its node's: Slurm says whether it still runs (or waits)
                running = await SlurmHost(ops.transport).find(run_id) is not None
            else:
                info = await ops.proc(pid) if pid else None
                running = info is not None and info.alive
            found.append(HostRun(
                run_id=run_id, profile=str(meta.get("profile") or "?"), port=_int_or(meta.get("port"), 0),
                launched_at=str(meta.get("launched_at") or ""), pid=pid, running=running,
                exit_code=int(exit_text) if exit_text.strip().lstrip("-").isdigit() else None))
        return sorted(found, key=lambda r: r.run_id)

    async def adopt(self, host: str, run_id: str) -> RunView:
        """Take a run found on `host` into the local index (then `status`, `wait`, `logs`, `stop` and the TUI know
        it). Its state is checked at once; a run that already ended gets its verdict from the files it left."""
        if not RUN_ID.match(run_id):
            raise UserError(f"bad run id {run_id!r}")
        if self.index.store.load(run_id) is not None:
            raise UserError(f"run {run_id} is already known here (see `specmon status`)")
        ops = self.hosts.ops(host)
        run_dir, meta = await self._meta(ops, run_id)
        if meta is None:   # a multi-node Slurm job's run has no directory of its own: its rank 0 has
            _, first = await self._meta(ops, multinode.node_run_id(run_id, 0))
            if first is not None and first.get("slurm") and first.get("group") == run_id:
                return await self._adopt_nodes(ops, host, run_id)
            raise UserError(f"{host}: no run {run_id} (no readable {run_dir}/meta.json)")
        group = meta.get("group")
        if meta.get("slurm") and isinstance(group, str):
            return await self.adopt(host, group)   # a rank: the whole job is one run
        pid_text = (await ops.read_file(f"{run_dir}/pid") or "").strip()
        pid = int(pid_text) if pid_text.isdigit() else None
        info = await ops.proc(pid) if pid else None
        alive = info is not None and info.alive
        record = dataclasses.replace(
            self._record(host, run_id, run_dir, meta), state=RunStatus.LOADING if pid else RunStatus.LAUNCHING,
            # Adopted while alive: the start time read now guards against PID reuse from here on.
            pid=pid, starttime=info.starttime if alive and info else None,
            boot_id=await ops.boot_id() if alive else "")
        try:
            if meta.get("slurm"):
                # A Slurm job (from any jump box): found by its name; its pid means nothing on this host.
                job = await SlurmHost(ops.transport).find(run_id)
                record = await self._with_job(ops, dataclasses.replace(record, pid=None, starttime=None, boot_id=""), job)
            self.index.store.save(record)
            record = await self.reconciler.reconcile(record) if not record.terminal else record
        except TransportError as exc:
            raise UserError(str(exc)) from None
        return self.index.static_view(record)

    async def _meta(self, ops: HostOps, run_id: str) -> tuple[str, dict[str, object] | None]:
        """The run directory of `run_id` on the host and its meta.json (None: none readable there)."""
        for root in await ops.run_roots():   # the XDG runs root first, then the one of earlier versions
            run_dir = f"{root}/{run_id}"
            text = await ops.read_file(f"{run_dir}/meta.json")
            if text is not None:
                break
        try:
            meta = loads(text or "")
        except ValueError:
            meta = None
        return run_dir, meta if isinstance(meta, dict) and meta.get("run_id") == run_id else None

    def _record(self, host: str, run_id: str, run_dir: str, meta: dict[str, object]) -> RunRecord:
        """The record of a run found on `host` as its meta.json describes it (launching, no process known)."""
        profile = self.index.config.profiles.get(str(meta.get("profile")))
        port = _int_or(meta.get("port"), 0)
        if not 1 <= port <= 65535:
            raise UserError(f"{host}: {run_dir}/meta.json: port: {escape_controls(repr(meta.get('port')))[:40]} is not a "
                            "TCP port (1-65535); not adopted")
        return RunRecord(
            run_id=run_id, profile=str(meta.get("profile") or run_id), host=host, run_dir=run_dir, port=port,
            url=host_url(port), server=str(meta.get("server") or "sglang"),
            health_path=profile.health_path if profile else "/health",
            stall_timeout_s=profile.stall_timeout_s if profile else 300.0, notify_cmd=None,
            expected_load_s=profile.expected_load_s if profile else None,
            started_at=_epoch(meta.get("launched_at")) or time.time())

    async def _adopt_nodes(self, ops: HostOps, host: str, run_id: str) -> RunView:
        """A multi-node Slurm job found on `host`: a record for each rank (RUN-n0, RUN-n1, … while their
        directories say they belong to it) and one for the run, the job found by the run's name."""
        nodes: list[RunRecord] = []
        while True:
            node_id = multinode.node_run_id(run_id, len(nodes))
            run_dir, meta = await self._meta(ops, node_id)
            if meta is None or meta.get("group") != run_id:
                break
            dist = meta.get("dist_init_addr")
            nodes.append(dataclasses.replace(self._record(host, node_id, run_dir, meta), group=run_id,
                                             node_rank=len(nodes), dist_init_addr=dist if isinstance(dist, str) else None))
        if any(self.index.store.load(node.run_id) is not None for node in nodes):
            raise UserError(f"a rank of run {run_id} is already known here (see `specmon status`)")
        try:
            job = await SlurmHost(ops.transport).find(run_id)
            nodes = [await self._with_job(ops, node, job) for node in nodes]
            self.index.store.save(dataclasses.replace(nodes[0], run_id=run_id, group=None, node_rank=None,
                                                      dist_init_addr=None, slurm_job=None, state=RunStatus.LAUNCHING,
                                                      nodes=tuple(node.run_id for node in nodes)))
            for node in nodes:
                self.index.store.save(node)
                if not node.terminal:
                    await self.reconciler.reconcile(node)
        except TransportError as exc:
            raise UserError(str(exc)) from None
        record = self.index.store.load(run_id)
        assert record is not None
        view = self.index.static_view(record)
        multinode.save_progress(self.index.store, run_id, view)
        return view

    async def _with_job(self, ops: HostOps, record: RunRecord, job: JobInfo | None) -> RunRecord:
        """A found Slurm run (or a rank of one): its job (found by the run's name) while Slurm still lists it,
        else its verdict from the files it left."""
        if job is not None:
            return dataclasses.replace(record, slurm_job=job.job_id, state=RunStatus.LAUNCHING)
        rs, _ = await replay(ops, record)
        return (await slurmjobs.reconcile(ops, record, None, rs))(record)
