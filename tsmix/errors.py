"""Errors tsmix raises for bad input. The CLI prints them as one line, no traceback."""


class TsmixError(ValueError):
    """A user-facing error: the message names the problem and how to fix it."""
