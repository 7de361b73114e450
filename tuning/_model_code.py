"""MLflow "model from code" entry: MLflow runs this file to build the pyfunc model.

Logging the model as code (instead of a cloudpickled object) keeps the logged model
readable and free of pickles; the weights travel as the ``run_dir`` artifact, and the tsmix
package itself as ``code/tsmix`` (MLflow puts ``code/`` on ``sys.path`` before running this
file), so the import below works where tsmix is not installed.
"""

import mlflow

from tsmix.tuning.pyfunc import ForecasterModel

mlflow.models.set_model(ForecasterModel())
