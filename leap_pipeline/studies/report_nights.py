"""The report's finished nights kept on disk, so a long report that is stopped resumes.

Thirty nights at the paper's scale take hours: a report stopped at night 17 must not fit 16
nights again. Each finished night's figures are written, whole or not at all, under
``<data>/reports/nights/`` in a file named by a digest of:

- the code a night's figures depend on (``NIGHT_CODE``: the models, the features, the data
  layer, the simulator, the night's studies), the code that landed its rows (``LANDING_CODE``)
  and the libraries that fit them;
- the report's fleet and profile (scale, seed, profile, quick) and the window and lookup
  support they give (not the number of nights, so a longer report keeps a shorter one's);
- the data the night read: each landed day's ``content_sha256`` from the warehouse's source log,
  for its window and its day; for every night after the first, also the first night's key, as
  its staleness is scored against the first night's model.

A night is reused only when all three match; other code or other data computes it again. The
last night also keeps the studies run on its models (ladder, importance, hold-outs), each once
finished, and the first night keeps its served model, which every later night's staleness is
scored against.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import resource
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from leap_pipeline.data.digest import frame_digest
from leap_pipeline.data.warehouse import Warehouse
from leap_pipeline.modeling.selection import serving_model, training_window
from leap_pipeline.modeling.training import Night, window_gaps
from leap_pipeline.studies.monitoring import night_monitoring
from leap_pipeline.studies.staleness import staleness_scores
from leap_serving.model.publish import write_atomic
from leap_serving.model.published import LeapModel, ModelArtifactError

PACKAGES = Path(__file__).resolve().parents[2]
# what a night's figures are computed by: every module they run through; the CLI, Dagster's
# wiring and the report's other studies (the last night's tail is keyed by this and by its own
# file) do not change them
NIGHT_CODE: tuple[str, ...] = (
    "leap_serving",
    "leap_pipeline/data",
    "leap_pipeline/modeling",
    "leap_pipeline/simulation",
    "leap_pipeline/settings.py",
    "leap_pipeline/studies/monitoring.py",
    "leap_pipeline/studies/staleness.py",
    "leap_pipeline/studies/report_nights.py",
)
# the last night's studies, each with the module that computes it
STUDY_MODULES = {
    "ablation": ("ablations",),
    "importance": ("ablations",),
    "holdouts": ("ablations", "holdout_regret", "decisions"),
}
# what lands a simulated day: the simulator, the data layer and the feature code it runs
LANDING_CODE = (
    "leap_pipeline/simulation",
    "leap_pipeline/data",
    "leap_serving/launch",
    "leap_pipeline/orchestration/data_assets.py",
)
LIBRARIES = ("lightgbm", "numpy", "polars", "scikit-learn", "scipy", "duckdb")


def code_digest_of(entries: tuple[str, ...] | list[str]) -> str:
    """SHA-256 over the Python files of ``entries`` (folders or files under the project, path
    and bytes, in path order) and the versions of the libraries that fit and score."""
    digest = hashlib.sha256(b"leap-report-night/1\n")
    files: list[Path] = []
    for entry in entries:
        path = PACKAGES / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    for path in files:
        digest.update(str(path.relative_to(PACKAGES)).encode() + b"\0" + path.read_bytes())
    for name in LIBRARIES:
        try:
            digest.update(f"{name}=={version(name)}".encode())
        except PackageNotFoundError:
            digest.update(f"{name} absent".encode())
    return digest.hexdigest()


def code_digest(*studies: str) -> str:
    """``code_digest_of`` ``NIGHT_CODE`` and the ``studies``' files."""
    return code_digest_of((*NIGHT_CODE, *studies))


def data_digest(wh: Warehouse, first: dt.date, last: dt.date) -> str:
    """The landed content of days ``first`` .. ``last``: their source log's sources, row counts
    and content digests, in day order."""
    log = wh.read("source_log", first, last).select("ds", "source", "kept", "content_sha256")
    return frame_digest(log.sort("ds", "source"))


def peak_memory_mb() -> float:
    """This process's peak resident memory so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


class NightStore:
    """The finished nights of one report's settings, in ``folder``."""

    def __init__(self, folder: Path, settings: dict) -> None:
        self.folder = Path(folder)
        self._settings = json.dumps(settings, sort_keys=True, default=str)
        # the landing's code too: other features over the same source rows are other nights
        self._code = code_digest() + landing_digest()

    def key(self, wh: Warehouse, day: dt.date, window_days: int, first: str = "") -> str:
        """Night ``day``'s key; ``first``, the first night's key for every later night, whose
        staleness is scored against the first night's model."""
        start, _ = training_window(day, window_days)
        digest = hashlib.sha256(f"{self._code}\n{self._settings}\n{day}\n{first}\n".encode())
        digest.update(data_digest(wh, start, day).encode())
        return f"{day}-{digest.hexdigest()[:16]}"

    def _path(self, key: str, part: str = "night") -> Path:
        return self.folder / key / f"{part}.json"

    def load(self, key: str, part: str = "night") -> dict | None:
        """A kept record; None when it is absent or unreadable (then it is computed again)."""
        path = self._path(key, part)
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            print(f"{path} is unreadable ({exc}): computing it again", file=sys.stderr)
            return None

    def save(self, key: str, record: dict, part: str = "night") -> None:
        path = self._path(key, part)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(record))

    def study_key(self, key: str, study: str, shuffles: int) -> str:
        """A study of the last night's models (``ablation``, ...), keyed also by its modules
        (and the importance by its shuffles)."""
        files = [f"leap_pipeline/studies/{module}.py" for module in STUDY_MODULES[study]]
        extra = f"-{shuffles}" if study == "importance" else ""
        return f"{study}{extra}-{code_digest(*files)[:16]}"

    def load_model(self, key: str) -> LeapModel | None:
        folder = self.folder / key / "served"
        if not folder.is_dir():
            return None
        try:
            return LeapModel.load(folder)
        except (ModelArtifactError, OSError, ValueError) as exc:
            print(f"{folder} does not load ({exc}): computing it again", file=sys.stderr)
            return None

    def save_model(self, key: str, model: LeapModel) -> None:
        folder = self.folder / key / "served"
        folder.parent.mkdir(parents=True, exist_ok=True)
        model.save(folder)  # published whole, an earlier run's folder replaced in one step


def missing_days(wh: Warehouse, first: dt.date, last: dt.date) -> list[dt.date]:
    """Days ``first`` .. ``last`` a resumed report still has to land: without a history snapshot
    (the landing's last asset), or without feature rows unless landed with no measured attempt
    (``training.window_gaps``)."""
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    if not (wh.has("feature_table") and wh.has("history_snapshot") and wh.has("source_log")):
        return days
    snapshots = set(wh.partitions("history_snapshot"))
    gaps = set(window_gaps(wh, first, last))
    return [day for day in days if day in gaps or day not in snapshots]


def landing_digest() -> str:
    """The code that lands a day's rows from the simulator: a warehouse landed by other code
    is landed again whole (same columns, other values would pass every other check)."""
    return code_digest_of(LANDING_CODE)


def remaining_line(left: int, total: int, seconds: list[float]) -> str:
    """How many of ``total`` nights are left to compute and about how long they take: the
    median of ``seconds`` (nights computed, in this run or the one that kept them) each."""
    if left == 0:
        return f"no night of {total} left to compute"
    if not seconds:
        return f"{left} of {total} nights to compute"
    eta = sorted(seconds)[len(seconds) // 2] * left
    return f"{left} of {total} nights to compute, about {eta / 60:.0f} min"


def published_shares(selections: list[dict]) -> dict[str, float]:
    """The share of nights each model was published on, from the nights' own records."""
    names = [s["published"] for s in selections]
    return {name: names.count(name) / len(names) for name in sorted(set(names))}


def night_record(
    wh: Warehouse, night: Night, first_served: tuple[dt.date, LeapModel] | None
) -> tuple[dict, LeapModel]:
    """What the report keeps of a computed night (JSON), and its model as served."""
    day, models, evaluation = night.day, night.models, night.evaluation
    overall = {m: v["w20"] for m, v in evaluation["overall"].items()}
    before = day - dt.timedelta(days=1)
    served = serving_model(
        models,
        wh.read("history_snapshot", before, before).drop("ds"),
        wh.read("hardware_specs", day, day).drop("ds"),
    )
    monitoring = night_monitoring(day, evaluation)
    if first_served is not None:  # the first night's model, as if every night since had failed
        launches = wh.read("job_attempts", day, day)
        monitoring["staleness"] = staleness_scores(
            served, first_served[1], first_served[0], launches, day
        )
    table1 = evaluation["table1"]
    record = {
        "nightly": {"ds": day.isoformat(), **overall},
        "selection": {
            "ds": day.isoformat(),
            "published": models.selection["published"],
            "selection_day": models.selection.get("selection_day"),
            "selection_scores": models.selection["scores"],
            "margin": models.selection["margin"],
            "required_margin": models.selection["required_margin"],
            "published_w20": overall["published"],
            "single_gbdt_w20": overall["single_gbdt"],
            "cascade_w20": overall["cascade"],
        },
        "monitoring": monitoring,
        "routing_launches": evaluation.get("routing_launches"),
        "routing": evaluation.get("routing", {}),
        "table1": {
            "covered_jobs": table1["covered_attempts"],
            "coverage": table1["coverage"],
            **{k: table1[k] for k in table1 if "_w" in k or "ratio" in k},
        },
    }
    return json.loads(json.dumps(record)), served  # as it reads back from disk
