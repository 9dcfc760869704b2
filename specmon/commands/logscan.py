"""`specmon logscan FILE... [--json] [--follow]`: what a launch log says, from the log alone.

Default: a short human summary per file (server, phase, shards, KV cache, ready, failure, accept len,
load time). `--json`: one object per file per line (the contract in `runstate.summary`, plus "file").
Exits 1 when a log shows its launch failed, else 0. `--follow`: tail growing files and print each phase change
and progress step as it happens; exits 0 when every file reached ready, 1 when one failed (or a piped input ended
first), 130 on Ctrl-C.
`-` reads standard input (`kubectl logs -f pod | specmon logscan --follow -`). Input is streamed in
chunks, so memory does not grow with the log's size.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from typing import IO

from specmon.errors import UserError
from specmon.model.runs.runstate import LogPhase, LogWatch, RunState, StepCallback, eta_seconds, summary
from specmon.sources.follow import FollowNote, LocalFollower, read_chunk

FOLLOW_POLL_S = 0.2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `logscan` subcommand."""
    p = subparsers.add_parser(
        "logscan",
        help="summarise SGLang/vLLM launch logs: phase, shards, KV cache, ready, failure",
        description="Read SGLang or vLLM launch logs and say how far the launch got: server, phase, "
        "checkpoint shards, KV cache size, ready or not, and why it failed (kind and line).",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="launch log file(s); - reads standard input")
    p.add_argument("--json", action="store_true", help="one JSON object per file per line")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep reading growing files; print phase changes and progress as they happen; "
                   "exit when every file is ready (0) or one failed (1)")
    p.set_defaults(func=run)


def _open(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the caller
        mode = os.fstat(handle.fileno()).st_mode
        if stat.S_ISDIR(mode):
            handle.close()
            raise IsADirectoryError(21, "is a directory")
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):   # /dev/zero never ends; a pipe or FIFO is a log being fed
            handle.close()
            raise UserError(f"{path}: a device, not a log file (refused: it may never end; pipe it in with -)")
        return handle
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    """Entry point: summaries, or follow mode."""
    handles = [_open(path) for path in args.files]  # every file checked before any output
    try:
        if args.follow:
            return _follow(args.files, handles, args.json, sys.stdout)
        failed = False
        for path, handle in zip(args.files, handles):
            try:
                state = scan(handle)
            except OSError as exc:  # opened fine, but reading failed (EIO, a vanished mount, ...)
                raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
            _print_summary(path, state, args.json, sys.stdout)
            failed = failed or state.phase == LogPhase.FAILED
        return 1 if failed else 0   # a script checking a launch log must not read a failed one as fine
    finally:
        for handle in handles:
            handle.close()


def scan(handle: IO[bytes]) -> RunState:
    """The final state of a whole (finished) log, read in pieces (follow.CHUNK_BYTES)."""
    watch = LogWatch()
    now = time.monotonic()
    while True:
        data = read_chunk(handle)
        if not data:
            break
        watch.feed(data, now)
    watch.close(now)
    return watch.state


def _print_summary(path: str, state: RunState, as_json: bool, out: IO[str]) -> None:
    if as_json:
        out.write(json.dumps({"file": path, **summary(state)}) + "\n")
    else:
        out.write(describe(path, state) + "\n")
    out.flush()


def _fmt_tokens(n: int | None) -> str:
    return f"{n:,} tokens" if n is not None else "-"


def describe(path: str, state: RunState) -> str:
    """A short human summary of one log."""
    lines = [path]
    server = state.server or "unknown"
    details = []
    if state.model_path:
        details.append(f"model {state.model_path}")
    if state.tp is not None:
        details.append(f"tp {state.tp}")
    if state.mem_fraction_static is not None:
        details.append(f"mem fraction {state.mem_fraction_static:g}")
    if state.speculative_algorithm:
        steps = f" x{state.speculative_num_steps}" if state.speculative_num_steps else ""
        details.append(f"spec {state.speculative_algorithm}{steps}")
    lines.append(f"  server      {server}" + (f" ({', '.join(details)})" if details else ""))
    phase = state.phase.label
    if state.phase == LogPhase.FAILED and state.progress_phase == LogPhase.READY:
        phase += " (after ready)"
    elif state.phase == LogPhase.FAILED and state.progress_phase != LogPhase.LAUNCHING:
        phase += f" (while {state.progress_phase.label})"
    lines.append(f"  phase       {phase}")
    shards = f"{state.shards_done}/{state.shards_total}" if state.shards_total is not None else "-"
    lines.append(f"  shards      {shards}")
    if state.graphs_total is not None:
        lines.append(f"  cuda graphs {state.graphs_done}/{state.graphs_total}")
    kv = _fmt_tokens(state.kv_cache_tokens)
    if state.kv_cache_tokens is None and state.kv_cache_blocks is not None:
        kv = f"{state.kv_cache_blocks:,} blocks"
    lines.append(f"  kv cache    {kv}")
    ready = "no"
    if state.ready:
        ready = {"ready_line": "yes (ready line)", "startup_complete": "yes (startup complete)",
                 "serving": "yes (serving requests)"}.get(state.ready_evidence or "", "yes")
    lines.append(f"  ready       {ready}")
    if state.load_seconds is not None:
        lines.append(f"  load time   {state.load_seconds:.1f} s")
    if state.spec_accept_len is not None or state.spec_accept_rate is not None:
        parts = []
        if state.spec_accept_len is not None:
            parts.append(f"accept len {state.spec_accept_len:g}")
        if state.spec_accept_rate is not None:
            parts.append(f"accept rate {state.spec_accept_rate:.0%}")
        lines.append(f"  speculation {', '.join(parts)}")
    f = state.failure
    lines.append(f"  failure     {f'{f.kind} at line {f.line_no}: {f.message}' if f else '-'}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- follow
@dataclass
class _Followed:
    """One followed input: a pipe read as it comes, or a file followed by its name; what it said so far."""

    path: str
    handle: IO[bytes]
    file: LocalFollower | None = None   # a file (not a pipe): followed by its name
    watch: LogWatch = field(default_factory=LogWatch)
    ended: bool = False  # a pipe reached end of input

    @property
    def done(self) -> bool:
        state = self.watch.state
        return self.ended or state.ready or (state.failure is not None and state.failure.settled)


def changes(before: RunState, after: RunState, now: float) -> list[str]:
    """What a user following the log wants to hear about, between two states."""
    notes: list[str] = []
    if after.server != before.server and after.server:
        notes.append(f"server {after.server}")
    if after.phase != before.phase:
        notes.append(f"phase {after.phase.label}")
    if after.shards_total is not None and (after.shards_done, after.shards_total) != (before.shards_done,
                                                                                      before.shards_total):
        note = f"shards {after.shards_done}/{after.shards_total}"
        if after.shard_rate:
            note += f" ({after.shard_rate:.2f}/s"
            eta = eta_seconds(after, now)
            note += f", {eta:.0f} s left)" if eta is not None and after.shards_done != after.shards_total else ")"
        notes.append(note)
    if after.kv_cache_tokens is not None and before.kv_cache_tokens is None:
        notes.append(f"kv cache {after.kv_cache_tokens:,} tokens")
    if after.graphs_total is not None and (after.graphs_done, after.graphs_total) != (before.graphs_done,
                                                                                      before.graphs_total):
        notes.append(f"cuda graphs {after.graphs_done}/{after.graphs_total}")
    if after.ready and not before.ready:
        note = "ready"
        if after.load_seconds is not None:
            note += f" after {after.load_seconds:.1f} s"
        notes.append(note)
    if after.failure is not None and after.failure != before.failure:
        f = after.failure
        notes.append(f"failure {f.kind} at line {f.line_no}: {f.message}")
    return notes


def _follow(paths: list[str], handles: list[IO[bytes]], as_json: bool, out: IO[str]) -> int:
    started = time.monotonic()
    files = [_Followed(p, h, None if not h.seekable() else LocalFollower(p, h)) for p, h in zip(paths, handles)]
    prefix = len(files) > 1

    def step_printer(f: _Followed, now: float) -> StepCallback:
        def on_step(before: RunState, after: RunState) -> None:
            notes = changes(before, after, now)
            if not notes:
                return
            if as_json:
                out.write(json.dumps({"file": f.path, **summary(after)}) + "\n")
            else:
                stamp = f"+{time.monotonic() - started:7.1f}s"
                for note in notes:
                    out.write(f"{stamp}  {f.path + ': ' if prefix else ''}{note}\n")
            out.flush()

        return on_step

    try:
        while True:
            progressed = False
            for f in files:
                if f.done:
                    continue
                try:
                    pieces: list[bytes | FollowNote] = [read_chunk(f.handle)] if f.file is None else f.file.read()
                except OSError as exc:
                    raise UserError(f"{f.path}: cannot read: {exc.strerror or exc}") from None
                if f.file is None and not pieces[0]:   # the writer is gone: nothing more will come
                    f.ended = True
                    f.watch.close(time.monotonic(), step_printer(f, time.monotonic()))
                    continue
                for piece in pieces:
                    progressed = True
                    now = time.monotonic()
                    if isinstance(piece, FollowNote):
                        print(f"specmon: {f.path}: {piece.text}", file=sys.stderr, flush=True)
                        if piece.restart:
                            f.watch = LogWatch()
                    else:
                        f.watch.feed(piece, now, step_printer(f, now))
            if all(f.done for f in files):
                break
            if not progressed:
                time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        for f in files:
            if not as_json:
                out.write(describe(f.path, f.watch.state) + "\n")
        out.flush()
        return 130
    finally:
        for f in files:
            (f.file or f.handle).close()   # a file opened on a switch is not among run()'s handles
    return 0 if all(f.watch.state.ready and f.watch.state.failure is None for f in files) else 1
