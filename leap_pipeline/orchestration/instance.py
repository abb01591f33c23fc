"""The Dagster instance an install runs in: its home folder and the ``dagster.yaml`` it holds."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from leap_pipeline.settings import environment, set_environment

# The instance settings of data/dagster/dagster.yaml (a test keeps the committed file equal).
DAGSTER_YAML = """\
# The Dagster instance of the embedded default (DAGSTER_HOME=$PWD/data/dagster).
# Runs that write the DuckDB warehouse must not overlap: DuckDB allows one process per file.
concurrency:
  runs:
    max_concurrent_runs: 1
telemetry:
  enabled: false
# training progress (phase, EM iteration, expert k of K, time left) in each run's log
python_logs:
  managed_python_loggers:
    - leap.progress
  python_log_level: INFO
# a run stuck starting (its worker never came up) or cancelling is marked failed, so the nightly
# tick stops waiting on it and asks for its nights again
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  cancel_timeout_seconds: 180
"""


def ensure_dagster_home(folder: Path) -> Path:
    """Use ``folder`` as ``DAGSTER_HOME`` unless one is set; create it with its dagster.yaml."""
    if not environment().dagster_home:
        folder = folder.resolve()
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "dagster.yaml"
        if not config.exists():
            config.write_text(DAGSTER_YAML)
        set_environment(DAGSTER_HOME=str(folder))
    return Path(environment().dagster_home)


def dagster_instance() -> dg.DagsterInstance:
    """The persistent instance when ``DAGSTER_HOME`` is set, else a throwaway one."""
    if environment().dagster_home:
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()
