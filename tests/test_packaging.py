import json
import os
import subprocess
import sys
import tempfile

import pytest


def test_leap_serving_imports_without_dagster_mlflow_or_the_pipeline():
    code = (
        "import sys, leap_serving, leap_serving.contract, leap_serving.architecture, "
        "leap_serving.metrics, leap_serving.ranking, leap_serving.model; "
        "print(sorted({'dagster', 'mlflow', 'leap_pipeline'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_dagster_definitions_load():
    from leap_pipeline.orchestration.definitions import defs

    assert defs().resolve_asset_graph().get_all_asset_keys()  # what workspace.yaml loads


def _leap(*args: str) -> subprocess.CompletedProcess:
    """The CLI in an empty folder: a user's data/ (after `leap demo`, say) is never read."""
    env = {k: v for k, v in os.environ.items() if k != "LEAP_WAREHOUSE"}
    with tempfile.TemporaryDirectory() as empty:
        return subprocess.run(
            [sys.executable, "-m", "leap_pipeline.app.cli", *args],
            capture_output=True, text=True, cwd=empty, env=env,
        )  # fmt: skip


def _documented_fleet_stats_keys() -> set[str]:
    """The keys README.md says `leap fleet stats --json` prints."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    entry = readme.split("- `leap fleet stats", 1)[1].split("\n- `leap ", 1)[0]
    listed = entry.split("`--json` prints one object with the keys", 1)[1].split(". ", 1)[0]
    return set(re.findall(r"`(\w+)`", listed))


def test_fleet_stats_json_has_every_key():
    result = _leap("fleet", "stats", "--scale", "0.02", "--days", "3", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    expected = {
        "attempts_per_day", "model_types_per_day", "hardware_types", "top19_share",
        "top100_share", "min_throughput", "max_throughput", "two_decade_share",
        "per_hw_p95_p5_min", "per_hw_p95_p5_max", "p95_p5_all", "median_ratio_slowest_fastest",
        "key_spread_share", "lookup_coverage", "lookup_w20", "oracle_w20", "within_range",
        "read_from",
    }  # fmt: skip
    # the README's list is this one, and the JSON has exactly its keys: none missing, none
    # undocumented
    assert _documented_fleet_stats_keys() == expected
    assert set(stats) == expected, (expected - set(stats), set(stats) - expected)
    assert 0.02 * 22_000 <= stats["attempts_per_day"] <= 0.02 * 28_000


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--scale", "-1"], "scale"),
        (["--seed", "x"], "seed"),
        (["--days", "1"], "days"),
    ],
)
def test_fleet_stats_rejects_bad_arguments_by_name(args, named):
    result = _leap("fleet", "stats", *args)
    assert result.returncode == 2
    assert named in result.stderr


def test_the_committed_dagster_yaml_is_the_one_the_demo_writes():
    from pathlib import Path

    from leap_pipeline.orchestration.instance import DAGSTER_YAML

    committed = Path(__file__).parents[1] / "data" / "dagster" / "dagster.yaml"
    assert committed.read_text() == DAGSTER_YAML


def test_the_ranker_is_leap_serving_ranker_and_needs_no_dagster():
    code = (
        "import sys, leap_serving; "
        "assert 'leap_serving.ranking' not in sys.modules; "
        "from leap_serving import Ranker; import leap_serving.ranking as r; "
        "assert Ranker is r.Ranker; "
        "assert not any(m.split('.')[0] in ('dagster', 'leap_pipeline') for m in sys.modules)"
    )
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_ci_runs_the_readme_test_command_verbatim():
    """`.ci/run` runs the README's test command exactly as a new user types it on a clean
    checkout (its own fresh .venv), and the README keeps its two commands: the main job, then
    the tests."""
    import re
    from pathlib import Path

    project = Path(__file__).resolve().parents[1]
    readme = (project / "README.md").read_text()
    section = readme.split("## Two commands on a fresh machine", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", section, re.S)
    assert len(commands) == 2, commands
    main, tests = commands
    assert main.endswith("leap demo") and tests.endswith("-m pytest")
    ci = (project / ".ci" / "run").read_text()
    lines = [line.strip() for line in ci.splitlines()]
    runs = [line.split(" || ")[0] for line in lines if line.startswith(tests)]
    assert runs == [tests]
    assert "-m long" in ci  # and the long runs beside them
