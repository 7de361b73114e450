"""``python -m tsmix``: the tsmix command (same as the ``tsmix`` console script)."""

import sys

from tsmix.cli import main

if __name__ == "__main__":
    sys.exit(main())
