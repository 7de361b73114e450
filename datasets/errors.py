"""The one error type the data pipeline raises for bad input."""

from __future__ import annotations

from tsmix.errors import TsmixError


class DataError(TsmixError):
    """Bad data or data arguments. The message names the problem and the fix (one line)."""
