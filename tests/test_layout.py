"""The codebase's shape, held by tests: the import layers, the formatter's layout, where
settings are read."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from leap_pipeline.settings import VARIABLES

PROJECT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(project: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=project,
        env={"PYTHONPATH": str(project), "PATH": str(LINT.parent)},
    )


def test_the_import_contracts_hold():
    """pyproject.toml's contracts: leap_serving needs neither the pipeline nor Dagster; its
    subpackages import downwards only (decide, registry, model, launch: the model knows nothing of
    ranking) and only registry imports MLflow; the pipeline's layers import downwards only;
    settings import no layer; only app and orchestration import Dagster; no cycles; the
    simulator is reached through the source adapter."""
    result = _lint(PROJECT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "8 kept, 0 broken" in result.stdout


SERVING_LAYERS = "leap_serving's layers"
ONLY_REGISTRY_IMPORTS_MLFLOW = "nothing in leap_serving imports MLflow"


@pytest.mark.parametrize(
    ("module", "wrong_way", "contract"),
    [
        ("leap_pipeline/modeling/lookup_table.py", "leap_pipeline.orchestration.runs", "layers"),
        ("leap_pipeline/modeling/routing.py", "leap_pipeline.orchestration.nightly_plan", "layers"),
        ("leap_pipeline/data/public_data.py", "leap_pipeline.modeling.lookup_table", "layers"),
        ("leap_pipeline/settings.py", "leap_pipeline.data.warehouse", "settings sit under every"),
        ("leap_serving/model/cascade.py", "leap_serving.decide.ranker", SERVING_LAYERS),
        ("leap_serving/model/published.py", "leap_serving.registry.registered", SERVING_LAYERS),
        ("leap_serving/launch/features.py", "leap_serving.model.cascade", SERVING_LAYERS),
        ("leap_serving/decide/ranker.py", "mlflow", ONLY_REGISTRY_IMPORTS_MLFLOW),
        ("leap_serving/model/published.py", "mlflow", ONLY_REGISTRY_IMPORTS_MLFLOW),
        # a module no contract named: covered by its package
        ("leap_pipeline/studies/report_markdown.py", "leap_pipeline.simulation", "simulator"),
        ("leap_pipeline/app/lockdown.py", "leap_pipeline.simulation.fleet", "simulator"),
    ],
)
def test_a_wrong_way_import_breaks_a_contract(tmp_path, module, wrong_way, contract):
    """A scratch copy with one import against the layers fails lint-imports, naming it."""
    for package in ("leap_pipeline", "leap_serving"):
        shutil.copytree(PROJECT / package, tmp_path / package)
    shutil.copy(PROJECT / "pyproject.toml", tmp_path)
    with (tmp_path / module).open("a") as source:
        source.write(f"\nimport {wrong_way}  # noqa\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    _, found, broken = result.stdout.partition("Broken contracts")  # what follows names them
    assert found and contract in broken and wrong_way in broken, result.stdout


def test_the_formatter_owns_the_layout():
    """No line of leap_pipeline or leap_serving turns the formatter off: ``ruff format`` lays
    out every module (CI's ruff lane runs ``ruff format --check .``), and a module is as long
    as its one concern needs."""
    off = [
        f"{path.relative_to(PROJECT)}:{number}"
        for package in ("leap_pipeline", "leap_serving")
        for path in sorted((PROJECT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"#\s*fmt:\s*(skip|off)", line)
    ]
    assert off == []


def test_only_the_settings_module_touches_the_environment():
    readers = [
        str(path.relative_to(PROJECT))
        for path in (PROJECT / "leap_pipeline").rglob("*.py")
        if path.name != "settings.py" and re.search(r"os\.environ|os\.getenv", path.read_text())
    ]
    assert readers == []


def test_the_configuration_page_lists_every_variable_with_its_default():
    """docs/configuration.md's table of environment variables (the README links to it)."""
    page = (PROJECT / "docs" / "configuration.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| `([^`]*)` \|", page, re.M)}
    assert {name: rows.get(name) for name in VARIABLES} == {
        name: default for name, (default, _) in VARIABLES.items()
    }


def test_the_docs_hold_current_results_and_no_work_history():
    """results.md is the current figures a user needs (at most 250 lines; changelog.md lists the
    changes by release, without figures), and no doc speaks of issue numbers or commits."""
    docs = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]
    assert len((PROJECT / "docs" / "results.md").read_text().splitlines()) <= 250
    assert (PROJECT / "docs" / "changelog.md").is_file()
    pattern = re.compile(r"\bissues? #?\d+|#\d{2,}\b|\bat [0-9a-f]{7,40}\b", re.IGNORECASE)
    found = {
        str(doc.relative_to(PROJECT)): pattern.findall(doc.read_text())
        for doc in docs
        if pattern.search(doc.read_text())
    }
    assert found == {}


def test_the_modules_run_on_the_small_demo_s_worker_are_those_that_take_it():
    """``conftest.SHARE_THE_SMALL_DEMO`` (one xdist scope, so the demo runs once a session)
    names every test module with a test or fixture taking ``small_demo``, and no other."""
    import ast

    from conftest import SHARE_THE_SMALL_DEMO, small_demo_scheduling

    takers = sorted(
        f"tests/{path.name}"
        for path in (PROJECT / "tests").glob("test_*.py")
        if any(
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and "small_demo" in {a.arg for a in node.args.args + node.args.kwonlyargs}
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert takers == sorted(SHARE_THE_SMALL_DEMO)
    scheduling = small_demo_scheduling()
    split = scheduling._split_scope.__get__(object.__new__(scheduling))
    scopes = {split(f"{module}::test_x[a::b]") for module in SHARE_THE_SMALL_DEMO}
    assert len(scopes) == 1  # one scope: one worker runs them all
    assert split("tests/test_layout.py::test_x") == "tests/test_layout.py"  # the others: theirs


def test_the_modules_that_hold_gpus_out_of_neusights_rows_share_one_worker():
    """``conftest.SHARE_THE_KERNEL_MODELS`` is one xdist scope of its own (its worker keeps
    each fold's kernel model for all of them), and each module it names holds GPUs out of
    NeuSight's rows: it runs a leave-hardware-out or partial-history split."""
    from conftest import SHARE_THE_KERNEL_MODELS, SHARE_THE_SMALL_DEMO, small_demo_scheduling

    scheduling = small_demo_scheduling()
    split = scheduling._split_scope.__get__(object.__new__(scheduling))
    kernel_scopes = {split(f"{module}::test_x") for module in SHARE_THE_KERNEL_MODELS}
    assert len(kernel_scopes) == 1
    assert kernel_scopes.isdisjoint(split(f"{m}::test_x") for m in SHARE_THE_SMALL_DEMO)
    for module in SHARE_THE_KERNEL_MODELS:  # each cross-validates (studies.crossval) ...
        text = (PROJECT / module).read_text()
        assert re.search(r"\bcrossval\b", text), module
        # ... with a split that holds GPUs out (the kernel model of a fold excludes them)
        assert "leave-hardware-out" in text or "partial-history" in text, module
