"""Architecture summaries derived from a model definition (the paper's architecture features).

A model definition is the JSON layer list a launcher sees in the job config. The summary is pure
arithmetic over it and the launch config, so serving computes exactly what training computed. The
simulator derives its physics from the same numbers, as a real fleet's throughput derives from the
real model.

Layer ops (each a JSON object with an ``op`` key):
- ``embedding_bag``: ``dim`` (embedding width), ``pooling`` (ids looked up per feature);
  one table per sparse feature, rows from the config's ``hash_size``.
- ``mlp``: ``widths`` (output widths); the input width is whatever the previous layer produced.
- ``interaction``: ``kind`` ``dot`` (pairwise dot products) or ``cat`` (concatenation).
- ``transformer``: ``layers``, ``d_model``, ``heads``, ``ffn_mult`` (or ``d_ff``, the FFN width);
  over ``seq_len`` tokens. Optional: ``d_attn`` (attention inner width, default ``d_model``),
  ``cross_attention`` (a decoder layer's second attention block), ``num_experts`` (the FFN
  replicated with top-1 routing: parameters times experts, FLOPs unchanged).
- ``lstm``: ``layers``, ``hidden``; optional ``bidirectional`` and ``input`` (the first layer's
  input width, default the previous layer's); a step per token, in order.
- ``conv_net``: a CNN's declared costs, where its layer list is long: ``macs``
  (multiply-accumulates per sample: one MAC is two FLOPs), ``params``; optional ``activations``
  (elements the layers write per sample) and ``image_size``.
- ``experts``: ``num_experts``, ``widths``, ``tasks`` (multi-gate mixture of experts).
- ``conv_stack``: ``blocks``, ``channels``, ``image_size`` (a residual CNN).
- ``lm_head``: ``vocab`` (output projection over the vocabulary, per token).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from leap_serving.launch.model_catalog import resolve_definition

ARCHITECTURE_SUMMARY_KEYS: tuple[str, ...] = (
    "n_layers_total",
    "n_embedding_tables",
    "n_mlp_layers",
    "n_transformer_layers",
    "n_expert_layers",
    "n_conv_blocks",
    "embedding_dim",
    "embedding_pooling",
    "embedding_params",
    "dense_params",
    "max_width",
    "mean_width",
    "d_model",
    "attention_heads",
    "num_experts",
    "num_tasks",
    "interaction_dot",
    "image_size",
    "conv_channels",
    "vocab_size",
    "flops_per_sample",
    "attention_flops_per_sample",
    "mlp_flops_per_sample",
    "conv_flops_per_sample",
    "embedding_bytes_per_sample",
    "activation_bytes_per_sample",
    "arithmetic_intensity",
    "kernels_per_step",
    "n_recurrent_layers",
    "tokens_per_sample",
    "attention_bytes_per_sample",
    "tp_exchange_bytes_per_sample",
)


class ModelDefinitionError(ValueError):
    """The model definition cannot be summarized; the message names the layer and field."""


def parse_definition(definition: str | Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the layer list of a definition given as JSON text or an already parsed mapping."""
    if isinstance(definition, str):
        try:
            definition = json.loads(definition)
        except (ValueError, RecursionError) as exc:  # not JSON, too deep, an integer too long
            raise ModelDefinitionError(f"model_definition is not valid JSON: {exc}") from exc
    if isinstance(definition, Mapping) and "catalog" in definition:  # a model_catalog name
        try:
            definition = resolve_definition(definition)
        except ValueError as exc:
            raise ModelDefinitionError(str(exc)) from exc
    if not isinstance(definition, Mapping) or not isinstance(definition.get("layers"), list):
        raise ModelDefinitionError("model_definition must be an object with a 'layers' list")
    return list(definition["layers"])


def shown_value(value: Any, limit: int = 40) -> str:
    """A definition's value as an error shows it: short (a width may be a 4,000-digit number)."""
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digit limit for conversion
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(layer: Mapping[str, Any], field: str, index: int) -> float:
    value = layer.get(field)
    try:  # an integer past float's range is no size either
        number = None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError, OverflowError):
        number = None
    if number is None or not isinstance(value, (int, float)) or not number >= 0:
        raise ModelDefinitionError(
            f"model_definition layer {index} ({layer.get('op')}): {field}={shown_value(value)} "
            "is not a non-negative number"
        )
    return number


def _flag(layer: Mapping[str, Any], field: str, index: int) -> bool:
    value = layer.get(field, False)
    if not isinstance(value, bool):
        raise ModelDefinitionError(
            f"model_definition layer {index} ({layer.get('op')}): {field}={shown_value(value)} "
            "is not true or false"
        )
    return value


def _widths(layer: Mapping[str, Any], index: int) -> list[float]:
    widths = layer.get("widths")
    if not isinstance(widths, list) or not widths:
        raise ModelDefinitionError(
            f"model_definition layer {index} ({layer.get('op')}): widths={widths!r} "
            "is not a non-empty list"
        )
    return [_number({"w": w, "op": layer.get("op")}, "w", index) for w in widths]


def summarize(
    definition: str | Mapping[str, Any],
    *,
    num_sparse_features: int,
    num_dense_features: int,
    hash_size: int,
    seq_len: int,
    bytes_per_value: int = 2,
) -> dict[str, float]:
    """Per-sample size, work and memory traffic of a model under one launch config.

    FLOPs count one forward pass (training costs about three times that); bytes count what one
    sample moves through device memory. ``bytes_per_value`` is 2 for bf16/fp16 and 4 for fp32.
    """
    layers = parse_definition(definition)
    s = dict.fromkeys(ARCHITECTURE_SUMMARY_KEYS, 0.0)
    tokens = max(float(seq_len), 1.0)
    width = float(num_dense_features)  # width of the dense stream entering the next layer
    n_sparse = float(num_sparse_features)
    widths_seen: list[float] = []
    for i, layer in enumerate(layers):
        op = layer.get("op") if isinstance(layer, Mapping) else None
        if op == "embedding_bag":
            dim, pooling = _number(layer, "dim", i), _number(layer, "pooling", i)
            s["n_embedding_tables"] += n_sparse
            s["embedding_dim"] = dim
            s["embedding_pooling"] = pooling
            s["embedding_params"] += float(hash_size) * dim
            s["embedding_bytes_per_sample"] += n_sparse * pooling * dim * bytes_per_value
            s["activation_bytes_per_sample"] += n_sparse * dim * bytes_per_value
            s["kernels_per_step"] += 2 + n_sparse / 64.0
            width = width + n_sparse * dim if width else n_sparse * dim
        elif op == "mlp":
            for w in _widths(layer, i):
                s["dense_params"] += width * w
                s["mlp_flops_per_sample"] += 2.0 * width * w * tokens
                s["activation_bytes_per_sample"] += w * tokens * bytes_per_value
                s["n_mlp_layers"] += 1
                s["kernels_per_step"] += 3
                widths_seen.append(w)
                width = w
        elif op == "interaction":
            kind = layer.get("kind")
            if kind not in ("dot", "cat"):
                raise ModelDefinitionError(
                    f"model_definition layer {i} (interaction): kind={kind!r} is not dot or cat"
                )
            if kind == "dot" and s["embedding_dim"]:
                n_vec = n_sparse + 1.0
                s["interaction_dot"] = 1.0
                s["mlp_flops_per_sample"] += n_vec * n_vec * s["embedding_dim"]
                width = n_vec * (n_vec - 1) / 2.0 + s["embedding_dim"]
            s["kernels_per_step"] += 2
        elif op == "transformer":
            n, d = _number(layer, "layers", i), _number(layer, "d_model", i)
            heads = _number(layer, "heads", i)
            d_ff = (
                _number(layer, "d_ff", i) if "d_ff" in layer else _number(layer, "ffn_mult", i) * d
            )
            d_attn = _number(layer, "d_attn", i) if "d_attn" in layer else d
            experts = _number(layer, "num_experts", i) if "num_experts" in layer else 1.0
            blocks = 2.0 if _flag(layer, "cross_attention", i) else 1.0
            attention_params = blocks * 4.0 * d * d_attn  # Q, K, V and output projections
            ffn_params = 2.0 * d * d_ff
            s["n_transformer_layers"] += n
            s["d_model"], s["attention_heads"] = d, heads
            s["dense_params"] += n * (attention_params + experts * ffn_params)
            if experts > 1:
                s["num_experts"] = experts
            # a token runs through one expert: the FLOPs of one FFN
            s["mlp_flops_per_sample"] += 2.0 * n * (attention_params + ffn_params) * tokens
            s["attention_flops_per_sample"] += blocks * 4.0 * n * tokens * tokens * d_attn
            s["activation_bytes_per_sample"] += n * tokens * (10.0 * d + d_ff) * bytes_per_value
            # scores written, softmaxed and read per head: eager attention's memory traffic
            s["attention_bytes_per_sample"] += (
                blocks * 4.0 * n * heads * tokens * tokens * bytes_per_value
            )
            # tensor parallelism all-reduces each attention block's and the FFN's output
            s["tp_exchange_bytes_per_sample"] += (blocks + 1.0) * n * tokens * d * bytes_per_value
            s["kernels_per_step"] += 12 * n * blocks
            widths_seen.append(d)
            width = d
        elif op == "lstm":
            n, hidden = _number(layer, "layers", i), _number(layer, "hidden", i)
            directions = 2.0 if _flag(layer, "bidirectional", i) else 1.0
            w_in = _number(layer, "input", i) if "input" in layer else (width or hidden)
            first = 4.0 * hidden * (w_in + hidden + 1.0)
            rest = 4.0 * hidden * (directions * hidden + hidden + 1.0)
            params = directions * (first + max(n - 1.0, 0.0) * rest)
            s["n_recurrent_layers"] += n
            s["dense_params"] += params
            s["mlp_flops_per_sample"] += 2.0 * params * tokens
            s["activation_bytes_per_sample"] += (
                n * directions * 6.0 * hidden * tokens * (bytes_per_value)
            )
            s["kernels_per_step"] += 4 * n * tokens * directions  # one step per token
            widths_seen.append(hidden * directions)
            width = hidden * directions
        elif op == "conv_net":
            macs, params = _number(layer, "macs", i), _number(layer, "params", i)
            written = _number(layer, "activations", i) if "activations" in layer else 0.0
            if "image_size" in layer:
                s["image_size"] = _number(layer, "image_size", i)
            s["dense_params"] += params
            s["conv_flops_per_sample"] += 2.0 * macs
            # unknown activations: about one element written per 200 MACs (ResNet-50's ratio)
            written = written or macs / 200.0
            s["activation_bytes_per_sample"] += 4.0 * written * bytes_per_value
            s["n_conv_blocks"] += 1
            s["kernels_per_step"] += 3.0 * max(1.0, params / 5e5)
        elif op == "experts":
            e, tasks = _number(layer, "num_experts", i), _number(layer, "tasks", i)
            widths = _widths(layer, i)
            w_in = width
            for w in widths:
                s["dense_params"] += e * w_in * w
                s["mlp_flops_per_sample"] += 2.0 * e * w_in * w * tokens
                s["activation_bytes_per_sample"] += e * w * tokens * bytes_per_value
                s["n_expert_layers"] += 1
                s["kernels_per_step"] += 3 * e
                widths_seen.append(w)
                w_in = w
            s["dense_params"] += tasks * e * width  # one gate per task
            s["num_experts"], s["num_tasks"] = e, tasks
            width = widths[-1]
        elif op == "conv_stack":
            blocks = _number(layer, "blocks", i)
            channels, size = _number(layer, "channels", i), _number(layer, "image_size", i)
            # a residual block: two 3x3 convolutions at the block's resolution
            pixels = (size / 4.0) ** 2
            per_block_params = 2.0 * 9.0 * channels * channels
            s["n_conv_blocks"] += blocks
            s["conv_channels"], s["image_size"] = channels, size
            s["dense_params"] += blocks * per_block_params
            s["conv_flops_per_sample"] += 2.0 * blocks * per_block_params * pixels
            s["activation_bytes_per_sample"] += blocks * 4.0 * pixels * channels * bytes_per_value
            s["kernels_per_step"] += 6 * blocks
            width = channels
        elif op == "lm_head":
            vocab = _number(layer, "vocab", i)
            s["vocab_size"] = vocab
            s["dense_params"] += vocab * width
            s["mlp_flops_per_sample"] += 2.0 * vocab * width * tokens
            s["activation_bytes_per_sample"] += vocab * tokens * bytes_per_value
            s["kernels_per_step"] += 3
        else:
            raise ModelDefinitionError(f"model_definition layer {i}: op={op!r} is unknown")
    s["n_layers_total"] = float(len(layers))
    s["tokens_per_sample"] = tokens if s["n_transformer_layers"] or s["n_recurrent_layers"] else 1.0
    s["flops_per_sample"] = (
        s["mlp_flops_per_sample"] + s["attention_flops_per_sample"] + s["conv_flops_per_sample"]
    )
    if widths_seen:
        s["max_width"] = max(widths_seen)
        s["mean_width"] = sum(widths_seen) / len(widths_seen)
    traffic = s["activation_bytes_per_sample"] + s["embedding_bytes_per_sample"]
    s["arithmetic_intensity"] = s["flops_per_sample"] / traffic if traffic else 0.0
    return s
