"""Run by a profile's own `python -S -` on the server's host (sent on stdin; it imports nothing from specmon and
keeps to what Python 3.8 has: annotations are never evaluated). Prints one JSON object:

    {"python": sys.executable, "injections": [{"name", "value", "before", "file"}], "versions": {...},
     "environ": {...}}

Environ: the environment the interpreter started with (what the host's shell passes on, plus the launch env).
Injections: `os.environ` is compared before and after site initialisation (`site.main()`, which `-S` postponed),
and each .pth file, sitecustomize and usercustomize is run under a wrapper that notes which variables it changed,
so the file can be named. A sitecustomize that sets nothing (Debian/Ubuntu ship one) is no injection.
Versions come from package metadata and torch/version.py read as text: importing torch (seconds, and it may touch
the GPU) is not needed for them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

_before = dict(os.environ)
_by_file: dict[str, str] = {}


def _note(source: str, snapshot: dict[str, str]) -> None:
    now = os.environ
    for name in set(snapshot) | set(now):
        if snapshot.get(name) != now.get(name):
            _by_file[name] = source


def _wrap_site() -> None:
    import site

    plain_addpackage = site.addpackage

    def addpackage(sitedir: str | os.PathLike[str], name: str | os.PathLike[str],
                   known_paths: set[str] | None) -> set[str] | None:
        snapshot = dict(os.environ)
        try:
            return plain_addpackage(sitedir, name, known_paths)
        finally:
            _note(os.path.join(sitedir, name), snapshot)

    site.addpackage = addpackage
    for hook, module in (("execsitecustomize", "sitecustomize"), ("execusercustomize", "usercustomize")):
        plain = getattr(site, hook, None)
        if plain is None:
            continue

        def run(plain: Callable[[], None] = plain, module: str = module) -> None:
            snapshot = dict(os.environ)
            try:
                return plain()
            finally:
                loaded = sys.modules.get(module)
                _note(getattr(loaded, "__file__", None) or module, snapshot)

        setattr(site, hook, run)
    site.main()


def _versions() -> dict[str, str]:
    from importlib import metadata

    found: dict[str, str] = {}
    for dist in ("torch", "sglang", "vllm", "transformers", "flashinfer-python", "nvidia-nccl-cu12",
                 "nvidia-nccl-cu13", "triton"):
        try:
            found[dist] = metadata.version(dist)
        except Exception:
            pass
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        locations = list(spec.submodule_search_locations or []) if spec else []
        if locations:
            scope: dict[str, object] = {}
            with open(os.path.join(locations[0], "version.py")) as f:
                exec(compile(f.read(), "torch/version.py", "exec"), scope)
            if scope.get("cuda"):
                found["torch cuda"] = str(scope["cuda"])
    except Exception:
        pass
    nccl = found.get("nvidia-nccl-cu13") or found.get("nvidia-nccl-cu12")
    if nccl:
        found["nccl (wheel)"] = nccl
    return found


def main() -> None:
    error = None
    try:
        _wrap_site()
    except Exception as exc:   # a broken .pth or sitecustomize: report it, keep what was seen
        error = f"site initialisation failed: {type(exc).__name__}: {exc}"
    after = dict(os.environ)
    injections = [
        {"name": name, "value": after.get(name), "before": _before.get(name), "file": _by_file.get(name)}
        for name in sorted(set(_before) | set(after)) if _before.get(name) != after.get(name)
    ]
    answer: dict[str, object] = {"python": sys.executable, "injections": injections, "versions": _versions(),
                                 "environ": _before}
    if error:
        answer["error"] = error
    sys.stdout.write("\n<<specmon-startup>>" + json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
