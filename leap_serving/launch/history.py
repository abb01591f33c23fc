"""Job-family history (paper section 2.2): the strongest features, as serving would see them.

A launch's history is read by its job family (``families``) from a snapshot of earlier days
(``snapshot``). Per family the history is the previous log throughput, the running mean and
standard deviation of earlier log throughputs, the number of earlier observations and the days
since the last one, always as of the end of the day before the launch. This module arranges a
snapshot for look-ups (``HistoryIndex``) and reads a launch's history features from it.

History is kept at two levels: per family, and per family and hardware type. Measured on the
simulated fleet (days 30-35, scale 0.5, ``benchmarks/history_keying.py``), the family-on-this-type
mean log throughput, falling back to the family mean where the family never ran on the type, puts
40-42% of known-family attempts within 20%, against 35-37% for the family mean alone; 81% of those
attempts had history on their type. So both levels are features: ``hist_hw_*`` hold the per-type
values (the family's when the type has none, with ``hist_hw_count`` 0 saying so).

A family's levels on its other types predict its level on a type it never ran on (the routing
question). The ``hist_xfer_*`` features carry them over: by the fleet's median log-ratio between
two types, learned from the families that ran on both (a matrix-completion baseline), and by the
ratio of peak compute and of memory bandwidth from the spec table (physics baselines). Measured on
the Sia traces under leave-model-hardware-out (``leap crossval``, ``docs/results.md``).

The model type's own record is history too, of the kind the legacy lookup table kept: its level on
the target type (``hist_mt_hw_*``: a count-weighted mean over its families' per-type rows), its
levels on other types carried by the fleet ratios (``hist_mt_xfer_fleet_log_q``), and the level of
the lookup key (model type, trainers, batch size, type) where at least ``KEY_MIN_SUPPORT`` attempts
back it (``hist_key_*``; the snapshot holds these as rows without a family, ``snapshot``).

Training and serving share one path: a snapshot as of day D-1 (what a model artifact ships) plus
the launch date gives the features of a launch on day D. Families absent from the snapshot are cold
starts: their level features take the model type's mean log throughput from the same snapshot (or
the fleet's), and ``hist_cold_start`` says so.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from .families import normalize_job_name
from .rows import LaunchRows, launch_rows
from .snapshot import KEY_COLUMNS
from .specs import SpecTable, spec_table

HISTORY_FEATURES: tuple[str, ...] = (
    "hist_prev_log_q",
    "hist_mean_log_q",
    "hist_std_log_q",
    "hist_count",
    "hist_days_since_last",
    "hist_cold_start",
    "hist_hw_prev_log_q",
    "hist_hw_mean_log_q",
    "hist_hw_count",
    "hist_xfer_types",
    "hist_xfer_fleet_log_q",
    "hist_xfer_compute_log_q",
    "hist_xfer_bandwidth_log_q",
    "hist_mt_hw_mean_log_q",
    "hist_mt_hw_count",
    "hist_mt_xfer_fleet_log_q",
    "hist_key_mean_log_q",
    "hist_key_count",
)

# What a launcher knows of the model type itself (the legacy table's kind of record), apart from
# the job family's own history.
MODEL_TYPE_HISTORY_FEATURES: tuple[str, ...] = (
    "hist_mt_hw_mean_log_q",
    "hist_mt_hw_count",
    "hist_mt_xfer_fleet_log_q",
    "hist_key_mean_log_q",
    "hist_key_count",
)


def _ordered_means(frame: pl.DataFrame, key: str, value: str) -> dict[str, float]:
    """Per-key means summed in one fixed order (key, then family), so they are bit-identical
    however the snapshot's rows were stored; a threaded group-by sums in varying order."""
    ordered = frame.sort(key, "family")
    keys, starts = np.unique(ordered[key].to_numpy(), return_index=True)
    values = ordered[value].to_numpy()
    sums = np.add.reduceat(values, starts) if len(values) else np.zeros(0)
    counts = np.diff(np.append(starts, len(values)))
    return dict(zip(keys.tolist(), (sums / counts).tolist(), strict=True))


@dataclass(frozen=True)
class HistoryIndex:
    """A snapshot arranged for look-ups: built once per snapshot (per day in training, once per
    loaded model in serving), so a launch's history costs a few dictionary reads."""

    families: dict[str, tuple[int, float, float, float, dt.date]]  # count, mean, std, prev, last
    per_type: dict[tuple[str, str], tuple[int, float, float]]  # count, mean, prev
    profiles: dict[str, tuple[tuple[str, float], ...]]  # family -> (type, mean) per type it ran on
    ratios_to: dict[str, dict[str, float]]  # to -> from -> median log-ratio over shared families
    model_type_on: dict[tuple[str, str], tuple[int, float]]  # (model type, type) -> count, mean
    model_type_profiles: dict[str, tuple[tuple[str, float], ...]]  # model type -> (type, mean)
    keys: dict[tuple[str, int, int, str], tuple[int, float]]  # lookup key -> count, mean
    type_means: dict[str, float]
    fleet_mean: float | None
    last_ds: dt.date | None
    # what ``model_type_carried`` computed, per (model type, type) asked for
    _carried: dict[tuple[str, str], float] = field(default_factory=dict, compare=False, repr=False)

    def model_type_carried(self, model_type: str, target: str) -> float:
        """The model type's levels on its other types carried to ``target`` by the fleet's
        ratios, averaged (NaN where none can be). Kept once computed: every launch of a model
        type asks it again for the same candidates, and it was the costliest line of history."""
        key = (model_type, target)
        found = self._carried.get(key)
        if found is None:
            to_target = self.ratios_to.get(target, {})
            carried = [
                m + to_target[hw]
                for hw, m in self.model_type_profiles.get(model_type, ())
                if hw in to_target
            ]
            found = sum(carried) / len(carried) if carried else math.nan
            if model_type in self.model_type_profiles:  # never one entry per unknown name
                self._carried[key] = found
        return found

    @classmethod
    def from_snapshot(cls, snapshot: pl.DataFrame) -> HistoryIndex:
        family_level = snapshot.filter(pl.col("hardware_type").is_null())
        type_level = snapshot.filter(
            pl.col("hardware_type").is_not_null() & pl.col("family").is_not_null()
        )
        key_level = snapshot.filter(pl.col("family").is_null())
        families = {
            row[0]: row[1:]
            for row in family_level.select(
                "family", "count", "mean_log_q", "std_log_q", "prev_log_q", "last_ds"
            ).iter_rows()
        }
        per_type = {
            (row[0], row[1]): row[2:]
            for row in type_level.select(
                "family", "hardware_type", "count", "mean_log_q", "prev_log_q"
            ).iter_rows()
        }
        profiles: dict[str, list[tuple[str, float]]] = {}
        for family, hardware_type, mean in (
            type_level.sort("family", "hardware_type")
            .select("family", "hardware_type", "mean_log_q")
            .iter_rows()
        ):
            profiles.setdefault(family, []).append((hardware_type, mean))
        fleet_mean = (
            float(np.mean(family_level["mean_log_q"].to_numpy())) if family_level.height else None
        )
        model_type_on = _model_type_levels(type_level)
        model_type_profiles: dict[str, list[tuple[str, float]]] = {}
        for (model_type, hardware_type), (_, mean) in sorted(model_type_on.items()):
            model_type_profiles.setdefault(model_type, []).append((hardware_type, mean))
        keys = {
            (row[0], row[1], row[2], row[3]): (row[4], row[5])
            for row in key_level.select(*KEY_COLUMNS, "count", "mean_log_q").iter_rows()
        }
        return cls(
            families=families,
            per_type=per_type,
            profiles={family: tuple(levels) for family, levels in profiles.items()},
            ratios_to=_by_target(type_ratios(type_level)),
            model_type_on=model_type_on,
            model_type_profiles={m: tuple(v) for m, v in model_type_profiles.items()},
            keys=keys,
            type_means=_ordered_means(family_level, "model_type", "mean_log_q"),
            fleet_mean=fleet_mean,
            last_ds=snapshot["last_ds"].max() if snapshot.height else None,
        )


def _model_type_levels(type_level: pl.DataFrame) -> dict[tuple[str, str], tuple[int, float]]:
    """Per (model type, hardware type): attempts and their mean log q, from the per-family rows
    (a count-weighted mean of family means), summed in one fixed order so that training and
    serving get bit-identical values however the snapshot's rows were stored."""
    ordered = type_level.select("model_type", "hardware_type", "family", "count", "mean_log_q")
    ordered = ordered.sort("model_type", "hardware_type", "family")
    if not ordered.height:
        return {}
    key = ordered.select(pl.concat_str("model_type", "hardware_type", separator="\x00")).to_series()
    change = np.flatnonzero(np.r_[True, (key[1:] != key[:-1]).to_numpy()])
    counts = ordered["count"].to_numpy().astype(np.float64)
    weighted = counts * ordered["mean_log_q"].to_numpy()
    total = np.add.reduceat(counts, change)
    means = np.add.reduceat(weighted, change) / total
    model_types = ordered["model_type"].to_numpy()[change]
    hardware = ordered["hardware_type"].to_numpy()[change]
    return {
        (m, h): (int(n), float(v))
        for m, h, n, v in zip(model_types, hardware, total, means, strict=True)
    }


def type_ratios(type_level: pl.DataFrame) -> dict[tuple[str, str], float]:
    """Median over families that ran on both types of (mean log q on ``to``) - (on ``from``)."""
    levels = type_level.select("family", "hardware_type", "mean_log_q")
    pairs = (
        levels.join(levels, on="family", suffix="_to")
        .filter(pl.col("hardware_type") != pl.col("hardware_type_to"))
        .group_by("hardware_type", "hardware_type_to")
        .agg((pl.col("mean_log_q_to") - pl.col("mean_log_q")).median().alias("ratio"))
    )
    return {(a, b): ratio for a, b, ratio in pairs.iter_rows()}


def _by_target(ratios: dict[tuple[str, str], float]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for (source, target), ratio in sorted(ratios.items()):
        out.setdefault(target, {})[source] = ratio
    return out


def history_features(
    launches: pl.DataFrame,
    snapshot: pl.DataFrame | HistoryIndex,
    hardware_specs: pl.DataFrame | SpecTable,
) -> pl.DataFrame:
    """History features of launches (``job_name`` or ``family``, ``model_type``, ``ds``,
    ``hardware_type``), from a snapshot or its index and the spec table (for the transfers).

    The snapshot must predate every launch; only recency is computed here, from the launch day.
    """
    columns = history_columns(launches, snapshot, hardware_specs)
    return pl.DataFrame(
        [pl.Series(name, columns[name], nan_to_null=True) for name in HISTORY_FEATURES]
    )


def history_columns(
    launches: pl.DataFrame | LaunchRows,
    snapshot: pl.DataFrame | HistoryIndex,
    hardware_specs: pl.DataFrame | SpecTable,
) -> dict[str, np.ndarray]:
    """``history_features`` as float arrays (NaN for missing): what feature extraction uses."""
    launches = launch_rows(launches)
    index = snapshot if isinstance(snapshot, HistoryIndex) else HistoryIndex.from_snapshot(snapshot)
    log_specs = spec_table(hardware_specs).log_scales
    days = launches.values("ds")
    first = min((d for d in days if d is not None), default=None)
    if first is not None and index.last_ds is not None and index.last_ds >= first:
        raise ValueError(
            f"snapshot reaches {index.last_ds} but a launch is on {first}: "
            "history must come from earlier days"
        )
    if "family" in launches:
        families = launches.values("family")
    else:  # one regex pass per distinct name, without building a frame (the serving hot path)
        names = launches.values("job_name")
        memo = {n: normalize_job_name(n) for n in set(names)}
        families = [memo[n] for n in names]
    columns = {name: np.full(launches.height, np.nan) for name in HISTORY_FEATURES}
    rows = zip(
        families,
        launches.values("model_type"),
        launches.values("hardware_type"),
        days,
        launches.values("num_trainers"),
        launches.values("batch_size"),
        strict=True,
    )
    for i, (family, model_type, hardware_type, ds, trainer, batch) in enumerate(rows):
        known = index.families.get(family)
        if known is None:
            level = index.type_means.get(model_type, index.fleet_mean)
            prev = mean = np.nan if level is None else level
            count = 0
            columns["hist_cold_start"][i] = 1.0
        else:
            count, mean, std, prev, last_ds = known
            columns["hist_std_log_q"][i] = np.nan if std is None else std
            columns["hist_days_since_last"][i] = float((ds - last_ds).days)
            columns["hist_cold_start"][i] = 0.0
        columns["hist_prev_log_q"][i] = prev
        columns["hist_mean_log_q"][i] = mean
        columns["hist_count"][i] = float(count)
        on_type = index.per_type.get((family, hardware_type))
        if on_type is None:
            columns["hist_hw_count"][i] = 0.0
            columns["hist_hw_prev_log_q"][i] = prev
            columns["hist_hw_mean_log_q"][i] = mean
        else:
            columns["hist_hw_count"][i] = float(on_type[0])
            columns["hist_hw_mean_log_q"][i] = on_type[1]
            columns["hist_hw_prev_log_q"][i] = on_type[2]
        profile = index.profiles.get(family, ())
        columns["hist_xfer_types"][i] = float(len(profile) - (on_type is not None))
        if len(profile) > (on_type is not None):
            _transfer(columns, i, profile, hardware_type, index.ratios_to, log_specs)
        model_type_on = index.model_type_on.get((model_type, hardware_type))
        columns["hist_mt_hw_count"][i] = 0.0 if model_type_on is None else float(model_type_on[0])
        if model_type_on is not None:
            columns["hist_mt_hw_mean_log_q"][i] = model_type_on[1]
        columns["hist_mt_xfer_fleet_log_q"][i] = index.model_type_carried(model_type, hardware_type)
        key = index.keys.get((model_type, trainer, batch, hardware_type))
        columns["hist_key_count"][i] = 0.0 if key is None else float(key[0])
        if key is not None:
            columns["hist_key_mean_log_q"][i] = key[1]
    return columns


def _transfer(columns, i, profile, target, ratios_to, log_specs) -> None:
    """The family's levels on its other types carried to ``target``, each way averaged over the
    types it can use; NaN where no other type can be carried."""
    to_target = ratios_to.get(target, {})
    carried = [m + to_target[hw] for hw, m in profile if hw in to_target]
    if carried:
        columns["hist_xfer_fleet_log_q"][i] = sum(carried) / len(carried)
    for feature, scale in log_specs.items():
        if target in scale:
            at_target = scale[target]
            carried = [
                m + at_target - scale[hw] for hw, m in profile if hw != target and hw in scale
            ]
            if carried:
                columns[feature][i] = sum(carried) / len(carried)
