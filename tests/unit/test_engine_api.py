"""RunManager's public names are the verbs its front ends use, each one described in the engine's API text (the
module docstring of orchestration.runs.manager), and nothing more: multi-node runs, Slurm jobs and inspection reach
the rooms through their own narrow protocols (issue 33)."""

from __future__ import annotations

import re

from specmon.model.config import Config, Profile
from specmon.orchestration.runs import manager as manager_module
from specmon.orchestration.runs.manager import RunManager


def _documented() -> set[str]:
    doc = manager_module.__doc__ or ""
    api = doc[doc.index("Engine API"):doc.index("Runs belong to the profiles file")]
    return set(re.findall(r"\bmanager\.(\w+)", api))


def test_every_public_name_of_the_run_manager_is_a_documented_front_end_verb(tmp_path) -> None:
    manager = RunManager(Config(profiles={"p": Profile(name="p", command=("true",), port=1)}, source="x.toml"),
                         state_dir=tmp_path)
    public = {name for name in dir(manager) if not name.startswith("_")}
    assert public == _documented()
    assert len(public) <= 17, sorted(public)
