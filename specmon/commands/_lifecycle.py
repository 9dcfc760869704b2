"""Shared by the lifecycle commands (launch, stop, restart, status, wait, logs): config, engine, formatting."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable

from specmon.model.config import Config, load_config
from specmon.model.runs.runstate import LogPhase
from specmon.model.runs.runstatus import STARTING, RunStatus
from specmon.model.text.secrets import redact_text
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.view import RunView, StopReport

EXIT_READY, EXIT_FAILED, EXIT_STALLED = 0, 1, 3


def config_for(args: argparse.Namespace) -> Config:
    """The profiles file chosen by --config / discovery; its warnings (nothing failed) go to stderr."""
    config = load_config(getattr(args, "config", None))
    for warning in config.warnings:
        print(f"specmon: warning: {warning}", file=sys.stderr)
    return config


def manager_for(args: argparse.Namespace, stop_timings: StopTimings = StopTimings()) -> RunManager:
    """A RunManager over the profiles file chosen by --config / discovery, stopping runs with `stop_timings`."""
    return RunManager(config_for(args), stop_timings=stop_timings)


def run_with_manager(args: argparse.Namespace, body: Callable[[RunManager], Awaitable[int]], *,
                     stop_timings: StopTimings = StopTimings()) -> int:
    """Run `body(manager)` in a fresh event loop; the manager's tasks are always cancelled at the end."""

    async def go() -> int:
        manager = manager_for(args, stop_timings)
        try:
            return await body(manager)
        finally:
            await manager.close()

    return asyncio.run(go())


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"


def progress_text(view: RunView) -> str:
    """One line: where the load is (phase, shard n/N, ETA) or the verdict."""
    parts = [f"{view.profile}: {view.state}"]
    if view.job and view.active:
        parts.append(view.job)
    if view.state in STARTING:
        if view.phase:   # "ready" is the log's word until a test completion confirms it
            parts.append("log says ready, checking" if view.phase == LogPhase.READY else view.phase)
        if view.shards:
            parts.append(f"shard {view.shards[0]}/{view.shards[1]}")
        if view.eta_s is not None:
            parts.append(f"ETA {_duration(view.eta_s)}")
        # A queued job's time is the queue's: load time starts when it runs.
        parts.append(f"queued {_duration(time.time() - view.started_at)}" if view.queued
                     else f"elapsed {_duration(time.time() - view.started_at)}")
    if view.probe_error:
        parts.append(view.probe_error)
    if view.stalled and view.stall_reason:
        parts.append(f"STALLED: {view.stall_reason}")
    if view.state == RunStatus.READY:
        parts.append(f"{view.url} after {_duration(view.load_seconds)}")
    if view.failure is not None:
        parts.append(view.failure.text)
    if view.nodes:
        parts.append("nodes: " + "; ".join(node_text(node) for node in view.nodes))
    return ", ".join(parts)


def node_text(node: RunView) -> str:
    """One node of a multi-node run, compact: `1 gpu2 loading_weights shard 3/8`."""
    parts = [str(node.node_rank), node.host, "STALLED" if node.stalled else node.state]
    if node.state in STARTING and node.phase:
        parts.append(node.phase)
    if node.shards and node.state in STARTING:
        parts.append(f"shard {node.shards[0]}/{node.shards[1]}")
    return " ".join(parts)


def print_failure(view: RunView) -> None:
    """The reason and the last log lines, on stderr."""
    if view.failure is None:
        return
    print(f"specmon: {view.profile} {view.state}: {redact_text(view.failure.text)}",
          file=sys.stderr)
    if view.failure.last_lines:
        print("last log lines:", file=sys.stderr)
        for line in view.failure.last_lines:
            print(f"  {redact_text(line)}", file=sys.stderr)


def print_report(report: StopReport) -> None:
    """What a stop did (each node's on its own line for a multi-node run) and what still blocks."""
    lines = [(f"{report.profile} run {report.run_id}", report)]
    lines += [(f"  node {rank} run {node.run_id}", node) for rank, node in enumerate(report.nodes)]
    for what, one in lines:
        if one.already is not None:
            print(f"{what}: already {one.already} (exit code {one.exit_code}); nothing to stop")
            continue
        how = "SIGKILL needed" if one.killed else "SIGTERM"
        state = "stopped" if one.stopped else "NOT fully stopped"
        signalled = f"scancel job {one.job}" if one.job else f"{how}; {len(one.pids)} process(es)"
        print(f"{what}: {state} in {one.seconds:.1f}s ({signalled}; exit code {one.exit_code})")
    for blocker in report.blockers:
        print(f"specmon: still blocking: {blocker}", file=sys.stderr)
