"""Synthetic suites on the shared mixer core (channel selection, transport, curved boundary)."""
