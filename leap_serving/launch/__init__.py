"""What a launch is: the data contract, its validation, and a launch's features.

The contract's sources and columns (``contract``), their validation (``validation``), launch rows
by column (``rows``), the spec table by type (``specs``), the architecture summary of a model
definition (``architecture``), job families (``families``), the history snapshot (``snapshot``)
and the history read from it (``history``), and the feature extraction training and serving share
(``features``). Nothing here knows of a model, a ranking or MLflow.
"""
