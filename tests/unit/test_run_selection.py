"""The rule of which runs a fleet command (`stop --profile/--host`, the TUI's fleet stop) acts on."""

from __future__ import annotations

import pytest

from specmon.model.runs.selection import RunScope


def test_a_profile_takes_only_its_live_runs_of_this_profiles_file() -> None:
    scope = RunScope(profile="llama")
    assert scope.takes(profile="llama", hosts=("gpu1",), mine=True, live=True)
    assert not scope.takes(profile="llama", hosts=("gpu1",), mine=True, live=False)     # ended: nothing to stop
    assert not scope.takes(profile="llama", hosts=("gpu1",), mine=False, live=True)     # another file's llama
    assert not scope.takes(profile="qwen", hosts=("gpu1",), mine=True, live=True)
    assert scope.describe() == "profile llama"


def test_a_host_takes_every_files_live_runs_on_it_a_multi_node_run_by_any_node() -> None:
    scope = RunScope(host="gpu2")
    assert scope.takes(profile="a", hosts=("gpu2",), mine=False, live=True)
    assert scope.takes(profile="a", hosts=("gpu1", "gpu2"), mine=True, live=True)
    assert not scope.takes(profile="a", hosts=("gpu1",), mine=True, live=True)
    both = RunScope(profile="a", host="gpu2")
    assert both.takes(profile="a", hosts=("gpu2",), mine=True, live=True)
    assert not both.takes(profile="b", hosts=("gpu2",), mine=True, live=True)
    assert both.describe() == "profile a on host gpu2"
    with pytest.raises(ValueError):
        RunScope()
