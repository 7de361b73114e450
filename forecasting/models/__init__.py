"""Forecasting models, one file each; importing a file registers its model.

A new model is a file here (or a plugin file listed in ``$TSMIX_PLUGINS``) with a frozen
config dataclass and a builder decorated by
:func:`tsmix.forecasting.registry.register_model`; it then appears in ``tsmix fit --model``,
the tuning spaces, the benchmark suites, the presets lookup and the shared model checks.
"""
