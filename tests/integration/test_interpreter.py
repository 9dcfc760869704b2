"""specmon's own Python children (load generator, demo simulators) start isolated from the working directory: a
`specmon/` folder there (a clone's parent directory) is neither imported nor run. Both forms: Python 3.11's `-P`
and the 3.10 bootstrap (run here by this interpreter, which accepts both)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specmon.model.machine.interpreter import python_module


@pytest.mark.slow
@pytest.mark.parametrize("version", [(3, 10), (3, 11)])
def test_a_specmon_folder_in_the_working_directory_is_not_imported(tmp_path: Path, version: tuple[int, int]) -> None:
    decoy = tmp_path / "specmon"
    decoy.mkdir()
    (decoy / "__init__.py").write_text('raise SystemExit("the working directory\'s specmon/ was imported")\n')
    done = subprocess.run([*python_module("specmon", version), "sim", "--help"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "usage: specmon sim" in done.stdout   # its own arguments only, as under `python -m`
