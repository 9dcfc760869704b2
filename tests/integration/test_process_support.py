"""tests/support/process_support.py's `what_starts`, which conftest.py uses to keep the quick subset (`-m "not slow"`) free of
processes, listening sockets and app runs (issue 33 #7)."""

from __future__ import annotations

import asyncio
import socket
import subprocess

import pytest
from process_support import what_starts
from textual.app import App


async def _run_the_app() -> None:
    async with App[None]().run_test():
        pass


@pytest.mark.slow
def test_what_starts_names_each_process_listener_and_app_run_and_stops_recording_when_closed() -> None:
    with what_starts() as started:
        subprocess.run(["true"], check=True)
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
        asyncio.run(_run_the_app())
    assert started == ["process true", "a listening socket", "the Textual app"]
    subprocess.run(["true"], check=True)
    assert len(started) == 3
