"""MLflow: a model in the registry, the only part of ``leap_serving`` that imports MLflow.

What a registered version ships and its check (``shipped``), fetching and loading a version
(``registered``), the pyfunc face (``pyfunc``) and the model-code file MLflow runs
(``mlflow_model``). Importing this package loads no MLflow: ``registered`` imports it inside its
functions, ``pyfunc`` at import.
"""
