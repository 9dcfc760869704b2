"""A serving server's own view: its /metrics read as the figures a user watches (serving) and speculative
acceptance of a sweep level from the client, the log and /metrics (acceptance)."""
