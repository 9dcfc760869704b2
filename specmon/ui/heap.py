"""The TUI's garbage collector, settled once the first frame is up (issue 37).

A fleet's app holds ~200k objects, and Python's collector walked all of them in each full collection: 60-110 ms in
which no key is answered, 17 times in a minute at 64 runs (the repaints' strips and caches churn through the oldest
generation), and most `j` presses slower than 100 ms had landed in one. The objects the app starts with (modules,
classes, styles, widgets: most of them live as long as the app) are now kept out of those walks; cycles made later
are collected as before.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect what start-up left behind, then keep what remains out of every later collection's walk."""
    gc.collect()
    gc.freeze()
