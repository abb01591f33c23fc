"""How much device memory a launch needs on each device it occupies: the memory-fit estimate.

A launcher knows at submission time everything this reads: the model definition, the sizes, the
precision, the optimizer, the batch, the parallel degrees and the embedding sharding. Nothing is
learned: the estimate is arithmetic over the launch, so a ranking can drop a type whose device
memory cannot hold the job before the scheduler finds out by an out-of-memory failure.

The formula, per device, in bytes (``v``: bytes per value, 2 for bf16 / fp16 and 4 for fp32):

- **Dense model states**: ``dense_params x (v weights + v gradients + 4 fp32 master copy when
  v = 2 + optimizer state)``, the optimizer state in fp32: 8 bytes per parameter for Adam, AdamW
  and LAMB (two moments), 4 for SGD with momentum, Adagrad and RMSprop (one), none for one this
  table does not know. Mixed-precision Adam is so 16 bytes per parameter, the figure of ZeRO
  (Rajbhandari et al. 2020, section 3.1), and fp32 Adam is 16 too. Split over
  ``tensor_parallel x pipeline_parallel`` (at most the devices the job occupies); replicated
  across data-parallel replicas (the contract has no field for ZeRO or FSDP sharding).
- **Embedding tables** (``hash_size x dim`` parameters): ``v`` weights plus the optimizer state
  per parameter; no dense gradient (a step updates only the rows it looked up) and no master
  copy. Sharded over the devices the job occupies, unless ``embedding_sharding`` is ``data``
  (each device holds every table).
- **Activations**: bytes per sample kept for the backward pass, times the samples each device
  holds: ``batch_size`` (per trainer) over the devices the job occupies per host. Each sample's
  activations spread evenly over the tensor- and pipeline-parallel devices, which is why the
  degrees cancel out. Per layer op, per sample, ``s`` tokens (``seq_len``, at least 1):
  a transformer layer of width ``h``, ``a`` heads and FFN multiple ``m`` keeps
  ``(18 + 4m) s h + 5 a s^2`` bytes at 2-byte values: Korthikanti et al. 2022's
  ``34 s b h + 5 a s^2 b`` per layer for ``m = 4``, scaled by ``v / 2``. An MLP or expert layer
  of width ``w`` keeps ``2 w s v`` (before and after its nonlinearity), the embedding lookups
  ``tables x dim x v``, a residual convolution block ``6 x pixels x channels x v``, and the
  output layer ``4 x vocab x s`` (fp32 logits for the loss). With ``activation_checkpointing``
  only each layer's input is kept (Korthikanti's full recomputation, ``2 s b h`` per transformer
  layer): ``s h v``, ``w s v``, ``pixels x channels x v``.

The estimate leans low wherever the launch leaves something open, so a type is dropped only
when it clearly cannot hold the job: an unknown or missing precision counts 2 bytes per value,
an unknown optimizer no state, a missing sharding as sharded; it leaves out the framework's own
memory, allocator fragmentation, the extra microbatches a 1F1B pipeline's first stage holds and
the activations tensor parallelism replicates without sequence parallelism. A launch without a
usable ``model_definition`` has no estimate (NaN).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from .architecture import ModelDefinitionError, parse_definition, summarize
from .contract import job_devices

BYTES_PER_VALUE: dict[str, float] = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0}
LEAST_BYTES_PER_VALUE = 2.0  # an unknown or missing precision: the estimate leans low
# fp32 optimizer state per parameter (bytes): moments the optimizer keeps beside the weights
OPTIMIZER_STATE_BYTES: dict[str, float] = {
    "adam": 8.0,
    "adamw": 8.0,
    "lamb": 8.0,
    "lion": 4.0,
    "sgd": 4.0,
    "momentum": 4.0,
    "adagrad": 4.0,
    "rmsprop": 4.0,
}
MASTER_COPY_BYTES = 4.0  # the fp32 weights mixed precision keeps beside the 2-byte ones
REPLICATED_SHARDING = "data"  # each device holds every embedding table


class LaunchMemory(NamedTuple):
    """One launch's memory before it is spread over a type's devices (bytes)."""

    dense_states: float  # dense weights, gradients, master copy and optimizer state
    embedding_states: float  # embedding tables' weights and optimizer state
    activations_per_sample: float  # kept for the backward pass, one sample, whole model


def bytes_per_device(launch: Mapping[str, Any], devices_per_host: ArrayLike) -> np.ndarray:
    """The device memory (bytes) the launch needs on each device it occupies, for each hardware
    type whose host holds ``devices_per_host`` (the spec table's column; an array gives one
    estimate per type). The formula is the module's; NaN when the launch has no usable
    ``model_definition``. ``launch`` holds contract-typed fields (``num_trainers`` and
    ``batch_size`` required)."""
    need = launch_memory(launch)
    host = np.asarray(devices_per_host, dtype=np.float64)
    trainers = float(launch["num_trainers"])
    devices = job_devices(trainers, launch.get("requested_devices_per_host"), host)
    model_split = _degree(launch.get("tensor_parallel")) * _degree(launch.get("pipeline_parallel"))
    shards = devices if launch.get("embedding_sharding") != REPLICATED_SHARDING else 1.0
    samples_per_device = float(launch["batch_size"]) * trainers / devices
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return (
            need.dense_states / np.minimum(model_split, devices)
            + need.embedding_states / shards
            + need.activations_per_sample * samples_per_device
        )


def launch_memory(launch: Mapping[str, Any]) -> LaunchMemory:
    """The launch's model states and activations per sample, before any spreading (cached: a
    fleet's launches repeat a few definitions and configurations)."""
    return _launch_memory(
        launch.get("model_definition"),
        launch.get("num_sparse_features") or 0,
        launch.get("num_dense_features") or 0,
        launch.get("hash_size") or 0,
        launch.get("seq_len") or 0,
        launch.get("precision"),
        launch.get("optimizer"),
        bool(launch.get("activation_checkpointing")),
    )


def _degree(value: Any) -> float:
    return float(value) if value else 1.0  # missing or 0: no split


@functools.lru_cache(maxsize=4096)
def _launch_memory(
    definition: str | None,
    num_sparse: int,
    num_dense: int,
    hash_size: int,
    seq_len: int,
    precision: str | None,
    optimizer: str | None,
    checkpointing: bool,
) -> LaunchMemory:
    try:
        summary = summarize(
            definition,
            num_sparse_features=num_sparse,
            num_dense_features=num_dense,
            hash_size=hash_size,
            seq_len=seq_len,
        )
        layers = parse_definition(definition)
    except (ModelDefinitionError, TypeError):
        return LaunchMemory(math.nan, math.nan, math.nan)
    v = BYTES_PER_VALUE.get(precision or "", LEAST_BYTES_PER_VALUE)
    state = OPTIMIZER_STATE_BYTES.get((optimizer or "").lower(), 0.0)
    master = MASTER_COPY_BYTES if v < 4.0 else 0.0
    return LaunchMemory(
        dense_states=summary["dense_params"] * (2.0 * v + master + state),
        embedding_states=summary["embedding_params"] * (v + state),
        activations_per_sample=sum(
            _layer_activations(layer, v, max(float(seq_len), 1.0), float(num_sparse), checkpointing)
            for layer in layers
        ),
    )


def _layer_activations(
    layer: Mapping[str, Any], v: float, s: float, tables: float, checkpointing: bool
) -> float:
    """Bytes one layer keeps per sample for the backward pass (the module's formula); the layer
    was checked by ``summarize``."""
    op = layer["op"]
    if op == "transformer":
        n, h = float(layer["layers"]), float(layer["d_model"])
        if checkpointing:
            return n * s * h * v
        a = float(layer["heads"])
        m = float(layer["d_ff"]) / h if "d_ff" in layer and h else float(layer["ffn_mult"])
        return n * ((18.0 + 4.0 * m) * s * h + 5.0 * a * s * s) * v / 2.0
    if op in ("mlp", "experts"):
        experts = float(layer.get("num_experts", 1.0)) if op == "experts" else 1.0
        kept = 1.0 if checkpointing else 2.0
        return experts * sum(kept * float(w) * s * v for w in layer["widths"])
    if op == "embedding_bag":
        return tables * float(layer["dim"]) * v
    if op == "conv_stack":
        pixels = (float(layer["image_size"]) / 4.0) ** 2
        kept = 1.0 if checkpointing else 6.0
        return float(layer["blocks"]) * kept * pixels * float(layer["channels"]) * v
    if op == "lm_head":
        return 4.0 * float(layer["vocab"]) * s
    if op == "lstm":  # four gates and the cell per token, layer and direction
        directions = 2.0 if layer.get("bidirectional") else 1.0
        return float(layer["layers"]) * directions * 6.0 * float(layer["hidden"]) * s * v
    if op == "conv_net":  # the elements its layers write, or about one per 200 MACs
        written = float(layer.get("activations") or float(layer["macs"]) / 200.0)
        return (1.0 if checkpointing else 2.0) * written * v
    return 0.0  # interaction: a few values per sample
