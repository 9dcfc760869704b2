"""What a run's log says, read from its host without watching the run: for a run that ended before this process
watched it, its speculative set-up, memory fraction and last log line (the TUI's card of an earlier run).

    state = await log_state(manager, run_id)     -> RunState (the parser's, over the log's last part)
"""

from __future__ import annotations

from specmon.errors import UserError
from specmon.model.runs.runstate import RunState
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.reconciler import replay


async def log_state(manager: RunManager, run_id: str) -> RunState:
    """The parser's state for the run's log (its last part, read on its host); UserError for an unknown run."""
    record = manager.index.store.load(run_id)
    if record is None:
        raise UserError(f"no run {run_id}")
    return (await replay(manager.ops(record.host), record))[0]
