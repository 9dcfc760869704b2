"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad config, unknown profile, busy port...).

    The message must be one line naming the file:line, host or field at fault.
    """

    exit_code = 2
