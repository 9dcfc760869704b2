"""`specmon gpus [HOST] [--json]`: the host's GPUs now (memory, utilisation, power, temperature, SM clock) and
which run's processes hold each; a process of no specmon run is flagged. Exit code 2 when nvidia-smi cannot answer."""

from __future__ import annotations

import argparse
import json

from specmon.commands._lifecycle import run_with_manager
from specmon.errors import UserError
from specmon.model.logs.clean import escape_controls, one_line
from specmon.model.machine.gpu import GpuTrack
from specmon.orchestration.inspect.environment import gpu_board
from specmon.orchestration.runs.manager import RunManager


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("gpus", help="GPUs of a host and the runs holding them", description=__doc__)
    parser.add_argument("host", nargs="?", default="local",
                        help="\"local\" (default), a host, a profile or run (its host), or a Slurm profile or run "
                        "(its job's node, through srun --overlap)")
    parser.add_argument("--json", action="store_true",
                        help="{host, gpus: [{index, uuid, name, memory_used_mib, memory_total_mib, "
                        "utilization_pct, power_w, power_limit_w, temperature_c, sm_clock_mhz, fault, holders: "
                        "[{pid, used_mib, run_id, profile, description}]}], apps_error}")
    parser.set_defaults(func=run)


def _num(value: float | None, unit: str, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def _line(track: GpuTrack, known: dict[str, str]) -> list[str]:
    g = track.latest
    mem = f"{_num(g.memory_used_mib, '')}/{_num(g.memory_total_mib, ' MiB')}"
    head = (f"GPU{g.index if g.index is not None else '?'}  {g.name or '?'}  {g.uuid}  mem {mem}  "
            f"util {_num(g.utilization_pct, '%')}  power {_num(g.power_w, ' W')}/{_num(g.power_limit_w, ' W')}  "
            f"temp {_num(g.temperature_c, ' C')}  sm {_num(g.sm_clock_mhz, ' MHz')}")
    if g.fault:
        head += f"  FAULT: {g.fault}"
    holders = [f"  {_holder(h.describe(known), h.run_id, known)}  {_num(h.used_mib, ' MiB')}" for h in track.holders]
    return [head] + (holders or ["  free"])


def _holder(text: str, run_id: str | None, known: dict[str, str]) -> str:
    return f"{text} profile {known[run_id]}" if run_id in known and run_id is not None else text


def run(args: argparse.Namespace) -> int:
    async def body(manager: RunManager) -> int:
        board, known = await gpu_board(manager, args.host)
        if board.error and not board.tracks:
            raise UserError(board.error)
        gpus = board.gpus()
        if args.json:
            print(json.dumps({"host": args.host, "apps_error": board.apps_error, "gpus": [{
                "index": t.latest.index, "uuid": t.uuid, "name": t.latest.name,
                "memory_used_mib": t.latest.memory_used_mib, "memory_total_mib": t.latest.memory_total_mib,
                "utilization_pct": t.latest.utilization_pct, "power_w": t.latest.power_w,
                "power_limit_w": t.latest.power_limit_w, "temperature_c": t.latest.temperature_c,
                "sm_clock_mhz": t.latest.sm_clock_mhz, "fault": t.latest.fault,
                "holders": [{"pid": h.pid, "used_mib": h.used_mib, "run_id": h.run_id,
                             "profile": known.get(h.run_id) if h.run_id else None,
                             "description": h.describe(known)} for h in t.holders],
            } for t in gpus]}, indent=2))
            return 0
        for track in gpus:
            print("\n".join(escape_controls(line) for line in _line(track, known)))   # names come from the host
        if board.apps_error:
            print(one_line(f"note: holders unknown: {board.apps_error}"))
        return 0

    return run_with_manager(args, body)
