"""Benchmark tasks on the shared mixer core: MAD (six tasks), ListOps, induction heads.

``tsmix task NAME`` runs them (and the synthetic suites transport, channel-select,
curved-boundary) and writes one result row per (task, mixer, seed); see :mod:`.cli`.
"""
