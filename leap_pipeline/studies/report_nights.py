"""The report's finished nights kept on disk, so a long report that is stopped resumes.

Thirty nights at the paper's scale take hours: a report stopped at night 17 must not fit 16
nights again. Each finished night's figures are written, whole or not at all, under
``<data>/reports/nights/`` in a file named by a digest of:

- the code a night's figures depend on (``NIGHT_CODE``: the models, the features, the data
  layer, the simulator, the night's studies) and the libraries that fit them;
- the report's settings (scale, seed, profile, window, lookup support);
- the data the night read: each landed day's ``content_sha256`` from the warehouse's source log,
  for its window and its day.

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
from leap_pipeline.modeling.selection import training_window
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
    "holdouts": ("ablations", "holdout_regret"),
}
LIBRARIES = ("lightgbm", "numpy", "polars", "scikit-learn", "duckdb")


def code_digest(*studies: str) -> str:
    """SHA-256 over ``NIGHT_CODE``'s Python files (path and bytes, in path order), the
    ``studies``' files, and the versions of the libraries that fit and score."""
    digest = hashlib.sha256(b"leap-report-night/1\n")
    files: list[Path] = []
    for entry in (*NIGHT_CODE, *studies):
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
        self._code = code_digest()

    def key(self, wh: Warehouse, day: dt.date, window_days: int) -> str:
        first, _ = training_window(day, window_days)
        digest = hashlib.sha256(f"{self._code}\n{self._settings}\n{day}\n".encode())
        digest.update(data_digest(wh, first, day).encode())
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

    def study_key(self, key: str, study: str) -> str:
        """A study of the last night's models (``ablation``, ...), keyed also by its module."""
        files = [f"leap_pipeline/studies/{module}.py" for module in STUDY_MODULES[study]]
        return f"{study}-{code_digest(*files)[:16]}"

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
        if folder.exists():  # a folder another run left: published again, whole
            for leftover in sorted(folder.rglob("*"), reverse=True):
                leftover.unlink() if leftover.is_file() else leftover.rmdir()
            folder.rmdir()
        model.save(folder)


def missing_days(wh: Warehouse, first: dt.date, last: dt.date) -> list[dt.date]:
    """Days ``first`` .. ``last`` lacking a feature table or a history snapshot (the landing's
    last two assets): the days a resumed report still has to land."""
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    if not (wh.has("feature_table") and wh.has("history_snapshot")):
        return days
    landed = set(wh.partitions("feature_table")) & set(wh.partitions("history_snapshot"))
    return [day for day in days if day not in landed]


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
