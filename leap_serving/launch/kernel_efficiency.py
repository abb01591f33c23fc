"""A GPU's efficiency per operator, learned from kernel measurements and bounded by the roofline.

Job-level efficiency against a spec-sheet roofline varies about 5x by model and type, and any
prior fitted to it is fitted on the rows it is then scored on. NeuSight (ASPLOS'25) learns it
one level down instead: how close each operator comes to its roofline on a GPU, from the
operator's shape and the GPU's specs, on thousands of measured kernels; job-level rows are left
for evaluation. This module is that level: pure functions from an operator (a matrix multiply,
a layer norm or softmax, an element-wise op) and the ``HARDWARE_SPEC_COLUMNS`` of its GPU to

- its work: FLOPs and bytes moved (fp32, as the public measurements are);
- its roofline time: the slower of its FLOPs at the peak and its bytes at the memory bandwidth;
- features a GPU would have before it ever ran the operator: what bounds it (arithmetic
  intensity over the ridge point), how its output tiles fill the compute units in waves, how
  its bytes compare with the L2 cache, and the specs themselves; never the kernel PyTorch
  happened to launch, which a type not yet bought does not have;

and ``KernelEfficiency``, a gradient-boosted model of ln(roofline time / measured time) whose
predictions are capped at 0: an operator never runs faster than its roofline. A latency is the
roofline time over the efficiency.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from leap_serving.launch.cost_model import TILE
from leap_serving.launch.features import FEATURE_COLUMNS

# operator name -> its class: how its work is counted
MATMUL_OPS = ("bmm", "linear")
ROW_OPS = ("ln", "softmax")  # a pass over each row of H values
BINARY_OPS = ("add", "mul", "div", "pow")  # two inputs of B x H
UNARY_OPS = ("addu", "mulu", "divu", "powu", "relu", "gelu", "tanh")  # one input
OPS = (*MATMUL_OPS, *ROW_OPS, *BINARY_OPS, *UNARY_OPS)
# arithmetic per output value of the non-matmul ops (NeuSight's own counts)
FLOPS_PER_VALUE = {"ln": 6.0, "softmax": 5.0} | dict.fromkeys((*BINARY_OPS, *UNARY_OPS), 1.0)
BYTES_PER_VALUE = 4.0  # fp32
# the specs an operator's efficiency is learned from (a subset of HARDWARE_SPEC_COLUMNS)
KERNEL_SPEC_COLUMNS = (
    "peak_fp32_tflops",
    "memory_bandwidth_gbps",
    "compute_units",
    "clock_mhz",
    "l2_cache_mb",
)
# output tiles (rows x columns) a GEMM library picks among; which one a shape gets is the
# library's choice, so the model sees how each would fill the compute units
TILES = ((64, 64), (128, 64), (128, 128), (256, 128))
KERNEL_FEATURES = (
    "op_code",
    "is_matmul",
    "log_flops",
    "log_bytes",
    "log_roofline_s",
    "log_intensity_over_ridge",
    *(f"wave_efficiency_{rows}x{columns}" for rows, columns in TILES),
    "log_tiles_per_unit",
    "log_rows",
    "log_columns",
    "log_reduction",
    "log_values_per_unit",
    "log_bytes_over_l2",
    *(f"log_{c}" for c in KERNEL_SPEC_COLUMNS),
)


def operator_work(ops: pl.DataFrame) -> pl.DataFrame:
    """FLOPs and bytes of each operator. ``ops`` has ``op`` and its shape: ``b``, ``m``, ``n``,
    ``k`` for a matmul (``bmm``: (b, m, n) x (b, n, k); ``linear``: (b, m, n) by an n x k
    weight), ``b`` rows of ``h`` values otherwise. Unknown ops are a ``ValueError`` naming them."""
    unknown = sorted(set(ops["op"].cast(pl.String)) - set(OPS))
    if unknown:
        raise ValueError(f"op: {unknown} are not operators this model knows ({', '.join(OPS)})")
    b, m, n, k, h = (pl.col(c).cast(pl.Float64) for c in ("b", "m", "n", "k", "h"))
    op = pl.col("op").cast(pl.String)
    values = b * h
    inputs = pl.when(op.is_in(BINARY_OPS)).then(2.0).otherwise(1.0)
    matmul_bytes = (
        pl.when(op == "bmm")
        .then(b * (m * n + n * k + m * k))
        .otherwise(b * m * n + n * k + k + b * m * k)  # linear: its weight and bias once
    ) * BYTES_PER_VALUE
    return ops.with_columns(
        flops=pl.when(op.is_in(MATMUL_OPS))
        .then(2.0 * b * m * n * k)
        .otherwise(values * op.replace_strict(FLOPS_PER_VALUE, default=1.0)),
        bytes=pl.when(op.is_in(MATMUL_OPS))
        .then(matmul_bytes)
        .otherwise(values * (inputs + 1.0) * BYTES_PER_VALUE),
    )


def kernel_features(ops: pl.DataFrame, specs: pl.DataFrame) -> pl.DataFrame:
    """``KERNEL_FEATURES`` and ``roofline_s`` per operator of ``ops`` (``operator_work``'s
    input and a ``hardware_type``) on its type in ``specs`` (``KERNEL_SPEC_COLUMNS``). A type
    missing from ``specs`` is a ``ValueError`` naming it."""
    missing = sorted(set(ops["hardware_type"]) - set(specs["hardware_type"]))
    if missing:
        raise ValueError(f"hardware_type: {missing} not in the spec table")
    is_matmul = pl.col("op").cast(pl.String).is_in(MATMUL_OPS)
    frame = operator_work(ops).join(
        specs.select("hardware_type", *(pl.col(c).cast(pl.Float64) for c in KERNEL_SPEC_COLUMNS)),
        on="hardware_type",
        how="left",
        maintain_order="left",
    )
    op = pl.col("op").cast(pl.String)
    peak = pl.col("peak_fp32_tflops") * 1e12
    bandwidth = pl.col("memory_bandwidth_gbps") * 1e9
    units = pl.col("compute_units")
    b, m, k = (pl.col(c).cast(pl.Float64) for c in ("b", "m", "k"))

    def tiles(rows: float, columns: float) -> pl.Expr:
        """Output tiles of ``rows`` x ``columns``: per matrix of a batched multiply, over all
        the batch's rows of a linear layer (its weight is shared)."""
        return (
            pl.when(op == "bmm")
            .then(b * (m / rows).ceil() * (k / columns).ceil())
            .otherwise((b * m / rows).ceil() * (k / columns).ceil())
        )

    def wave_fill(count: pl.Expr) -> pl.Expr:
        return pl.when(is_matmul).then(count / ((count / units).ceil() * units)).otherwise(None)

    roofline = pl.max_horizontal(pl.col("flops") / peak, pl.col("bytes") / bandwidth)
    frame = frame.with_columns(
        roofline_s=roofline,
        op_code=op.replace_strict({name: i for i, name in enumerate(OPS)}, return_dtype=pl.Int64),
        is_matmul=is_matmul.cast(pl.Float64),
        log_flops=pl.col("flops").log(),
        log_bytes=pl.col("bytes").log(),
        log_roofline_s=roofline.log(),
        log_intensity_over_ridge=(pl.col("flops") / pl.col("bytes") / (peak / bandwidth)).log(),
        **{f"wave_efficiency_{r}x{c}": wave_fill(tiles(r, c)) for r, c in TILES},
        log_tiles_per_unit=pl.when(is_matmul).then((tiles(TILE, TILE) / units).log()),
        log_rows=pl.when(op == "bmm").then(m.log()).otherwise((b * m).log()),
        log_columns=k.log(),
        log_reduction=pl.when(is_matmul)
        .then(pl.col("n").cast(pl.Float64).log())
        .otherwise(pl.col("h").cast(pl.Float64).log()),
        log_values_per_unit=pl.when(is_matmul)
        .then((b * m * k / units).log())
        .otherwise((pl.col("b") * pl.col("h") / units).log()),
        log_bytes_over_l2=(pl.col("bytes") / (pl.col("l2_cache_mb") * 1e6)).log(),
        **{f"log_{c}": pl.col(c).log() for c in KERNEL_SPEC_COLUMNS},
    )
    return frame


@dataclass
class KernelEfficiency:
    """ln(roofline time / measured time) of an operator on a GPU, learned by gradient-boosted
    trees over ``KERNEL_FEATURES``; a prediction is capped at 0 (at most the roofline)."""

    n_estimators: int = 400
    learning_rate: float = 0.05
    num_leaves: int = 63
    seed: int = 0
    threads: int = 0  # LightGBM's default: every core
    booster: object | None = None

    def fit(self, ops: pl.DataFrame, specs: pl.DataFrame) -> KernelEfficiency:
        """Fit on measured operators: ``ops`` with a ``latency_ms`` per row."""
        import lightgbm as lgb

        frame = kernel_features(ops, specs)
        target = (frame["roofline_s"] / (frame["latency_ms"].cast(pl.Float64) / 1e3)).log()
        params = {
            "objective": "regression",
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": 20,
            "feature_fraction": 0.9,
            "seed": self.seed,
            "verbose": -1,
            "num_threads": self.threads,
        }
        data = lgb.Dataset(
            _matrix(frame),
            target.to_numpy(),
            feature_name=list(KERNEL_FEATURES),
            categorical_feature=["op_code"],
        )
        self.booster = lgb.train(params, data, num_boost_round=self.n_estimators)
        return self

    def log_efficiency(self, ops: pl.DataFrame, specs: pl.DataFrame) -> np.ndarray:
        """ln(efficiency) of each operator, at most 0."""
        return self._log_efficiency(kernel_features(ops, specs))

    def latency_ms(self, ops: pl.DataFrame, specs: pl.DataFrame) -> np.ndarray:
        """Each operator's predicted latency: its roofline time over its efficiency."""
        frame = kernel_features(ops, specs)
        return frame["roofline_s"].to_numpy() / np.exp(self._log_efficiency(frame)) * 1e3

    def _log_efficiency(self, frame: pl.DataFrame) -> np.ndarray:
        if self.booster is None:
            raise RuntimeError("KernelEfficiency is not fitted: call fit first")
        return np.minimum(np.asarray(self.booster.predict(_matrix(frame)), dtype=float), 0.0)


def _matrix(frame: pl.DataFrame) -> np.ndarray:
    return frame.select(pl.col(c).cast(pl.Float64) for c in KERNEL_FEATURES).to_numpy()


def _column(X: np.ndarray, name: str) -> np.ndarray:
    return np.asarray(X[:, FEATURE_COLUMNS.index(name)], dtype=np.float64)


def layer_operators(X: np.ndarray, hardware_types: list[str]) -> dict[str, pl.DataFrame]:
    """Per launch row of the feature matrix ``X``, the operator that stands for each layer
    class the cost prior times on a device: its dense matmuls (a linear layer of the device's
    tokens by the model's width), its attention scores (a batched matmul per head) and its
    memory-bound work (an element-wise op over the device's activations). Shapes come from the
    launch and architecture features alone; an unknown size is 1."""
    batch = _column(X, "ratio_batch_per_device")
    batch = np.where(np.isfinite(batch) & (batch > 0), batch, _column(X, "ratio_global_batch"))
    tp = _column(X, "job_tensor_parallel")
    tp = np.where(np.isfinite(tp) & (tp >= 1), tp, 1.0)
    tokens = _column(X, "arch_tokens_per_sample")
    width, d_model = _column(X, "arch_mean_width"), _column(X, "arch_d_model")
    d_model = np.where(np.isfinite(d_model) & (d_model > 0), d_model, width)
    heads = _column(X, "arch_attention_heads")
    heads = np.where(np.isfinite(heads) & (heads >= 1), heads, 1.0)

    def count(values: np.ndarray) -> pl.Series:
        values = np.where(np.isfinite(values), values, 1.0)
        return pl.Series(np.maximum(np.round(values), 1.0).astype(np.int64))

    rows = batch * np.where(np.isfinite(tokens) & (tokens > 0), tokens, 1.0)
    none = pl.Series([None] * len(X), dtype=pl.Int64)

    def frame(op: str, **shape: pl.Series) -> pl.DataFrame:
        columns = {c: shape.get(c, none) for c in ("b", "m", "n", "k", "h")}
        return pl.DataFrame({"op": [op] * len(X), "hardware_type": hardware_types, **columns})

    return {
        "matmul": frame(
            "linear",
            b=count(np.ones(len(X))),
            m=count(rows / tp),
            n=count(d_model),
            k=count(width / tp),
        ),
        "attention": frame(
            "bmm",
            b=count(batch * heads / tp),
            m=count(tokens),
            n=count(d_model / heads),
            k=count(tokens),
        ),
        "memory": frame("gelu", b=count(rows), h=count(d_model)),
    }


def composed_log_q(
    model: KernelEfficiency, X: np.ndarray, hardware_types: list[str], specs: pl.DataFrame
) -> np.ndarray:
    """The cost prior (``cost_model.step_costs``, read back from ``X``'s ``cost_`` features)
    with each layer class's time divided by its operator's learned efficiency on the type
    (``layer_operators``): ln(global batch / step time). The matmul term's wave quantization is
    the kernel model's to learn, so the prior's own is taken back out first. NaN where the cost
    prior is."""
    step = np.exp(_column(X, "cost_log_step_s"))
    share = {c: _column(X, f"cost_share_{c}") for c in ("matmul", "attention", "memory")}
    waves = _column(X, "cost_wave_efficiency")
    waves = np.where(np.isfinite(waves) & (waves > 0), waves, 1.0)
    efficiency = {
        name: np.exp(model.log_efficiency(ops, specs))
        for name, ops in layer_operators(X, hardware_types).items()
    }
    rest = 1.0 - share["matmul"] - share["attention"] - share["memory"]
    composed = step * (
        share["matmul"] * waves / efficiency["matmul"]
        + share["attention"] / efficiency["attention"]
        + share["memory"] / efficiency["memory"]
        + rest
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(_column(X, "ratio_global_batch") / composed)
