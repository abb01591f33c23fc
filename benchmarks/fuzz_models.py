"""Mutants of a real model folder, each loaded and ranked in a worker process: 0 crashes, 0 hangs.

A launcher loads whatever the registry or a folder hands it, so the loader must refuse every
model file it cannot serve, by name, and never crash, hang or rank from a model that reads
outside its arrays. This takes a real published model (the tiny demo's: a few simulated days
at scale 0.02, trained with the fast profile; or ``--model FOLDER``) and writes mutants of its
files, each with a manifest rewritten to match (what someone who can write the artifact store
does):

- ``tree_text``: a line of a booster's LightGBM text changed: a number set to an extreme, a
  value dropped or added, the line deleted or repeated, a tree renumbered;
- ``numeric_extreme``: a number of the JSON set to an extreme (0, -1, 2**63, 10**400, NaN, inf..);
- ``delete_field``: a key or a list element of the JSON deleted;
- ``type_swap``: a value of the JSON replaced by one of another type (deeply nested, huge);
- ``byte_flip``: bytes of the file flipped; ``truncate``: the file cut short;
- ``metadata``: any of the above on ``metadata.json``; ``parquet_flip``: bytes of a Parquet file.

Each mutant is loaded (``LeapModel.load``) and, if it loads, served (``Ranker``) a launch, in a
worker process: a worker that dies is a crash, one that answers nothing within ``--timeout``
seconds is a hang (both restarted, the run goes on). Every other outcome is counted: refused at
load (``ModelArtifactError``, the expected answer to a bad file), ranked, an empty ranking with
a caller-facing reason, or a bug (any other exception, or an ``internal_error`` reason).

    .venv/bin/python benchmarks/fuzz_models.py --mutants 10000 --json
"""

from __future__ import annotations

import argparse
import base64
import copy
import dataclasses
import datetime as dt
import hashlib
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
CASCADE, METADATA, MANIFEST = "cascade.json", "metadata.json", "MANIFEST.json"
PARQUETS = ("history_snapshot.parquet", "hardware_specs.parquet")
KINDS = {  # mutation -> weight
    "tree_text": 34, "numeric_extreme": 18, "delete_field": 12, "type_swap": 10,
    "byte_flip": 12, "truncate": 3, "metadata": 8, "parquet_flip": 3,
}  # fmt: skip
EXTREMES: list[Any] = [
    0, -1, 1, 2, 84, 85, 4000, 32767, 32768, 2**31, -(2**31) - 1, 2**63 - 1, 2**63,
    -(2**63) - 1, 10**30, 10**400, 1e308, -1e308, 5e-324, 0.5, -0.5,
    float("nan"), float("inf"), float("-inf"),
]  # fmt: skip
TEXT_EXTREMES = [
    "0", "-1", "1", "84", "85", "4000", "32768", "2147483648", "9223372036854775808",
    "99999999999999999999999", "1e308", "-1e308", "nan", "inf", "-inf", "5e-324", "-0", "1.5",
    "x", "", "1" * 5000,
]  # fmt: skip
OUTCOMES = ("refused", "ranked", "empty", "bug", "crash", "hang")


# -- the base model ------------------------------------------------------------------------------


def build_base(folder: Path, scale: float = 0.02, days: int = 10) -> Path:
    """The tiny demo's model: ``days`` simulated days at ``scale``, one night trained with the
    fast profile, its cascade published as a launcher loads it; returns the model folder."""
    from leap_pipeline.data.warehouse import open_warehouse
    from leap_pipeline.modeling.night_store import save_trained
    from leap_pipeline.modeling.selection import fit_models
    from leap_pipeline.orchestration.definitions import materialize_days

    first = dt.date(2026, 1, 1)
    night = first + dt.timedelta(days=days - 1)
    warehouse = folder / "leap.duckdb"
    materialize_days(first, night, source=f"simulator:seed=3,scale={scale}",
                     warehouse=str(warehouse), log_level="WARNING")  # fmt: skip
    with open_warehouse(warehouse, read_only=True) as wh:
        models = fit_models(wh.read("feature_table", first, night - dt.timedelta(days=1)), night)
        snapshot = wh.read("history_snapshot", night, night).drop("ds")
        specs = wh.read("hardware_specs", night, night).drop("ds")
    # ship the night's cascade, whatever the selection chose: its classifier, bins and experts
    # are the arrays a crafted file aims at (a one-bin model has only one booster)
    models = dataclasses.replace(models, published=models.cascade)
    save_trained(models, folder / "models", snapshot, specs, "fast")
    return (folder / "models" / "cascade").resolve()


def read_base(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in Path(folder).resolve().iterdir() if p.is_file()}


# -- mutants -------------------------------------------------------------------------------------


def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Every path into a JSON value (keys and indices), the root excluded."""
    found: list[tuple] = []
    if isinstance(value, (dict, list)):
        for key, child in value.items() if isinstance(value, dict) else enumerate(value):
            found.append((*path, key))
            found.extend(_paths(child, (*path, key)))
    return found


def _copy_along(root: Any, path: tuple) -> tuple[Any, Any]:
    """A copy of ``root`` sharing everything but the containers along ``path``; returns (new
    root, the copied parent of the path's last step)."""
    new_root = copy.copy(root)
    node = new_root
    for key in path[:-1]:
        node[key] = copy.copy(node[key])
        node = node[key]
    return new_root, node


def _numbers_at(value: Any) -> list[tuple]:
    return [
        p for p in _paths(value)
        if isinstance(_get(value, p), (int, float)) and not isinstance(_get(value, p), bool)
    ]  # fmt: skip


def _get(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def _other_type(rng: random.Random) -> Any:
    return rng.choice([
        None, True, "", "x" * 100, [], {}, [1, 2, 3], {"a": 1}, 3, 2.5, ["BinnedCascade"],
        [[[[[[[[[[0]]]]]]]]]], [0] * 200_000, {"kind": "GBDTRegressor"},
    ])  # fmt: skip


def _mutate_json(data: Any, kind: str, rng: random.Random) -> tuple[Any, str]:
    if kind == "numeric_extreme":
        paths = _numbers_at(data)
        path = rng.choice(paths)
        new, parent = _copy_along(data, path)
        parent[path[-1]] = rng.choice(EXTREMES)
        return new, f"{_name(path)}={parent[path[-1]]!r:.30}"
    paths = _paths(data)
    path = rng.choice(paths)
    new, parent = _copy_along(data, path)
    if kind == "delete_field":
        del parent[path[-1]]
        return new, f"del {_name(path)}"
    parent[path[-1]] = _other_type(rng)
    return new, f"{_name(path)}: {type(parent[path[-1]]).__name__}"


def _name(path: tuple) -> str:
    return ".".join(str(k) for k in path)


def _mutate_tree_text(data: dict, rng: random.Random) -> tuple[Any, str]:
    texts = [p for p in _paths(data) if p and p[-1] == "model_text"]
    path = rng.choice(texts)
    lines = _get(data, path).split("\n")
    index = rng.randrange(len(lines))
    while "=" not in lines[index] and rng.random() < 0.95:
        index = rng.randrange(len(lines))
    key, _, value = lines[index].partition("=")
    tokens = value.split(" ")
    action = rng.choice(["extreme", "extreme", "extreme", "drop", "add", "delete", "repeat"])
    if action == "extreme":
        tokens[rng.randrange(len(tokens))] = rng.choice(TEXT_EXTREMES)
        lines[index] = f"{key}={' '.join(tokens)}"
    elif action == "drop":
        tokens.pop(rng.randrange(len(tokens)))
        lines[index] = f"{key}={' '.join(tokens)}"
    elif action == "add":
        tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(TEXT_EXTREMES))
        lines[index] = f"{key}={' '.join(tokens)}"
    elif action == "delete":
        lines.pop(index)
    else:
        lines.insert(index, lines[index])
    new, parent = _copy_along(data, path)
    parent[path[-1]] = "\n".join(lines)
    return new, f"{_name(path[:-1])} {action} {key[:30]}"


def mutant(base: dict[str, bytes], index: int, seed: int = 0) -> tuple[str, str, bytes]:
    """Mutant ``index`` of the base files: (mutation kind, file name, its new bytes), the same
    for the same seed and index."""
    rng = random.Random(f"{seed}:{index}")
    kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    if kind == "parquet_flip":
        name = rng.choice(PARQUETS)
        return kind, name, _flip(base[name], rng)
    name = METADATA if kind == "metadata" else CASCADE
    if kind == "byte_flip":
        return kind, name, _flip(base[name], rng)
    if kind == "truncate":
        return kind, name, base[name][: rng.randrange(len(base[name]))]
    data = _parsed(base, name)
    if kind == "tree_text":
        data, what = _mutate_tree_text(data, rng)
    else:
        json_kind = kind if kind != "metadata" else rng.choice(
            ["numeric_extreme", "delete_field", "type_swap"]
        )  # fmt: skip
        data, what = _mutate_json(data, json_kind, rng)
    return f"{kind}: {what}", name, json.dumps(data).encode()


_PARSED: dict[tuple[int, str], Any] = {}


def _parsed(base: dict[str, bytes], name: str) -> Any:
    key = (id(base), name)
    if key not in _PARSED:
        _PARSED[key] = json.loads(base[name])
    return _PARSED[key]


def _flip(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(out))
        if rng.random() < 0.5:
            out[at] ^= 1 << rng.randrange(8)
        else:
            out[at] = rng.choice(b'0123456789-.e =\n"')
    return bytes(out)


# -- the workers -----------------------------------------------------------------------------


def _serve(folder: Path, job: dict, candidates: list[str]) -> dict[str, str]:
    """Load the folder's model and rank one launch: the outcome and its reason."""
    from leap_serving.decide.ranker import Ranker
    from leap_serving.model.published import LeapModel, ModelArtifactError

    try:
        model = LeapModel.load(folder)
    except ModelArtifactError as exc:
        return {"outcome": "refused", "reason": str(exc)}
    except Exception as exc:
        return {"outcome": "bug", "reason": f"load: {type(exc).__name__}: {exc}"}
    ranker = Ranker(model=model, wait=True, max_model_age_days=None)
    if ranker.stats()["load_error"]:
        return {"outcome": "bug", "reason": f"serve: {ranker.stats()['load_error']}"}
    last = model.history_index.last_ds
    day = last + dt.timedelta(days=1) if last else dt.date.today()
    known = [t for t in candidates if t in ranker._loaded.specs] or list(ranker._loaded.specs)[:8]
    result = ranker.rank(job, known, launch_date=day)
    if result.reason_code == "internal_error":
        return {"outcome": "bug", "reason": result.reason}
    return {"outcome": "ranked" if result.ranking else "empty", "reason": result.reason or ""}


def worker_main(base_folder: str, work_folder: str) -> None:
    """A worker: copies the base folder, then per line on stdin (file name, base64 bytes)
    writes that file and a matching manifest, loads, ranks, and answers one JSON line."""
    job = json.loads((PROJECT / "examples" / "job.json").read_text())
    candidates = job.pop("candidates")
    work = Path(work_folder)  # the parent's: it removes it, however this process ends
    base = read_base(Path(base_folder))
    for name, data in base.items():
        (work / name).write_bytes(data)
    digests = {n: hashlib.sha256(d).hexdigest() for n, d in base.items() if n != MANIFEST}
    manifest = json.loads(base[MANIFEST])
    _serve(work, job, candidates)  # compile the walks before the first timed mutant
    changed = None
    for line in sys.stdin:
        request = json.loads(line)
        name, data = request["file"], base64.b64decode(request["data"])
        if changed is not None:
            (work / changed).write_bytes(base[changed])
        (work / name).write_bytes(data)
        changed = name
        files = {**digests, name: hashlib.sha256(data).hexdigest()}
        (work / MANIFEST).write_text(json.dumps({**manifest, "files": files}))
        try:
            answer = _serve(work, job, candidates)
        except BaseException as exc:  # what escaped the loader and the Ranker: a bug
            answer = {"outcome": "bug", "reason": f"escaped: {type(exc).__name__}: {exc}"}
        answer["reason"] = answer["reason"][:300]
        print(json.dumps(answer), flush=True)
    shutil.rmtree(work, ignore_errors=True)


class Worker:
    """One worker process; ``ask`` answers an outcome, restarting the worker after a crash or
    a hang."""

    def __init__(self, base_folder: Path, timeout: float) -> None:
        self.base_folder, self.timeout = base_folder, timeout
        self.process: subprocess.Popen | None = None
        self.work = ""  # the worker's folder of mutant files, made at each start

    def _start(self) -> None:
        self.work = tempfile.mkdtemp(prefix="leap-fuzz-")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(self.base_folder), self.work],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        # the first answer waits for the warm-up: a generous limit, outside the timed ones
        self._send({"file": MANIFEST, "data": base64.b64encode(b"{}").decode()})
        self._read(600.0)

    def _send(self, request: dict) -> None:
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()

    def _read(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.stop()
            return {"outcome": "hang", "reason": f"no answer within {timeout:g} s"}
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            self.process = None
            return {"outcome": "crash", "reason": f"worker exited with {code}"}
        return json.loads(line)

    def ask(self, name: str, data: bytes) -> dict:
        if self.process is None:
            self._start()
        try:
            self._send({"file": name, "data": base64.b64encode(data).decode()})
        except BrokenPipeError:
            self.stop()
            return {"outcome": "crash", "reason": "worker gone"}
        return self._read(self.timeout)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
        if self.work:
            shutil.rmtree(self.work, ignore_errors=True)


class Mutants(Sequence):
    """``n`` mutants of the base files, each made when a worker asks for it (ten thousand
    copies of a megabyte model held at once would take gigabytes)."""

    def __init__(self, base: dict[str, bytes], n: int, seed: int) -> None:
        self.base, self.n, self.seed = base, n, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):  # type: ignore[override]
        if not 0 <= index < self.n:
            raise IndexError(index)
        return mutant(self.base, index, self.seed)


def run(
    base_folder: Path,
    cases: Sequence[tuple[str, str, bytes]],
    jobs: int = 2,
    timeout: float = 5.0,
    progress: bool = False,
) -> list[dict]:
    """Each case (label, file name, bytes) through the workers: one answer per case, in order."""
    answers: list[dict | None] = [None] * len(cases)
    lock = threading.Lock()
    next_case = iter(range(len(cases)))
    started = time.monotonic()

    def drive() -> None:
        worker = Worker(base_folder, timeout)
        try:
            while True:
                with lock:
                    i = next(next_case, None)
                if i is None:
                    return
                label, name, data = cases[i]
                answers[i] = {"case": label, "file": name, **worker.ask(name, data)}
                if progress and (i + 1) % 500 == 0:
                    rate = (i + 1) / (time.monotonic() - started)
                    print(f"fuzz: {i + 1}/{len(cases)} ({rate:.1f}/s)", file=sys.stderr)
        finally:
            worker.stop()

    threads = [threading.Thread(target=drive) for _ in range(max(1, jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers  # type: ignore[return-value]


def fuzz(base_folder: Path, n: int, seed: int = 0, jobs: int = 2, timeout: float = 5.0,
         progress: bool = False) -> dict[str, Any]:  # fmt: skip
    """``n`` mutants of the base folder through the workers; the counts."""
    base = read_base(base_folder)
    started = time.monotonic()
    answers = run(base_folder, Mutants(base, n, seed), jobs, timeout, progress)
    outcomes = Counter(a["outcome"] for a in answers)
    by_kind: dict[str, Counter] = {}
    for answer in answers:
        kind = answer["case"].split(":")[0]
        by_kind.setdefault(kind, Counter())[answer["outcome"]] += 1
    bad = [a for a in answers if a["outcome"] in ("bug", "crash", "hang")]
    return {
        "mutants": n,
        "seed": seed,
        **{o: outcomes.get(o, 0) for o in OUTCOMES},
        "by_mutation": {k: dict(v) for k, v in sorted(by_kind.items())},
        "failures": bad[:20],
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mutants", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds before a hang")
    parser.add_argument("--model", type=Path, help="a published model folder (default: the "
                        "tiny demo's, built once under data/bench-models/fuzz-base)")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(*args.worker)
        return
    folder = args.model
    if folder is None:
        cache = PROJECT / "data" / "bench-models" / "fuzz-base"
        folder = cache / "models" / "cascade"
        if not (folder / MANIFEST).exists():
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir(parents=True)
            print("fuzz: training the tiny demo's model once", file=sys.stderr)
            folder = build_base(cache)
    result = fuzz(folder.resolve(), args.mutants, args.seed, args.jobs, args.timeout, True)
    if args.json:
        print(json.dumps(result))
    else:
        for key in ("mutants", *OUTCOMES, "seconds"):
            print(f"{key}: {result[key]}")
        for failure in result["failures"]:
            print(f"  {failure}")


if __name__ == "__main__":
    main()
