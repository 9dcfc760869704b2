"""Why a run failed, the one failure type: what a run's record keeps and what front ends show.

    Failure(kind, message, last_lines=())

`kind` is a log signature (events.FAILURE_KINDS: oom, nccl, port_in_use, model_not_found, exception), the run's
end (`exited`, `lost`: the run status it led to) or Slurm's verdict (model.runs.slurm). What the log parser finds
at one line is an `events.LoggedError` (with its line, fatal and provisional flags); a fatal, settled one becomes
a run's Failure (model.runs.verdicts.failure_of). JSON is made and read only at the file edge: `to_json` /
`from_json` are the `failure` object of a run record file.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Failure:
    """Why a run failed: kind, a one-line message, and the last log lines before it."""

    kind: str
    message: str
    last_lines: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """`kind: message`, or the message alone where it starts with its kind ("exited with code 1", not
        "exited: exited with code 1")."""
        return self.message if self.message.split(" ", 1)[0] == self.kind else f"{self.kind}: {self.message}"

    def to_json(self) -> dict[str, object]:
        """The `failure` object of a run record file."""
        return {"kind": self.kind, "message": self.message, "last_lines": list(self.last_lines)}

    @classmethod
    def from_json(cls, data: object) -> Failure | None:
        """From a run record file's `failure` object (null, or an empty one, is no failure)."""
        if not isinstance(data, dict) or not data:
            return None
        return cls(str(data.get("kind", "")), str(data.get("message", "")),
                   tuple(str(line) for line in data.get("last_lines") or ()))
