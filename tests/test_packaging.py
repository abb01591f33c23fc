import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import pytest


def test_leap_serving_imports_without_dagster_mlflow_or_the_pipeline():
    code = (
        "import sys, leap_serving, leap_serving.launch.contract, leap_serving.launch.architecture, "
        "leap_serving.decide.metrics, leap_serving.decide.ranker, leap_serving.model.published, "
        "leap_serving.registry.registered, leap_serving.registry.shipped; "
        "print(sorted({'dagster', 'mlflow', 'leap_pipeline'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_the_servers_load_the_checkouts_workspace_from_the_data_folder_too(tmp_path):
    """An installed wheel has no checkout: ``leap ui`` and ``leap up`` write the workspace
    into the data folder, the same as the checkout's own workspace.yaml (for ``dg dev``)."""
    from leap_pipeline.app.process_groups import PROJECT
    from leap_pipeline.app.ui import WORKSPACE_YAML, workspace_file

    assert (PROJECT / "workspace.yaml").read_text() == WORKSPACE_YAML
    path = workspace_file(tmp_path / "data")
    assert path == tmp_path / "data" / "workspace.yaml" and path.read_text() == WORKSPACE_YAML


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
    """The keys docs/commands.md says `leap fleet stats --json` prints."""
    import re
    from pathlib import Path

    reference = Path(__file__).resolve().parents[1] / "docs" / "commands.md"
    entry = reference.read_text().split("- `leap fleet stats", 1)[1].split("\n- `leap ", 1)[0]
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
    # the command reference's list is this one, and the JSON has exactly its keys: none
    # missing, none undocumented
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
        "assert 'leap_serving.decide.ranker' not in sys.modules; "
        "from leap_serving import Ranker, Ranking; import leap_serving.decide.ranker as r; "
        "import leap_serving.decide.results as results; "
        "assert Ranker is r.Ranker and Ranking is results.Ranking; "
        "assert not any(m.split('.')[0] in ('dagster', 'leap_pipeline') for m in sys.modules)"
    )
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_ci_runs_the_readme_test_command_verbatim(tmp_path):
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
    assert main.endswith("leap demo") and tests.endswith("-m pytest -n auto --dist loadscope")
    ci = (project / ".ci" / "run").read_text()
    lines = [line.strip() for line in ci.splitlines()]
    runs = [line.split(" || ")[0] for line in lines if line.startswith(tests)]
    assert runs == [tests]
    # and what the script runs, not what it says: the README's command in the order typed
    readme = [shlex.split(part) for part in tests.split(" && ")]
    calls, out, err, code = _run_ci(tmp_path)
    assert code == 0 and "CI: passed" in out, err
    assert [c for c in calls if c in readme] == readme


# A stand-in for python, pip and ruff, on PATH and in every venv it makes: it logs its command
# line (one write, so two lanes never interleave), passes, or fails as FAKE_CI_FAIL says; the
# failing step (ruff, or the README's pytest) fails once the long lane's pytest runs.
FAKE_TOOL = r"""#!/usr/bin/env bash
line=$(printf '%s\x1f' "$0" "$@")
printf '%s\n' "$line" >> "$FAKE_CI_DIR/calls"
fail() {
    for _ in $(seq 200); do [ -s "$FAKE_CI_DIR/long-child.pid" ] && break; sleep 0.05; done
    echo "1 failed"
    exit 1
}
if [ "${1:-}" = -m ] && [ "${2:-}" = venv ]; then
    mkdir -p "$3/bin"
    for tool in python pip ruff uv; do cp "$FAKE_CI_DIR/bin/fake" "$3/bin/$tool"; done
elif [ "$(basename "$0")" = ruff ]; then
    if [ "${FAKE_CI_FAIL:-}" = ruff ]; then fail; fi
elif [ "${1:-}" = -m ] && [ "${2:-}" = pytest ] && [[ " $* " == *" -m long "* ]]; then
    echo $$ > "$FAKE_CI_DIR/long.pid"
    if [ -n "${FAKE_CI_FAIL:-}" ]; then  # the other lane fails: run until it is ended
        sleep 120 &
        echo $! > "$FAKE_CI_DIR/long-child.pid"
        wait
    fi
    echo "1 passed"
elif [ "${1:-}" = -m ] && [ "${2:-}" = pytest ]; then
    if [ "${FAKE_CI_FAIL:-}" = readme ]; then fail; fi
    echo "1 passed"
fi
"""
FAKE_DATE = """#!/usr/bin/env bash
echo $((FAKE_CI_DAY * 86400 + 43200))  # noon of day FAKE_CI_DAY since 1970, for date -u +%s
"""


def _run_ci(root, day: int = 20_000, **env: str) -> tuple[list[list[str]], str, str, int]:
    """.ci/run in a copy of its folder on UTC day ``day`` since 1970, every interpreter and tool
    it calls a stand-in: the command lines it ran (interpreters on PATH by name), its output,
    its errors and its exit code."""
    import shutil
    from pathlib import Path

    checkout, bin_ = root / "checkout", root / "bin"
    (checkout / ".ci").mkdir(parents=True)
    bin_.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / ".ci" / "run", checkout / ".ci" / "run")
    for name, text in (("fake", FAKE_TOOL), ("date", FAKE_DATE)):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    for version in ("3.11", "3.12", "3.13"):
        shutil.copy(bin_ / "fake", bin_ / f"python{version}")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("LEAP_CI", "FAKE_CI"))}
    environment.update(PATH=f"{bin_}:{os.environ['PATH']}", PYENV_ROOT=str(root / "no-pyenv"),
                       FAKE_CI_DIR=str(root), FAKE_CI_DAY=str(day), **env)  # fmt: skip
    # output to files, not pipes: a process the script leaves running cannot hold it open
    with open(root / "out", "w") as out, open(root / "err", "w") as err:
        code = subprocess.run(["bash", str(checkout / ".ci" / "run")], stdout=out, stderr=err,
                              env=environment, timeout=60).returncode  # fmt: skip
    calls = []
    for line in (root / "calls").read_text().splitlines():
        program, *args = line.split("\x1f")[:-1]
        calls.append([Path(program).name if program.startswith(str(bin_)) else program, *args])
    return calls, (root / "out").read_text(), (root / "err").read_text(), code


def test_ci_runs_ruff_before_the_readme_tests_and_the_long_runs_beside_them(tmp_path):
    calls, out, err, code = _run_ci(tmp_path)
    assert code == 0 and "CI: passed" in out, err
    for lane in ("readme_lane", "long_lane"):  # each lane's wall time, printed
        assert re.search(rf"^CI: {lane} took \d+ s \(exit 0\)$", out, re.M), out
    ruff = [c[1:] for c in calls if c[0].endswith("/bin/ruff")]
    assert ruff == [["check", "."], ["format", "--check", "."]]
    readme_pytest = calls.index(
        [".venv/bin/python", "-m", "pytest", "-n", "auto", "--dist", "loadscope"]
    )
    assert all(calls.index(c) < readme_pytest for c in calls if c[0].endswith("/bin/ruff"))
    pytest_runs = [c for c in calls if c[1:3] == ["-m", "pytest"]]
    assert [c[0] for c in pytest_runs if c[-2:] == ["-m", "long"]] == [".venv-3.13/bin/python"]
    # the long runs are split between the lanes, each file in exactly one: the service-free ones
    # in the README's .venv after its tests, the rest in the long lane
    (long_lane,) = [c for c in pytest_runs if c[-2:] == ["-m", "long"]]
    (readme_long,) = [c for c in pytest_runs if c[0] == ".venv/bin/python" and "long" in c]
    assert calls.index(readme_long) > readme_pytest
    files = readme_long[readme_long.index("long") + 1 :]
    assert files and all(f.startswith("tests/test_") for f in files)
    assert [a.removeprefix("--ignore=") for a in long_lane if a.startswith("--ignore=")] == files
    # uv installs the project in every environment but the README's own .venv, whose command
    # installs it with pip
    installers = sorted(c[0] for c in calls if "-e" in c)
    assert installers == [".venv-3.13/bin/uv", ".venv-skypilot/bin/uv", ".venv/bin/pip"]


@pytest.mark.parametrize(
    ("day", "env", "version"),
    [(20_000, {}, "3.13"), (20_001, {}, "3.12"), (20_000, {"LEAP_CI_LONG_PYTHON": "3.12"}, "3.12")],
)
def test_ci_runs_the_long_runs_on_3_13_and_3_12_on_alternate_days(tmp_path, day, env, version):
    calls, _, err, code = _run_ci(tmp_path, day, **env)
    assert code == 0, err
    long_runs = [c for c in calls if c[1:3] == ["-m", "pytest"] and c[-2:] == ["-m", "long"]]
    assert [c[0] for c in long_runs] == [f".venv-{version}/bin/python"]
    assert [f"python{version}", "-m", "venv", f".venv-{version}"] in calls


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("failing", ["readme", "ruff"])
def test_ci_fails_and_ends_the_long_lane_pytest_included_when_the_other_lane_fails(
    tmp_path, failing
):
    import signal
    import time

    try:
        calls, out, err, code = _run_ci(tmp_path, FAKE_CI_FAIL=failing)
        assert code != 0 and "CI: passed" not in out
        assert ("ruff failed" if failing == "ruff" else "README's test command failed") in err
        if failing == "ruff":  # the README's tests never start
            assert [".venv/bin/python", "-m", "pytest"] not in calls
        # the long lane's pytest (and a process it started) ran when the other lane failed
        pids = [int((tmp_path / f).read_text()) for f in ("long.pid", "long-child.pid")]
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "the long lane's pytest was left running"
    finally:  # this test's own stand-ins, should the script have left them
        for name in ("long.pid", "long-child.pid"):
            if (tmp_path / name).exists() and _alive(pid := int((tmp_path / name).read_text())):
                os.kill(pid, signal.SIGKILL)


def test_leap_version_prints_the_installed_version_on_stdout(capsys):
    """`leap --version` is the installed distribution's (importlib.metadata), the one
    pyproject.toml declares, on stdout as argparse's own version action prints it."""
    import tomllib
    from pathlib import Path

    from leap_pipeline.app.cli import main

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    version = tomllib.loads(pyproject.read_text())["project"]["version"]
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    printed = capsys.readouterr()
    assert stop.value.code == 0 and printed.out == f"leap {version}\n" and printed.err == ""


@pytest.mark.long
def test_the_built_wheel_installs_and_runs_the_demo_outside_the_source_tree(tmp_path):
    """A user's install, not a checkout's: the wheel built from the sources (only what the
    package ships: no repository around it), installed with the pinned versions into a fresh
    venv, then `leap --version`, a small `leap demo` and `leap rank` on its model, each run from
    a folder outside the repository. A module or data file missing from the wheel fails here
    and nowhere else, since every other test imports this checkout."""
    import shutil
    import tomllib
    from pathlib import Path

    project = Path(__file__).resolve().parents[1]
    source = tmp_path / "source"  # the package's own files, built away from build/ leftovers
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(project / name, source / name)
    for package in ("leap_pipeline", "leap_serving"):
        shutil.copytree(project / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip

    def run(*command, cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
        done = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                              cwd=cwd, env=env, timeout=timeout)  # fmt: skip
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-3000:])
        return done

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LEAP_", "MLFLOW_", "DAGSTER_")) and k != "PYTHONPATH"}  # fmt: skip
    env.update(DAGSTER_DISABLE_TELEMETRY="1", MLFLOW_DISABLE_TELEMETRY="true")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", source,
        cwd=outside)  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("leap-*.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=outside)
    uv = Path(sys.executable).with_name("uv")  # the dev extra's: the same pins, 2.6x faster
    if uv.exists():
        run(uv, "pip", "install", "-q", "--compile-bytecode", "--python", venv / "bin" / "python",
            "-c", project / "constraints.txt", wheel, cwd=outside)  # fmt: skip
    else:
        run(venv / "bin" / "pip", "install", "-q", "-c", project / "constraints.txt", wheel,
            cwd=outside)  # fmt: skip
    leap = venv / "bin" / "leap"

    version = tomllib.loads((project / "pyproject.toml").read_text())["project"]["version"]
    assert run(leap, "--version", cwd=outside).stdout == f"leap {version}\n"
    where = run(venv / "bin" / "python", "-c", "import importlib.metadata as m, leap_pipeline, "
                "leap_serving; print(leap_pipeline.__file__); print(leap_serving.__file__); "
                "print(*[f for f in m.files('leap') if f.name == 'LICENSE'])",
                cwd=outside).stdout.split()  # fmt: skip
    assert all(Path(p).is_relative_to(venv) for p in where[:2]), where  # not this checkout
    assert where[2].endswith("licenses/LICENSE"), where

    data = outside / "data"
    demo = run(leap, "demo", "--scale", "0.02", "--days", "10", "--nights", "1", "--data", data,
               "--json", cwd=outside)  # fmt: skip
    summary = json.loads(demo.stdout.strip().splitlines()[-1])
    assert summary["model_uri"].startswith("models:/") and 0 < summary["w20"]["published"] <= 1
    job = outside / "job.json"
    job.write_text((project / "examples" / "job.json").read_text())
    ranked = json.loads(run(leap, "rank", "--data", data, "--job", job, "--json",
                            cwd=outside).stdout)  # fmt: skip
    assert ranked["model_version"] is not None and ranked["reason_code"] is None, ranked
