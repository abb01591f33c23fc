"""The MLflow pyfunc face of the published model: ``mlflow.pyfunc.load_model("models:/...")``.

Kept apart from ``model.py`` so serving code that loads artifacts directly never imports MLflow.
"""

from __future__ import annotations

import mlflow.pyfunc
import polars as pl

from .contract import schema
from .model import LeapModel


class LeapPyfunc(mlflow.pyfunc.PythonModel):
    """Input: launch rows in the data contract's columns (``hardware_type`` = the candidate,
    ``ds`` = the launch day). Output per row: predicted throughput, bin, bin probability and
    whether history was found (``LeapModel.predict``)."""

    def load_context(self, context) -> None:
        self.model = LeapModel.load(dict(context.artifacts))

    def predict(self, context, model_input, params=None):
        if not isinstance(model_input, pl.DataFrame):
            model_input = pl.from_pandas(model_input)
        # pandas turns dates into timestamps: bring contract columns back to their types
        contract = schema("job_attempts")
        launches = model_input.with_columns(
            pl.col(name).cast(contract[name])
            for name in model_input.columns
            if name in contract and model_input[name].dtype != contract[name]
        )
        return self.model.predict(launches).to_pandas()
