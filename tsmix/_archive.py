"""The commit a ``git archive`` of tsmix was made from (a release tarball, a snapshot install).

``.gitattributes`` marks this file ``export-subst``: ``git archive`` writes the hashes into the
strings below, so a copy installed from an archive still names its commit. In a checkout they
stay unsubstituted and git itself is asked (see :mod:`tsmix.provenance`).
"""

FULL = "$Format:%H$"  # the full hash
SHORT = "$Format:%h$"  # the abbreviated hash, as ``git rev-parse --short``
