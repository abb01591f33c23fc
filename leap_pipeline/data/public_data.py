"""Adapters from public measured throughput to the data contract's three sources.

``sia_sources`` reads the Sia (SOSP'23) traces folder and ``epoch_hardware_specs`` the Epoch AI
hardware table (through the explicit name mapping below). The data are read from a path given by
the user, never copied into the project. These sets have no days: every row gets one fixed day,
and static evaluation (``crossval``) splits by groups instead of by time.

Modelling choices, stated once: a Sia job is a set of data-parallel single-GPU replicas, so a
trainer is one GPU (``num_trainers`` = GPUs, ``batch_size`` = per-GPU batch, and the spec table's
``devices_per_host`` is 1); the hourly cost is a device price spread over three years of hours, a
proxy for ranking by cost, not a rental rate. The price is Lambda's own list price per GPU where
the data set gives one, else Epoch's release price, else the median of the others.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl

from leap_serving.launch.contract import schema
from leap_serving.launch.model_catalog import CATALOG
from leap_serving.launch.validation import ContractError, with_contract_columns

STATIC_DAY = dt.date(2023, 7, 28)  # the Sia traces' commit date: an upper bound on when they ran
AMORTIZATION_HOURS = 3 * 365 * 24

# cluster suffix -> (hardware type, Epoch name, network Gb/s from the Sia README or None)
SIA_CLUSTERS: dict[str, tuple[str, str, float | None]] = {
    "aws": ("T4", "NVIDIA Tesla T4", None),
    "azure": ("V100-32GB", "NVIDIA Tesla V100 SXM2 32 GB", None),
    "dgx": ("A100-40GB", "NVIDIA A100 SXM4 40 GB", 1600.0),
    "dgx-ext": ("A100-40GB", "NVIDIA A100 SXM4 40 GB", 1600.0),
    "quad": ("Quadro-RTX-6000", "NVIDIA Quadro RTX 6000", 200.0),
    "rtx": ("RTX-2080Ti", "NVIDIA GeForce RTX 2080 Ti 11GB", 50.0),
}
# scalability files that only re-encode the placements file (the Sia README): not read twice
_REPEATED_SCALABILITY = {"dgx-ext", "quad"}

# Sia's models as the catalog's entries (leap_serving/launch/model_catalog.py cites each size)
SIA_CATALOG: dict[str, str] = {
    "cifar10": "resnet18_cifar",
    "imagenet": "resnet50",
    "yolov3": "yolov3_voc",
    "bert": "bert_base_squad",
    "ncf": "ncf_ml1m",
}
# DeepSpeech2 is not in the catalog: a Sia sample is one utterance, and no public source gives
# CMU ARCTIC's frames per utterance. An approximate layer list, with its launch sizes.
SIA_APPROXIMATE: dict[str, tuple[dict, dict[str, int]]] = {
    "deepspeech2": (
        {
            "layers": [
                {"op": "conv_stack", "blocks": 1, "channels": 32, "image_size": 161},
                {"op": "transformer", "layers": 5, "d_model": 800, "heads": 1, "ffn_mult": 4},
                {"op": "mlp", "widths": [29]},
            ]
        },
        {"num_sparse_features": 0, "num_dense_features": 161, "hash_size": 0, "seq_len": 400},
    ),
}
SIA_MODELS = frozenset(SIA_CATALOG) | frozenset(SIA_APPROXIMATE)


def _workloads(catalog: dict[str, str], approximate: dict | None = None) -> dict:
    """model -> (model_definition JSON, launch sizes): ``{"catalog": name}`` with the entry's
    sizes, or an approximate layer list with its own."""
    found = {m: (_json({"catalog": c}), CATALOG[c].launch_sizes) for m, c in catalog.items()}
    return found | {m: (_json(d), sizes) for m, (d, sizes) in (approximate or {}).items()}


def _workload_columns(key: str, workloads: dict) -> dict[str, pl.Expr]:
    """``model_definition`` and the four size columns, looked up by the column ``key``."""
    columns = {
        "model_definition": pl.col(key).replace_strict(
            {m: d for m, (d, _) in workloads.items()}, return_dtype=pl.String
        )
    }
    for size in ("num_sparse_features", "num_dense_features", "hash_size", "seq_len"):
        columns[size] = pl.col(key).replace_strict(
            {m: sizes[size] for m, (_, sizes) in workloads.items()}, return_dtype=pl.Int64
        )
    return columns


def epoch_hardware_specs(
    path: Path,
    names: dict[str, tuple[str, float | None]],
    list_prices: dict[str, float] | None = None,
) -> pl.DataFrame:
    """The hardware spec table (contract schema) for ``names``: our type -> (Epoch name,
    network Gb/s or None for Epoch's typical internode figure). A type's price in
    ``list_prices`` (USD per device, from the data set itself) replaces Epoch's release price."""
    list_prices = list_prices or {}
    table = pl.read_csv(path, infer_schema=False)
    rows = []
    for hardware_type, (epoch_name, network_gbps) in names.items():
        found = table.filter(pl.col("Hardware name") == epoch_name)
        if found.height != 1:
            raise ContractError(f"Epoch table at {path}: no single row named {epoch_name!r}")
        r = {
            k: (float(v) if v not in (None, "") and k != "Hardware name" and _is_number(v) else v)
            for k, v in found.row(0, named=True).items()
        }
        tensor = r.get("Tensor-FP16/BF16 performance (FLOP/s)")
        half = r.get("FP16 (half precision) performance (FLOP/s)")
        internode = network_gbps * 1e9 if network_gbps else r.get("Internode bandwidth (bit/s)")
        price = list_prices.get(hardware_type, r.get("Release price (USD)"))
        rows.append(
            {
                "hardware_type": hardware_type,
                "vendor": str(r["Manufacturer"]).lower(),
                "peak_fp32_tflops": _scaled(r.get(_FP32), 1e12),
                "peak_bf16_tflops": _scaled(tensor if isinstance(tensor, float) else half, 1e12),
                "memory_gb": _scaled(r.get("Memory (bytes)"), 1e9),
                "memory_bandwidth_gbps": _scaled(r.get("Memory bandwidth (byte/s)"), 1e9),
                "l2_cache_mb": None,
                "compute_units": _scaled(r.get("Tensor cores"), 1.0),
                "clock_mhz": _scaled(r.get("Boost clock (MHz)"), 1.0),
                "intra_node_bandwidth_gbps": _scaled(r.get("Intranode bandwidth (byte/s)"), 1e9),
                "inter_node_bandwidth_gbps": _scaled(internode, 8e9),
                "process_node_nm": _scaled(r.get("Process size (nm)"), 1.0),
                "tdp_watts": _scaled(r.get("TDP (W)"), 1.0),
                "devices_per_host": 1.0,
                "hourly_cost_usd": _scaled(price, AMORTIZATION_HOURS),
                "premium": False,
                "available_from": dt.date.fromisoformat(str(r["Release date"])[:10])
                if r.get("Release date")
                else STATIC_DAY,
            }
        )
    frame = pl.DataFrame(rows, schema=schema("hardware_specs"), orient="row")
    missing_cost = frame.filter(pl.col("hourly_cost_usd").is_null())["hardware_type"].to_list()
    if missing_cost:  # no release price: the median of the others, said in the log by the caller
        frame = frame.with_columns(
            pl.col("hourly_cost_usd").fill_null(pl.col("hourly_cost_usd").median())
        )
    return frame.select(schema("hardware_specs").names())


_FP32 = "FP32 (single precision) performance (FLOP/s)"


def _is_number(value: str) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _scaled(value, divisor: float) -> float | None:
    return float(value) / divisor if isinstance(value, float) else None


def sia_sources(traces: Path, epoch_table: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(job_attempts, allocations, hardware_specs) from the Sia traces, one row per measurement."""
    traces = Path(traces)
    if not traces.is_dir():
        raise ContractError(f"Sia traces folder {traces} does not exist")
    frames = []
    for model_dir in sorted(p for p in traces.iterdir() if p.is_dir()):
        model = model_dir.name
        if model not in SIA_MODELS:
            raise ContractError(f"Sia traces: model folder {model!r} has no model definition")
        for cluster, (hardware_type, _, _) in SIA_CLUSTERS.items():
            for kind in ("placements", "scalability"):
                path = model_dir / f"{kind}-{cluster}.csv"
                if not path.is_file():
                    continue
                if kind == "scalability" and cluster in _REPEATED_SCALABILITY and model != "ncf":
                    continue
                if model == "ncf" and cluster == "dgx-ext":
                    continue  # byte-identical to ncf's dgx files
                frame = pl.read_csv(path)
                if kind == "placements":
                    digits = frame["placement"].cast(pl.String).str.split("")
                    gpus = digits.list.eval(pl.element().cast(pl.Int64, strict=False)).list.sum()
                    nodes = digits.list.len()
                else:
                    gpus, nodes = frame["num_replicas"], frame["num_nodes"]
                frames.append(
                    pl.DataFrame(
                        {
                            "model": model,
                            "cluster": cluster,
                            "kind": kind,
                            "hardware_type": hardware_type,
                            "num_gpus": gpus.cast(pl.Int64),
                            "num_nodes": nodes.cast(pl.Int64),
                            "local_bsz": frame["local_bsz"]
                            .cast(pl.Float64)
                            .round(0)
                            .cast(pl.Int64),
                            "step_time": frame["step_time"].cast(pl.Float64),
                        }
                    )
                )
    if not frames:
        raise ContractError(f"no Sia trace files under {traces}")
    rows = pl.concat(frames).with_row_index("n")
    mapping = {hw: (epoch, net) for hw, epoch, net in SIA_CLUSTERS.values()}
    specs = epoch_hardware_specs(epoch_table, mapping)
    types = specs["hardware_type"].to_list()
    launch = dt.datetime.combine(STATIC_DAY, dt.time(12))
    attempts = rows.select(
        attempt_id=pl.format("sia-{}-{}-{}-{}", "model", "cluster", "kind", "n"),
        # the family is the configuration, so its history is the same job on other hardware
        job_name=pl.format("{}.gpus{}.nodes{}.bs{}", "model", "num_gpus", "num_nodes", "local_bsz"),
        model_type="model",
        ds=pl.lit(STATIC_DAY),
        launch_ts=pl.lit(launch),
        hardware_type="hardware_type",
        candidate_hardware=pl.lit(types, dtype=pl.List(pl.String)),
        num_trainers="num_gpus",
        batch_size="local_bsz",
        **_workload_columns("model", _workloads(SIA_CATALOG, SIA_APPROXIMATE)),
        status=pl.lit("succeeded"),
        throughput=pl.col("num_gpus") * pl.col("local_bsz") / pl.col("step_time"),
    )
    contract = schema("job_attempts")
    attempts = with_contract_columns(attempts, "job_attempts").cast(dict(contract))
    allocations = rows.select(
        attempt_id=attempts["attempt_id"],
        num_hosts="num_nodes",
        devices_per_host=(pl.col("num_gpus") + pl.col("num_nodes") - 1) // pl.col("num_nodes"),
        cpu_cores=pl.lit(None, dtype=pl.Int64),
        host_memory_gb=pl.lit(None, dtype=pl.Float64),
        server_subtype="cluster",
    )
    return attempts, allocations, specs


def _json(definition: dict) -> str:
    import json

    return json.dumps(definition, separators=(",", ":"))


# Lambda system label (prefixes and GPU count removed) -> (hardware type, Epoch name). Labels not
# listed are an error: a mapping is a decision, not a guess.
LAMBDA_GPUS: dict[str, tuple[str, str]] = {
    "Quadro RTX 8000": ("Quadro-RTX-8000", "NVIDIA Quadro RTX 8000"),
    "V100 16GB": ("V100-16GB", "NVIDIA Tesla V100 SXM2 16 GB"),
    "RTX 3090": ("RTX-3090", "NVIDIA GeForce RTX 3090"),
    "A10": ("A10", "NVIDIA A10 PCIe"),
    "A100 40GB PCIe": ("A100-40GB-PCIe", "NVIDIA A100 PCIe"),
    "A100 80GB PCIe": ("A100-80GB-PCIe", "NVIDIA A100 PCIe"),  # Epoch lists one PCIe A100
    "A100 80GB SXM4": ("A100-80GB", "NVIDIA A100 SXM4 80 GB"),
    "RTX 6000 Ada": ("RTX6000-Ada", "NVIDIA RTX 6000 Ada Generation"),
    "RTX A6000": ("RTX-A6000", "NVIDIA RTX A6000"),
    "RTX 4090": ("RTX-4090", "NVIDIA GeForce RTX 4090"),
    "H100 80GB PCIe Gen5": ("H100-PCIe", "NVIDIA H100 PCIe"),
    "H100 80GB SXM5": ("H100-SXM", "NVIDIA H100 SXM5 80GB"),
}
# Lambda model column -> (catalog model, divisor). Each cell is in its model's own unit; dividing
# by the divisor gives samples of the catalog entry, whose FLOPs summarize counts (your-fleet.md):
# tokens/s of GNMT count source and target tokens, a sample is one of each; Transformer-XL's
# tokens/s become segments of its tgt_len (192, 256); WaveGlow's audio samples/s become its
# 8000-sample segments. Tacotron 2's items are mel frames, a sample is one frame.
LAMBDA_MODELS: dict[str, tuple[str, float]] = {
    "resnet50": ("resnet50", 1.0),
    "ssd": ("ssd300", 1.0),
    "maskrcnn": ("mask_rcnn", 1.0),
    "bert_base_squad": ("bert_base_squad", 1.0),
    "bert_large_squad": ("bert_large_squad", 1.0),
    "gnmt": ("gnmt", 2.0),
    "ncf": ("ncf", 1.0),
    "tacotron2": ("tacotron2", 1.0),
    "waveglow": ("waveglow", 8000.0),
    "transformerxlbase": ("transformer_xl_base", 192.0),
    "transformerxllarge": ("transformer_xl_large", 256.0),
}
_LAMBDA_PREFIX = r"^(?:LambdaCloud|DellTexas|Dell|SMC|1CC|RAIDZ1)\s+"
_LAMBDA_COUNT = r"^\d+x\s*"
LAMBDA_DAY = dt.date(2024, 7, 24)  # the v1 files' last change: an upper bound on the runs


def lambda_gpu(label: str) -> str:
    """The GPU of a Lambda system label: ``Dell 4x H100 80GB SXM5`` -> ``H100 80GB SXM5``."""
    import re

    return re.sub(_LAMBDA_COUNT, "", re.sub(_LAMBDA_PREFIX, "", label.strip())).strip()


def lambda_prices(rows: pl.DataFrame) -> dict[str, float]:
    """Lambda's list price per GPU of each type (``price`` is per system: per-GPU price times
    ``num_gpu``), the median over the systems that carry one."""
    per_gpu = (
        rows.with_columns(
            per_gpu=pl.col("price").cast(pl.Float64, strict=False) / pl.col("num_gpu")
        )
        .filter(pl.col("per_gpu") > 0)
        .group_by("hardware_type")
        .agg(pl.col("per_gpu").median())
    )
    return dict(zip(per_gpu["hardware_type"], per_gpu["per_gpu"], strict=True))


def lambda_sources(
    folder: Path, epoch_table: Path
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(job_attempts, allocations, hardware_specs) from the Lambda v1 throughput and batch-size
    tables (``pytorch-train-{throughput,bs}-{fp16,fp32}.csv``) of one snapshot folder.

    Each model column names a catalog model (``LAMBDA_MODELS``): ``model_definition`` is
    ``{"catalog": name}`` with the entry's sizes, and the throughput is in the entry's samples per
    second. GNMT's tokens/s is halved (a sample is one source and one target token),
    Transformer-XL's divided by its segment length (192 base, 256 large: segments/s) and
    WaveGlow's audio samples/s by 8000 (segments/s). The batch stays Lambda's: GNMT's counts
    sentences and Tacotron 2's utterances, not samples."""
    folder = Path(folder)
    frames = []
    for precision in ("fp16", "fp32"):
        paths = [folder / f"pytorch-train-{kind}-{precision}.csv" for kind in ("throughput", "bs")]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ContractError(f"Lambda folder {folder}: missing {missing}")
        throughput, batch = (pl.read_csv(p, infer_schema=False) for p in paths)
        models = [
            c for c in throughput.columns if c not in ("name_gpu", "num_gpu", "watt", "price")
        ]
        long = throughput.unpivot(
            index=["name_gpu", "num_gpu", "price"],
            on=models,
            variable_name="model",
            value_name="throughput",
        )
        sizes = batch.unpivot(
            index="name_gpu",
            on=[m for m in models if m in batch.columns],
            variable_name="model",
            value_name="global_batch",
        )
        frames.append(
            long.join(sizes, on=["name_gpu", "model"], how="left").with_columns(
                precision=pl.lit(precision)
            )
        )
    rows = (
        pl.concat(frames)
        .with_columns(
            throughput=pl.col("throughput").cast(pl.Float64, strict=False),
            num_gpu=pl.col("num_gpu").cast(pl.Float64).cast(pl.Int64),
            global_batch=pl.col("global_batch").cast(pl.Float64, strict=False),
            gpu=pl.col("name_gpu").map_elements(lambda_gpu, return_dtype=pl.String),
        )
        .filter(pl.col("throughput") > 0)
    )  # 0 or empty: not run, or out of memory
    unknown = sorted(set(rows["gpu"]) - set(LAMBDA_GPUS))
    if unknown:
        raise ContractError(f"Lambda GPU label(s) {unknown} have no entry in LAMBDA_GPUS")
    unknown = sorted(set(rows["model"]) - set(LAMBDA_MODELS))
    if unknown:
        raise ContractError(f"Lambda model column(s) {unknown} have no entry in LAMBDA_MODELS")
    rows = rows.with_row_index("n").with_columns(
        hardware_type=pl.col("gpu").replace_strict({k: v[0] for k, v in LAMBDA_GPUS.items()}),
        per_gpu_batch=(pl.col("global_batch") / pl.col("num_gpu")).round(0).cast(pl.Int64),
    )
    specs = epoch_hardware_specs(
        epoch_table, {hw: (epoch, None) for hw, epoch in LAMBDA_GPUS.values()}, lambda_prices(rows)
    )
    types = sorted(set(rows["hardware_type"]))
    contract = schema("job_attempts")
    attempts = rows.select(
        attempt_id=pl.format("lambda-{}-{}-{}", "precision", "model", "n"),
        # a family is (model, precision, GPUs, batch): its history is the same job elsewhere
        job_name=pl.format("{}.{}.gpus{}.bs{}", "model", "precision", "num_gpu", "per_gpu_batch"),
        model_type=pl.format("{}.{}", "model", "precision"),
        ds=pl.lit(LAMBDA_DAY),
        launch_ts=pl.lit(dt.datetime.combine(LAMBDA_DAY, dt.time(12))),
        hardware_type="hardware_type",
        candidate_hardware=pl.lit(types, dtype=pl.List(pl.String)),
        num_trainers="num_gpu",
        batch_size=pl.col("per_gpu_batch").fill_null(1),  # batch unknown: one sample per GPU
        precision="precision",
        **_workload_columns("model", _workloads({m: c for m, (c, _) in LAMBDA_MODELS.items()})),
        status=pl.lit("succeeded"),
        throughput=pl.col("throughput")
        / pl.col("model").replace_strict({m: d for m, (_, d) in LAMBDA_MODELS.items()}),
    )
    attempts = with_contract_columns(attempts, "job_attempts").cast(dict(contract))
    allocations = attempts.select(
        "attempt_id",
        num_hosts=pl.lit(1, dtype=pl.Int64),
        devices_per_host="num_trainers",
        cpu_cores=pl.lit(None, dtype=pl.Int64),
        host_memory_gb=pl.lit(None, dtype=pl.Float64),
        server_subtype=pl.lit(None, dtype=pl.String),
    )
    return attempts, allocations, specs


PUBLIC_SOURCES = {"sia": sia_sources, "lambda": lambda_sources}


def public_sources(
    source: str, path: Path, epoch_table: Path
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(job_attempts, allocations, hardware_specs) of the public data set named ``source``."""
    try:
        adapter = PUBLIC_SOURCES[source]
    except KeyError:
        raise ValueError(f"source={source!r} is not one of {sorted(PUBLIC_SOURCES)}") from None
    return adapter(Path(path), Path(epoch_table))
