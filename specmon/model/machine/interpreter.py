"""How specmon starts its own Python children (the load generator, the demo's simulators): with the running
interpreter, the working directory kept off `sys.path`.

`python -m specmon.loadgen` puts the working directory first on `sys.path`: started from a folder that holds a
`specmon/` directory (a clone's parent, say), that directory was imported instead of the installed package, and the
child failed, or ran code it was never meant to. Python 3.11's `-P` leaves it off; on 3.10 a one-line bootstrap
drops it before the module runs.
"""

from __future__ import annotations

import sys

# 3.10: `-c` puts "" (the working directory) first on sys.path; drop it, then run the module as `-m` would.
_BOOTSTRAP = ("import runpy, sys\n"
              "if sys.path[:1] == ['']: del sys.path[0]\n"
              "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)")


def python_module(module: str, version: tuple[int, int] = sys.version_info[:2]) -> tuple[str, ...]:
    """argv that runs `python -m module` with this interpreter, isolated from the working directory; arguments for
    the module follow it. `version` picks the form (the running interpreter's, unless a test asks for another)."""
    if version >= (3, 11):
        return (sys.executable, "-P", "-m", module)
    return (sys.executable, "-c", _BOOTSTRAP, module)
