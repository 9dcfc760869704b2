"""An experiment's state file: what was planned, every step taken, and which result files hold which pass (parsed
here from text; read from disk by specmon.sources.experimentfiles; written by specmon.orchestration.measure.experiment:
save_state, append_acceptance).

Layout of one experiment (a directory under the results directory, `experiments/NAME-UTCSTAMP/`)::

    experiment.json            this state (rewritten atomically after every step)
    PROFILE.pass1.jsonl        a sweep result file per profile and pass (+ its .requests.jsonl); a pass that was
    PROFILE.pass1.r2.jsonl     interrupted and resumed continues in a new file holding only the levels left
    acceptance.jsonl           one line per finished level: profile, pass, concurrency, LevelAcceptance

A level is finished when its line is in a result file (appended and fsynced the moment it ends), so the levels done
(sources.experimentfiles.done_levels) come from the files, not this state: a kill between the level line and the
next state write loses nothing and repeats nothing. Passes are interleaved: pass 1 runs every level, then pass 2 runs every level, and so on, so slow drift
shows up as spread rather than as a difference between levels.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specmon.errors import UserError
from specmon.model.config import ExperimentSpec, Profile, SweepDefaults
from specmon.model.server.acceptance import LevelAcceptance
from specmon.model.sweeps.results import SweepResult, utc_now_iso
from specmon.model.text.secrets import redact, redact_argv, redact_env
from specmon.model.text.textfile import loads

SCHEMA_VERSION = 1
STATE_FILE = "experiment.json"
MAX_STATE_BYTES = 64 << 20      # a state of a thousand profiles and steps is well under 1 MiB
ACCEPTANCE_FILE = "acceptance.jsonl"


class ProfileStatus(str, enum.Enum):
    """Where one profile of an experiment stands. A `str` enum: the state file keeps the words it always did."""

    PENDING = "pending"       # not started
    LAUNCHING = "launching"   # its host cleared, its server launching or loading
    SWEEPING = "sweeping"     # its server ready, its passes being measured
    DONE = "done"             # every pass measured
    FAILED = "failed"         # its server could not be made ready (retries spent, or on_failure = "abort")
    SKIPPED = "skipped"       # given up on after a failure (on_failure = "skip")

    def __str__(self) -> str:
        return self.value


MEASURING = frozenset({ProfileStatus.LAUNCHING, ProfileStatus.SWEEPING})     # the profile the experiment is on
FINISHED = frozenset({ProfileStatus.DONE, ProfileStatus.FAILED, ProfileStatus.SKIPPED})   # nothing left to do
NOT_MEASURED = frozenset({ProfileStatus.FAILED, ProfileStatus.SKIPPED})      # finished without its figures


class ExperimentStatus(str, enum.Enum):
    """Where an experiment stands: running (or killed while running: resumable), finished, aborted."""

    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Step:
    """One thing the runner did, as the step list shows it."""

    at: str                       # UTC ISO-8601
    profile: str | None
    step: str                     # stop, busy, launch, ready, failed, retry, skip, sweep, level, stopped, abort, done
    detail: str = ""
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "profile": self.profile, "step": self.step, "detail": self.detail,
                "seconds": None if self.seconds is None else round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        seconds = d.get("seconds")
        return cls(str(d.get("at", "")), d.get("profile"), str(d.get("step", "")), str(d.get("detail", "")),
                   None if seconds is None else float(seconds))


@dataclass(frozen=True)
class PassFile:
    """A result file holding (part of) one pass of one profile."""

    pass_no: int
    path: str                     # relative to the experiment directory

    def to_dict(self) -> dict[str, Any]:
        return {"pass": self.pass_no, "path": self.path}


@dataclass(frozen=True)
class ProfileState:
    """Where one profile of the experiment stands."""

    status: ProfileStatus = ProfileStatus.PENDING
    attempts: int = 0             # launches tried
    run_id: str | None = None     # the run serving the sweeps (adopted on resume while still ready)
    failure: str | None = None
    files: tuple[PassFile, ...] = ()
    discarded: tuple[tuple[str, int], ...] = ()   # (file, C): levels measured while the server died; run again

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "attempts": self.attempts, "run_id": self.run_id, "failure": self.failure,
                "files": [f.to_dict() for f in self.files], "discarded": [list(d) for d in self.discarded]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProfileState:
        files = tuple(PassFile(int(f["pass"]), str(f["path"])) for f in d.get("files") or ())
        try:
            status = ProfileStatus(str(d.get("status", "pending")))
        except ValueError:
            raise ValueError(f"unknown profile status {str(d.get('status'))!r}") from None
        discarded = tuple((str(f), int(c)) for f, c in d.get("discarded") or ())
        return cls(status, int(d.get("attempts") or 0), d.get("run_id"), d.get("failure"), files, discarded)


def _experiment_status(value: object) -> ExperimentStatus:
    try:
        return ExperimentStatus(str(value))
    except ValueError:
        raise ValueError(f"unknown experiment status {str(value)!r}") from None


def spec_to_dict(spec: ExperimentSpec) -> dict[str, Any]:
    """An ExperimentSpec as JSON (kept in the state, so a resume runs what was started)."""
    sweep = spec.sweep
    return {
        "name": spec.name, "profiles": list(spec.profiles), "repeats": spec.repeats,
        "sweep": {"levels": list(sweep.levels), "requests_per_level": sweep.requests_per_level,
                  "duration_s": sweep.duration_s, "warmup_requests": sweep.warmup_requests,
                  "input_len": sweep.input_len, "output_len": sweep.output_len, "api": sweep.api,
                  "dataset": sweep.dataset, "dataset_path": sweep.dataset_path, "input_range": sweep.input_range,
                  "output_range": sweep.output_range, "seed": sweep.seed,
                  "output_from_dataset": sweep.output_from_dataset},
        "max_load_s": spec.max_load_s, "stall_s": spec.stall_s, "on_failure": spec.on_failure,
        "retries": spec.retries, "on_busy": spec.on_busy, "busy_wait_s": spec.busy_wait_s,
        "baseline": spec.baseline,
    }


def spec_from_dict(d: Mapping[str, Any]) -> ExperimentSpec:
    # A state saved before datasets ran synthetic prompts of fixed lengths: a resume must go on sending those.
    sweep = {"dataset": "random", "output_from_dataset": False, **d["sweep"]}
    sweep["levels"] = tuple(int(c) for c in sweep["levels"])
    return ExperimentSpec(
        name=str(d["name"]), profiles=tuple(d["profiles"]), sweep=SweepDefaults(**sweep),
        repeats=int(d["repeats"]), max_load_s=float(d["max_load_s"]),
        stall_s=None if d.get("stall_s") is None else float(d["stall_s"]), on_failure=str(d["on_failure"]),
        retries=int(d["retries"]), on_busy=str(d["on_busy"]), busy_wait_s=float(d["busy_wait_s"]),
        baseline=None if d.get("baseline") is None else str(d["baseline"]),
    )


@dataclass(frozen=True)
class ExperimentState:
    """Everything `experiment.json` holds. Immutable: every change makes a new state, which the runner saves."""

    directory: Path
    spec: ExperimentSpec
    created_at: str
    config_source: str = ""
    status: ExperimentStatus = ExperimentStatus.RUNNING
    profiles: Mapping[str, ProfileState] = field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    setups: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)   # profile -> host, server, command, env

    @property
    def path(self) -> Path:
        return self.directory / STATE_FILE

    @property
    def finished(self) -> bool:
        return self.status != ExperimentStatus.RUNNING

    def profile(self, name: str) -> ProfileState:
        return self.profiles.get(name, ProfileState())

    def with_profile(self, name: str, **changes: Any) -> ExperimentState:
        profiles = dict(self.profiles)
        profiles[name] = replace(self.profile(name), **changes)
        return replace(self, profiles=profiles)

    def with_step(self, profile: str | None, step: str, detail: str = "", seconds: float | None = None) -> ExperimentState:
        return replace(self, steps=self.steps + (Step(utc_now_iso(), profile, step, detail, seconds),))

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "experiment", "schema": SCHEMA_VERSION, "name": self.spec.name, "created_at": self.created_at,
            "config": self.config_source, "status": self.status, "spec": spec_to_dict(self.spec),
            "setups": {k: dict(v) for k, v in self.setups.items()},
            "profiles": {k: v.to_dict() for k, v in self.profiles.items()},
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], directory: Path) -> ExperimentState:
        if d.get("type") != "experiment" or d.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"not a specmon experiment state (schema {SCHEMA_VERSION})")
        return cls(
            directory=directory, spec=spec_from_dict(d["spec"]), created_at=str(d.get("created_at", "")),
            config_source=str(d.get("config", "")), status=_experiment_status(d.get("status", "running")),
            profiles={str(k): ProfileState.from_dict(v) for k, v in (d.get("profiles") or {}).items()},
            steps=tuple(Step.from_dict(s) for s in d.get("steps") or ()),
            # Redacted again: a state written before the redaction rule covered every flag and URL.
            setups={str(k): redact(dict(v)) for k, v in (d.get("setups") or {}).items()},
        )


def state_from_text(text: str, file: str) -> ExperimentState:
    """An experiment state from the text of its file (its directory is the file's); UserError naming the file when
    the text is no experiment state."""
    path = Path(file)
    try:
        return ExperimentState.from_dict(loads(text), path.parent)
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{file}: not a readable experiment state ({exc})") from None


def counted(state: ExperimentState, profile: str,
            results: Mapping[str, SweepResult | None]) -> list[tuple[int, SweepResult]]:
    """(pass number, result file) of every file the profile has written so far, in order, given each file's whole
    lines by its path (None: nothing in it yet), without the levels that do not count: those where no request was
    answered, and those discarded because the server died."""
    ps = state.profile(profile)
    discarded = set(ps.discarded)
    out = []
    for f in ps.files:
        result = results.get(f.path)
        if result is not None:
            kept = tuple(lv for lv in result.levels
                         if lv.requests_ok > 0 and (f.path, lv.concurrency) not in discarded)
            out.append((f.pass_no, replace(result, levels=kept)))
    return out


def remaining(state: ExperimentState, done: set[tuple[int, int]]) -> list[tuple[int, tuple[int, ...]]]:
    """(pass, levels still to run) for each pass not finished, in the order they run, given the (pass,
    concurrency) pairs done."""
    plan = []
    for pass_no in range(1, state.spec.repeats + 1):
        left = tuple(c for c in state.spec.sweep.levels if (pass_no, c) not in done)
        if left:
            plan.append((pass_no, left))
    return plan


def next_file_name(state: ExperimentState, profile: str, pass_no: int) -> str:
    """`PROFILE.passN.jsonl`, or `PROFILE.passN.rK.jsonl` when that pass already has K-1 files (a resume)."""
    parts = sum(1 for f in state.profile(profile).files if f.pass_no == pass_no)
    suffix = f".r{parts + 1}" if parts else ""
    return f"{profile}.pass{pass_no}{suffix}.jsonl"


def acceptance_from_text(text: str) -> dict[tuple[str, int, int], LevelAcceptance]:
    """(profile, pass, concurrency) -> acceptance, from the text of acceptance.jsonl (a torn last line is skipped)."""
    out: dict[tuple[str, int, int], LevelAcceptance] = {}
    for line in text.splitlines():
        try:
            d = loads(line)
            out[(str(d["profile"]), int(d["pass"]), int(d["concurrency"]))] = LevelAcceptance.from_dict(d)
        except (ValueError, KeyError, TypeError):
            continue
    return out


def profile_setup(profile: Profile) -> dict[str, Any]:
    """What the report shows of how a profile was started (secrets redacted)."""
    return redact({"host": profile.host, "server": profile.server, "port": profile.port,
                   "command": redact_argv(profile.command), "env": redact_env(profile.env)})
