"""``python -m tsmix``: the tsmix command (same as the ``tsmix`` console script)."""

from tsmix.cli import run

if __name__ == "__main__":
    run()
