"""tsmix.tuning: Optuna studies, MLflow tracking, model registry and the pyfunc flavor.

``run_study`` (one worker of a study; ``tsmix tune``), ``track_fit`` (a Forecaster fit
tracked in MLflow; ``tsmix fit --tracking-uri/--register-as``), ``ForecasterModel`` (the
pyfunc flavor). Imported lazily: Optuna and MLflow load only when used.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "run_study": "tsmix.tuning.study",
    "StudyResult": "tsmix.tuning.study",
    "track_fit": "tsmix.tuning.tracking",
    "TrackedRun": "tsmix.tuning.tracking",
    "ForecasterModel": "tsmix.tuning.pyfunc",
    "open_storage": "tsmix.tuning.storage",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tsmix.tuning' has no attribute {name!r}")
