"""The name a model registered before ``leap_serving`` had subpackages imports its pyfunc by.

Such a version's model-code file (``mlflow_model.py``, stored in the registry and run by MLflow)
does ``from leap_serving.pyfunc import LeapPyfunc``. A process that imported the installed
``leap_serving`` first (``registry.pyfunc.load_checked``, or ``mlflow.pyfunc.load_model``
in-process) finds that name here and serves the version's checked artifacts with this code. The
pyfunc itself lives in ``registry.pyfunc``; new versions import it from there.
"""

from .registry.pyfunc import LeapPyfunc

__all__ = ["LeapPyfunc"]
