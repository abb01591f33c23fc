"""``leap ui``: the Dagster UI and the MLflow UI on the project's data, started and stopped as one.

Each server runs in its own process group (``process_groups``), so Ctrl-C here stops both with
everything they started (Dagster's code server and daemon included), and a server that dies
takes the other down. MLflow's server ignores ``MLFLOW_TRACKING_URI``: its backend store and
artifact root are named on its command line (``mlflow_server``), the same store the pipeline and
the demo write. The UIs hold ``leap up``'s lock on the folder shared (``up_lock``). ``leap up``
starts and stops its servers with the same helpers.
"""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from collections.abc import Callable
from pathlib import Path

from leap_pipeline.app.mlflow_server import mlflow_server
from leap_pipeline.app.process_groups import (
    interrupted_by_signals,
    signals_ignored,
    start_group,
    stop_groups,
    watch,
)
from leap_pipeline.app.up_lock import sharing_folder
from leap_pipeline.orchestration.calendar import Calendar
from leap_pipeline.settings import DATA_ENV, WAREHOUSE_ENV, child_environment, environment

# Dagster's recommended command (``dagster dev`` warns that ``dg dev`` supersedes it); with
# ``-w`` it loads workspace.yaml in this environment
DG = shutil.which("dg", path=sysconfig.get_path("scripts")) or shutil.which("dg") or "dg"


def ui_environment(data: Path) -> dict[str, str]:
    """The environment every process of the installation at ``data`` runs in (the UI, the
    daemon, its run workers): its data folder, whose calendar file sets the partitions, the
    Dagster home, the warehouse and the MLflow store, each where the settings put it in that
    folder (named explicitly: a variable the caller's shell set for another folder loses)."""
    install = environment({DATA_ENV: str(data.resolve())})
    return child_environment(
        **{
            DATA_ENV: str(install.data),
            "DAGSTER_HOME": str(install.dagster_home_path),
            WAREHOUSE_ENV: str(install.warehouse_path),
            "MLFLOW_TRACKING_URI": install.tracking_uri,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
    )


# what Dagster's webserver, daemon and ``dg dev`` load: the checkout's workspace.yaml holds the
# same (a test keeps the two equal), and an installed wheel, which has no checkout, gets it
# written into the data folder
WORKSPACE_YAML = "load_from:\n  - python_module: leap_pipeline.orchestration.definitions\n"


def workspace_file(data: Path) -> Path:
    """``workspace.yaml`` in the data folder, written when it differs: the servers load the
    pipeline from the installed package, from a checkout or a wheel alike."""
    path = data / "workspace.yaml"
    if not path.exists() or path.read_text() != WORKSPACE_YAML:
        data.mkdir(parents=True, exist_ok=True)
        path.write_text(WORKSPACE_YAML)
    return path


def commands(data: Path, dagster_port: int, mlflow_port: int) -> dict[str, tuple[list, dict]]:
    """The two servers: name -> (argv, environment)."""
    data = data.resolve()
    env = ui_environment(data)
    tracking, store = env["MLFLOW_TRACKING_URI"], environment({DATA_ENV: str(data)}).mlflow_store
    return {
        "dagster": (
            [
                str(DG),
                "dev",
                "-w",
                str(workspace_file(data)),
                "-h",
                "127.0.0.1",
                "-p",
                str(dagster_port),
            ],
            env,
        ),
        "mlflow": mlflow_server(tracking, store / "artifacts", mlflow_port, env),
    }


def serve(
    data: Path, dagster_port: int = 3000, mlflow_port: int = 5000, log: Callable = print
) -> int:
    """Run both UIs until Ctrl-C (or SIGTERM), or until one of them exits; never beside a
    ``leap up`` on the same folder (``sharing_folder``)."""
    (data / "dagster").mkdir(parents=True, exist_ok=True)
    (data / "mlflow").mkdir(parents=True, exist_ok=True)
    calendar = Calendar.load(data)  # a malformed file stops here, naming the field
    processes: dict[str, subprocess.Popen] = {}
    with sharing_folder(data), interrupted_by_signals():
        try:
            for name, (argv, env) in commands(data, dagster_port, mlflow_port).items():
                processes[name] = start_group(argv, env)
            log(f"Dagster UI: http://127.0.0.1:{dagster_port}  (assets, partitions, schedule)")
            log(f"MLflow UI:  http://127.0.0.1:{mlflow_port}  (runs, the registered model)")
            log(
                f"partitions: every day from {calendar.first_day} to the last closed day in "
                f"{calendar.timezone} ({data.resolve() / 'leap.toml'}); the nightly schedule "
                "runs at 02:00"
            )
            log("Ctrl-C stops both.")
            return watch(processes, log)
        except KeyboardInterrupt:
            log("stopping both servers")
            return 0
        finally:
            with signals_ignored():
                stop_groups(processes)
