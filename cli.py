"""Run the ``tsmix`` command from a checkout: ``python cli.py data ETTh1 ...``.

Same commands as the installed ``tsmix`` console script (``pip install -e .`` first, so
that the root folders resolve as ``tsmix.datasets`` etc.).
"""

from tsmix.cli import run

if __name__ == "__main__":
    run()
