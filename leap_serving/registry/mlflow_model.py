"""The file MLflow stores with each model ("models from code"): loading runs it instead of
unpickling an object, so a model version carries no pickled code."""

import mlflow.models

from leap_serving.registry.pyfunc import LeapPyfunc

mlflow.models.set_model(LeapPyfunc())
