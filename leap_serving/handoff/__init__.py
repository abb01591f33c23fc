"""A ranking handed to the scheduler a fleet already runs: SkyPilot, Kubernetes, Slurm; each
adapter is a small pure function of a ``Ranking``."""
