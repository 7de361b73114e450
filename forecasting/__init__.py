"""tsmix.forecasting: patch/variate encoders over any mixer, DLinear, trainer, Forecaster."""
