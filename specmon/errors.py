"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad config, unknown profile, busy port...).

    The message must be one line naming the file:line, host or field at fault.
    """

    exit_code = 2


class PortBusy(UserError):
    """A launch refused because something already listens on the profile's port; `free` are ports nearby that
    were free, to offer instead."""

    def __init__(self, message: str, port: int, free: tuple[int, ...]) -> None:
        super().__init__(message)
        self.port = port
        self.free = free
