"""Run the ``tsmix`` command from a checkout: ``python cli.py data ETTh1 ...``.

Same commands as the installed ``tsmix`` console script (``pip install -e .`` first, so
that the root folders resolve as ``tsmix.datasets`` etc.).
"""

import sys

from tsmix.cli import main

if __name__ == "__main__":
    sys.exit(main())
