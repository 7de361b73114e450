"""tsmix.tuning: Optuna studies, MLflow tracking, model registry and the pyfunc flavor."""
