"""The model: the cascade that predicts throughput, its files, and the published model folder.

The boosters (``boosters``), LightGBM's text reader (``lgb_text``), the packed trees and their
compiled walks (``trees``, ``compiled``); the cascade (``cascade``) with its profiles, fit
helpers, EM, bin classifier and gating (``profiles``, ``fitting``, ``em``, ``bin_classifier``,
``gating``); the model file (``model_file``); the published folder (``publish``) and the model
loaded from it (``published``), with its intervals and novelty reference (``intervals``,
``novelty``). It knows nothing of ranking and imports no MLflow.
"""
