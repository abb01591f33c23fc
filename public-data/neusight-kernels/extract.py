#!/usr/bin/env python3
"""Extract NeuSight's per-kernel latency measurements (sitar-lab/NeuSight, ASPLOS'25 artifact).

Reads the repository straight from its git directory at a pinned commit (``git ls-tree`` and
``git show``; nothing is checked out) and writes, next to this script:

  kernels.parquet  one row per measured operator: NeuSight's operator name, the GPU, which of
                   NeuSight's two sets it is in (``train``: the five GPUs its predictor learns
                   from; ``test``: its held-out shapes and GPUs, H100 and L4 among them), the
                   latency in ms, the operator's shape (B, M, N, K for a matmul; B rows of H for
                   an element-wise op, a layer norm or a softmax), the kernel PyTorch launched
                   and its launch geometry
  devices.csv      NeuSight's device files (``scripts/asplos/data/dataset/*/device_configs``)

Sources, under scripts/asplos/data/dataset/:
  train/collect/<op>/p2.1.0/<GPU>.csv   bmm, linear, ln, softmax and eleven element-wise ops
  test/{bmm,linear,ln,softmax,elem}.csv
Left out: the convolutions (train/collect/conv, no model here has one), the pooled copies
(train/collect/<op>.csv, train/*.csv: the per-GPU files again, some only listed in the
snapshot, not held), test/vec.csv and test/habitat.csv (one blob: layer norms of
test/ln.csv's kind, kept once as test/ln.csv).

Every latency is float32 PyTorch 2.1.0 (``p2.1.0``), CUDA 12.1, cuDNN 8.9.2, in milliseconds as
NeuSight's collector writes them (torch.cuda.Event.elapsed_time).

Usage: python3 extract.py [GIT_DIR]
  GIT_DIR: the NeuSight git directory (default: the fetch tool's mirror). It must hold COMMIT.
Two runs give identical output (rows sorted, no timestamps in the file).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import polars as pl

OUT = Path(__file__).resolve().parent
COMMIT = "6945927d9afcca2b9daf021f8395e53edc5b4eef"  # as public data/neusight-asplos25 pins
DEFAULT_GIT = Path("/work/.mirror/sitar-lab+NeuSight/repo")
DATASET = "scripts/asplos/data/dataset"
OPS = (
    "bmm",
    "linear",
    "ln",
    "softmax",
    "add",
    "addu",
    "div",
    "divu",
    "mul",
    "mulu",
    "gelu",
    "pow",
    "powu",
    "relu",
    "tanh",
)
TEST_FILES = ("bmm", "linear", "ln", "softmax", "elem")
GEOMETRY = {
    "Warps per SM": "warps_per_sm",
    "Blocks per SM": "blocks_per_sm",
    "Grid x": "grid_x",
    "Grid y": "grid_y",
    "Grid z": "grid_z",
    "Block x": "block_x",
    "Block y": "block_y",
    "Block z": "block_z",
}
SHAPE = ("B", "M", "N", "K", "H")


def git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True
    ).stdout


def rows_of(git_dir: Path, path: str, split: str) -> list[dict]:
    text = git(git_dir, "show", f"{COMMIT}:{path}").decode()
    out = []
    for row in csv.DictReader(io.StringIO(text)):
        versions = (row["Torch Version"], row["CUDA Version"], row["CUDNN Version"])
        if versions != ("p2.1.0", "cu121", "8902"):
            raise ValueError(f"{path}: versions {versions}, expected p2.1.0 cu121 8902")
        record = {
            "op": row["OPName"],
            "device": row["Device"],
            "neusight_split": split,
            "latency_ms": float(row["Latency"]),
            "kernel": row["Kernel Name"],
            "kernels": row.get("Kernels") or None,
            "source": path,
        }
        for column in SHAPE:
            record[column.lower()] = int(row[column]) if row.get(column) else None
        record["large"] = {"True": True, "False": False}.get(row.get("large", ""))
        for column, name in GEOMETRY.items():
            record[name] = float(row[column])
        out.append(record)
    return out


def main(argv: list[str]) -> int:
    git_dir = Path(argv[1]) if len(argv) > 1 else DEFAULT_GIT
    listed = git(git_dir, "ls-tree", "-r", "--name-only", COMMIT, DATASET).decode().split("\n")
    records: list[dict] = []
    for op in OPS:
        for path in sorted(p for p in listed if p.startswith(f"{DATASET}/train/collect/{op}/")):
            records += rows_of(git_dir, path, "train")
    for name in TEST_FILES:
        records += rows_of(git_dir, f"{DATASET}/test/{name}.csv", "test")
    if any(r["latency_ms"] <= 0 for r in records):
        raise ValueError("a latency at or below 0 ms")
    frame = pl.DataFrame(records, infer_schema_length=None).with_columns(
        pl.col("op", "device", "neusight_split", "kernel", "kernels", "source").cast(pl.Categorical)
    )
    frame = frame.sort(
        "neusight_split", "op", "device", "b", "m", "n", "k", "h", "latency_ms", maintain_order=True
    )
    frame.write_parquet(
        OUT / "kernels.parquet", compression="zstd", compression_level=19, statistics=False
    )
    devices = []
    for path in sorted(p for p in listed if "/device_configs/" in p and p.endswith(".json")):
        devices.append(json.loads(git(git_dir, "show", f"{COMMIT}:{path}")) | {"source": path})
    pl.DataFrame(devices).unique("Device", keep="first", maintain_order=True).write_csv(
        OUT / "devices.csv"
    )
    counts = frame.group_by("neusight_split", "device").len().sort("neusight_split", "device")
    print(counts, file=sys.stderr)
    print(f"{frame.height} kernels -> {OUT / 'kernels.parquet'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
