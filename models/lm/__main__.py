"""``python -m tsmix.models.lm``: see :mod:`tsmix.models.lm.cli`."""

import sys

from tsmix.models.lm.cli import main

sys.exit(main())
