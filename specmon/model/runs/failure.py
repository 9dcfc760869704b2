"""Why a run failed, the one failure type: what a run's record keeps and what front ends show.

    Failure(kind, message, last_lines=())

`kind` says who told: what the server's log said (`LogSignature`: oom, nccl, port_in_use, model_not_found,
exception), how the run ended without a word in its log (`RunStatus`: exited, lost; a multi-node run's bad node:
failed) or what Slurm said ended its job (`SlurmEnd`: timeout, node_fail, ..., oom). What the log parser finds at
one line is an `events.LoggedError` (with its line, fatal and provisional flags); a fatal, settled one becomes a
run's Failure (model.runs.verdicts.failure_of).

JSON is made and read only at the file edge: `to_json` / `from_json` are the `failure` object of a run record file,
`{"kind", "message", "last_lines"}`, as older specmon wrote and reads it. The kinds are `str` enums, so the word is
the one older specmon wrote; a word is read back as the first kind naming it (log, run, Slurm): the one word two
of them share, `oom` (memory ran out, said by the log or by Slurm), comes back as the log's, and nothing decides
on which of them said it.
"""

from __future__ import annotations

from dataclasses import dataclass

from specmon.model.logs.events import LogSignature
from specmon.model.runs.runstatus import RunStatus
from specmon.model.runs.slurm import SlurmEnd

FailureKind = LogSignature | RunStatus | SlurmEnd


def kind_of(word: str) -> FailureKind:
    """The failure kind `word` names, the log's first, then the run's, then Slurm's; ValueError naming it when none
    does."""
    for kinds in (LogSignature, RunStatus, SlurmEnd):
        try:
            return kinds(word)
        except ValueError:
            pass
    raise ValueError(f"unknown failure kind {word!r}")


@dataclass(frozen=True)
class Failure:
    """Why a run failed: kind, a one-line message, and the last log lines before it."""

    kind: FailureKind
    message: str
    last_lines: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """`kind: message`, or the message alone where it starts with its kind ("exited with code 1", not
        "exited: exited with code 1")."""
        return self.message if self.message.split(" ", 1)[0] == self.kind else f"{self.kind}: {self.message}"

    def to_json(self) -> dict[str, object]:
        """The `failure` object of a run record file."""
        return {"kind": self.kind.value, "message": self.message, "last_lines": list(self.last_lines)}

    @classmethod
    def from_json(cls, data: object) -> Failure | None:
        """From a run record file's `failure` object (null, or an empty one, is no failure); ValueError naming a
        kind that is none of the known ones."""
        if not isinstance(data, dict) or not data:
            return None
        return cls(kind_of(str(data.get("kind", ""))), str(data.get("message", "")),
                   tuple(str(line) for line in data.get("last_lines") or ()))
