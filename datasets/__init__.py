"""tsmix.datasets: LTSF benchmark specs, reading, lookup/download, validation, scaling, windows."""
