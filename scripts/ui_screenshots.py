"""Screenshots of the two UIs on the project's data, for the README and ``docs/screenshots/``.

Starts ``leap ui`` on free loopback ports, opens the pages in headless Chromium (materializing,
from the UI, the day after the demo's last: yesterday) and stops both servers. It needs
Chromium from the system's package manager and the ``screenshots`` extra:

    sudo apt-get install chromium            # Debian/Ubuntu; /usr/bin/chromium
    .venv/bin/pip install -e '.[screenshots]'
    .venv/bin/leap demo                      # the data the pictures show
    .venv/bin/python scripts/ui_screenshots.py [--data data] [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from leap_pipeline.app.process_groups import answers, free_port

PROJECT = Path(__file__).resolve().parents[1]
MODEL = "leap-throughput"
# Chromium as root on a closed network: no sandbox, no background connections
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
VIEWPORT = {"width": 1600, "height": 900}
SETTLE_MS = 4000  # both UIs render after their first queries return


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def _production_run(mlflow: str) -> tuple[str, str]:
    """(experiment id, run id) of the version the production alias names."""
    query = urllib.parse.urlencode({"name": MODEL, "alias": "production"})
    version = _json(f"{mlflow}/api/2.0/mlflow/registered-models/alias?{query}")["model_version"]
    run = _json(f"{mlflow}/api/2.0/mlflow/runs/get?run_id={version['run_id']}")["run"]
    return run["info"]["experiment_id"], version["run_id"]


def _dismiss(page, role: str, name: str) -> None:
    button = page.get_by_role(role, name=name)
    if button.count():
        button.first.click()
        page.wait_for_timeout(500)


def _graphql(dagster: str, query: str) -> dict:
    request = urllib.request.Request(
        f"{dagster}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["data"]


def launch_day(dagster: str, day: str) -> str:
    """Launch ``daily_pipeline`` for ``day``, with the mutation the UI's Materialize button
    sends; returns the run id."""
    launched = _graphql(
        dagster,
        "mutation { launchRun(executionParams: { selector: { repositoryLocationName: "
        '"leap_pipeline.orchestration.definitions", repositoryName: "__repository__", jobName: '
        f'"daily_pipeline" }}, executionMetadata: {{ tags: [{{ key: "dagster/partition", '
        f'value: "{day}" }}] }} }}) {{ __typename ... on LaunchRunSuccess {{ run {{ runId }} }} '
        "... on PythonError { message } } }",
    )["launchRun"]
    if launched["__typename"] != "LaunchRunSuccess":
        raise RuntimeError(f"the UI refused to launch {day}: {launched}")
    return launched["run"]["runId"]


def shoot(dagster: str, mlflow: str, out: Path, chromium: str, next_day: str) -> list[Path]:
    from playwright.sync_api import sync_playwright

    experiment, run = _production_run(mlflow)
    shots = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)

        def take(name: str, url: str, prepare=None) -> None:
            page.goto(url)
            page.wait_for_timeout(SETTLE_MS)
            _dismiss(page, "button", "Skip")  # Dagster's first-visit community dialog
            if prepare is not None:
                prepare()
            shots.append(out / f"{name}.png")
            page.screenshot(path=str(shots[-1]))

        def expand_groups() -> None:
            page.mouse.click(VIEWPORT["width"] - 300, 200, button="right")  # the graph's menu
            page.wait_for_timeout(500)
            _dismiss(page, "menuitem", "Expand all groups")
            page.wait_for_timeout(1000)

        take("dagster-asset-graph", f"{dagster}/asset-groups", expand_groups)
        take("dagster-partitions", f"{dagster}/assets/feature_table?view=partitions")
        # the day after the demo's last, materialized from the UI: its run, then the partitions
        run_id = launch_day(dagster, next_day)
        for _ in range(120):
            status = _graphql(dagster, f'{{ runOrError(runId: "{run_id}") {{ ... on Run '
                              "{ status } } }")["runOrError"]["status"]  # fmt: skip
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                break
            time.sleep(2)
        take("dagster-materialize-next-day", f"{dagster}/runs/{run_id}")
        take("dagster-partitions-after", f"{dagster}/assets/feature_table?view=partitions")

        def open_drift_check() -> None:  # the check's latest result, its PSI table shown
            page.get_by_text("feature_drift", exact=True).first.click()
            page.wait_for_timeout(SETTLE_MS)

        take("dagster-feature-drift", f"{dagster}/assets/model_evaluation?view=checks",
             open_drift_check)  # fmt: skip
        close_assistant = lambda: _dismiss(page, "button", "Close")  # noqa: E731
        take("mlflow-model-versions", f"{mlflow}/#/models/{MODEL}", close_assistant)
        take(
            "mlflow-run-plots",
            f"{mlflow}/#/experiments/{experiment}/runs/{run}/artifacts/predicted_vs_measured.png",
            close_assistant,
        )
        browser.close()
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data", help="the folder `leap demo` wrote")
    parser.add_argument("--out", default=str(PROJECT / "docs" / "screenshots"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args(argv)
    if not Path(args.chromium).exists():
        parser.error(f"--chromium={args.chromium!r} not found: sudo apt-get install chromium")
    try:
        import playwright  # noqa: F401
    except ImportError:
        parser.error("playwright is not installed: .venv/bin/pip install -e '.[screenshots]'")
    data = Path(args.data)
    if not (data / "mlflow" / "mlflow.db").exists():
        parser.error(f"--data={args.data!r} has no MLflow store: run `leap demo` first")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dagster_port, mlflow_port = free_port(), free_port()
    dagster, mlflow = f"http://127.0.0.1:{dagster_port}", f"http://127.0.0.1:{mlflow_port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "leap_pipeline.app.cli", "ui", "--data", str(data),
         "--dagster-port", str(dagster_port), "--mlflow-port", str(mlflow_port)],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not (answers(f"{dagster}/server_info") and answers(f"{mlflow}/health")):
            if server.poll() is not None or time.monotonic() > deadline:
                print("leap ui did not start: see its output above", file=sys.stderr)
                return 1
            time.sleep(1)
        from leap_pipeline.orchestration.calendar import Calendar

        next_day = Calendar.load(data).last_closed_day().isoformat()  # yesterday: the demo's next
        for path in shoot(dagster, mlflow, out, args.chromium, next_day):
            print(f"wrote {path}")
    finally:
        server.send_signal(signal.SIGINT)  # leap ui stops both servers
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
