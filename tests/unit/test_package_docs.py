"""Each package's docstring says what the package holds: every module and sub-package in it is named there, so a
reader finds where a thing lives from `specmon/<folder>/__init__.py` (issue 33)."""

from __future__ import annotations

import ast
import re

from paths import REPO

PACKAGE_ROOT = REPO / "specmon"


def test_every_package_docstring_names_each_module_it_holds() -> None:
    missing = []
    for init in sorted(PACKAGE_ROOT.rglob("__init__.py")):
        folder = init.parent
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", doc))
        held = [p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")]
        held += [p.name for p in folder.iterdir() if (p / "__init__.py").exists()]
        missing += [f"{folder.relative_to(REPO)}/: {name}" for name in sorted(held) if name not in words]
    assert not missing, "named nowhere in their package's docstring:\n" + "\n".join(missing)
