"""Why a run failed, in one shape: what the log parser found, what a run's record keeps and what front ends show.

    Failure(kind, message, last_lines=(), line=0, fatal=True, provisional=False)

`kind` is a log signature (events.FAILURE_KINDS: oom, nccl, port_in_use, model_not_found, exception), the run's
end (`exited`, `lost`: the run status it led to) or Slurm's verdict (model.runs.slurm). `line`, `fatal` and
`provisional` are the parser's (see runstate): a run's failure is always fatal and settled. JSON is made and read
only at the file edge: `to_json` / `from_json` are the `failure` object of a run record file.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Failure:
    """Why a run failed: kind, a one-line message, and the last log lines before it."""

    kind: str
    message: str
    last_lines: tuple[str, ...] = ()
    line: int = 0              # the 1-based log line carrying the message (0: not a log line's verdict)
    fatal: bool = True         # the error ends the server for sure (a plain traceback does not)
    provisional: bool = False  # a header whose exception line is still to come and will replace it

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
