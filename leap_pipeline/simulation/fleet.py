"""Generate one day of a simulated fleet, and the oracle that knows the truth behind it.

``SimulatedFleet(seed, scale).day(d)`` returns that day's job attempts and allocation logs in the
data contract's schemas and nothing else. Any day from ``SPAN_START`` on: the calibrated span is
the catalog's first block of ``SPAN_DAYS`` days, and the fleet lives on in later blocks
(``catalog.build_catalog``). The hidden side (true medians, family effects, noise) is
reachable only through ``SimulatedFleet.oracle()``, which evaluation uses to score predictions and
routing against the truth; feature extraction never holds a fleet object.
"""

from __future__ import annotations

import datetime as dt
import functools
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from leap_serving.launch.architecture import parse_definition, summarize
from leap_serving.launch.contract import job_devices, schema

from . import physics
from .catalog import (
    ARCHETYPE_NAMES,
    ARCHETYPES,
    OPTIMIZERS,
    PRECISIONS,
    SHARDINGS,
    SPAN_DAYS,
    Catalog,
    build_catalog,
)
from .hardware import LEGACY_CAPACITY, VENDORS, hardware_specs

SPAN_START = dt.date(2026, 1, 1)
LAST_INDEX = (dt.date.max - SPAN_START).days  # the last day a date can name
ATTEMPTS_PER_DAY = 25_000  # at scale 1.0, before the weekly cycle

# attempt-level noise: log-normal jitter plus a minority of slow attempts
JITTER_SIGMA = 0.10
STRAGGLER_SHARE = 0.05
STRAGGLER_SLOWDOWN = (0.25, 0.8)
# median of the noise multiplier: stragglers all fall below it, so it solves
# STRAGGLER_SHARE + (1 - STRAGGLER_SHARE) * Phi(ln m / sigma) = 0.5
NOISE_MEDIAN = float(
    np.exp(
        JITTER_SIGMA
        * statistics.NormalDist().inv_cdf((0.5 - STRAGGLER_SHARE) / (1.0 - STRAGGLER_SHARE))
    )
)
RETRIES = ((1, 2, 3), (0.86, 0.11, 0.03))
VERSION_EVERY_DAYS = 12
SERVER_GEN2_SHARE = 0.4
HABIT_WEIGHT = 4.0  # how much more the legacy scheduler favours a family's usual type
SERVER_GEN2_SPEEDUP = 1.04


class FleetArgumentError(ValueError):
    """A bad argument to the simulator; the message names the argument and its value."""


@dataclass(frozen=True)
class SimulatedDay:
    """The observable sources of one day."""

    attempts: pl.DataFrame
    allocations: pl.DataFrame


@dataclass(frozen=True)
class _DayTruth:
    attempt_ids: np.ndarray
    jobs: physics.JobArrays  # per attempt
    work_samples: np.ndarray
    logged_hw: np.ndarray  # hardware index per attempt
    family: np.ndarray  # the family's name, what a normalizer should recover from the job name
    hidden: dict[str, np.ndarray]  # ln of each hidden factor per attempt (HIDDEN_FACTORS)


def parse_day(day: int | str | dt.date) -> int:
    """Day index from the span start; accepts an index, a date or 'YYYY-MM-DD' on or after it."""
    if isinstance(day, bool):
        raise FleetArgumentError(f"day={day!r} is not a day index, date or 'YYYY-MM-DD'")
    if isinstance(day, dt.datetime):
        day = day.date()
    if isinstance(day, str):
        try:
            day = dt.date.fromisoformat(day)
        except ValueError:
            raise FleetArgumentError(f"day={day!r} is not in the format YYYY-MM-DD") from None
    if isinstance(day, dt.date):
        index = (day - SPAN_START).days
    elif isinstance(day, (int, np.integer)):
        index = int(day)
    else:
        raise FleetArgumentError(f"day={day!r} is not a day index, date or 'YYYY-MM-DD'")
    if not 0 <= index <= LAST_INDEX:
        raise FleetArgumentError(
            f"day={day!r} is outside the simulated fleet's days {SPAN_START} .. {dt.date.max}"
        )
    return index


def day_date(index: int) -> dt.date:
    return SPAN_START + dt.timedelta(days=index)


@functools.lru_cache(maxsize=4)
def _catalog(seed: int, block: int = 0) -> Catalog:
    return build_catalog(seed, block)


@functools.lru_cache(maxsize=8)
def _parsed_definitions(seed: int, block: int) -> list[dict]:
    return [{"layers": parse_definition(d)} for d in _catalog(seed, block).mt_definition]


# package versions' hidden speed effects, drawn in chunks: the first is the span's own draw
VERSION_CHUNK = (SPAN_DAYS + 120) // VERSION_EVERY_DAYS + 2


@functools.lru_cache(maxsize=64)
def _version_chunk(seed: int, chunk: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 7002] if chunk == 0 else [seed, 7002, chunk])
    return rng.lognormal(0.0, 0.04, VERSION_CHUNK)


class SimulatedFleet:
    """A deterministic fleet: the same (seed, scale, day) always gives the same rows.

    Parameters
    ----------
    seed : int
        Selects the fleet (its model types, families and noise).
    scale : float
        Attempts per day relative to about 25,000 at 1.0; must be positive.
    """

    def __init__(self, seed: int = 0, scale: float = 1.0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise FleetArgumentError(f"seed={seed!r} is not a non-negative integer")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
            raise FleetArgumentError(f"scale={scale!r} is not a positive number")
        if not np.isfinite(scale) or scale > 20:
            raise FleetArgumentError(f"scale={scale!r} is above the supported maximum of 20")
        self.seed = int(seed)
        self.scale = float(scale)
        self._specs = hardware_specs(SPAN_START)
        self._truth_cache: dict[int, _DayTruth] = {}

    @property
    def catalog(self) -> Catalog:
        """The span's model types and families (block 0; ``catalog_of`` for a later day)."""
        return _catalog(self.seed, 0)  # the same cache entry as day 0's block

    def catalog_of(self, day: int | str | dt.date) -> Catalog:
        """The model types and families of the block that holds ``day``."""
        return _catalog(self.seed, parse_day(day) // SPAN_DAYS)

    def hardware_specs(self) -> pl.DataFrame:
        return self._specs

    def day(self, day: int | str | dt.date) -> SimulatedDay:
        observable, _ = self._generate(parse_day(day))
        return observable

    def days(self, first: int | str | dt.date, n: int) -> Iterable[tuple[int, SimulatedDay]]:
        start = parse_day(first)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise FleetArgumentError(f"days={n!r} is not a positive integer")
        parse_day(start + n - 1)
        for index in range(start, start + n):
            yield index, self.day(index)

    def oracle(self) -> Oracle:
        return Oracle(self)

    # -- generation ---------------------------------------------------------------------------

    def _hardware_arrays(self) -> physics.HardwareArrays:
        specs = self._specs
        vendor_index = np.array([VENDORS.index(v) for v in specs["vendor"]])
        return physics.HardwareArrays(
            peak_fp32_tflops=specs["peak_fp32_tflops"].to_numpy(),
            peak_bf16_tflops=specs["peak_bf16_tflops"].to_numpy(),
            memory_gb=specs["memory_gb"].to_numpy(),
            memory_bandwidth_gbps=specs["memory_bandwidth_gbps"].to_numpy(),
            compute_units=specs["compute_units"].to_numpy(),
            intra_node_bandwidth_gbps=specs["intra_node_bandwidth_gbps"].to_numpy(),
            inter_node_bandwidth_gbps=specs["inter_node_bandwidth_gbps"].to_numpy(),
            devices_per_host=specs["devices_per_host"].to_numpy(),
            vendor_index=vendor_index,
            kernel_overhead_s=np.array([physics.KERNEL_OVERHEAD_S[v] for v in specs["vendor"]]),
        )

    def _version_multipliers(self, versions: np.ndarray) -> np.ndarray:
        """The hidden speed factor of each package version in ``versions``."""
        chunks = range(int(versions.max(initial=0)) // VERSION_CHUNK + 1)
        return np.concatenate([_version_chunk(self.seed, c) for c in chunks])[versions]

    def _generate(self, d: int) -> tuple[SimulatedDay, _DayTruth]:
        block = d // SPAN_DAYS
        cat = _catalog(self.seed, block)
        rng = np.random.default_rng([self.seed, d, 11])
        date = day_date(d)

        # which families launch runs today
        mt_alive = (cat.mt_birth <= d) & (d < cat.mt_death)
        weekly = 0.9 if date.weekday() >= 5 else 1.04
        mean_runs = ATTEMPTS_PER_DAY * self.scale * weekly / float(np.dot(*RETRIES))
        n_runs = int(rng.poisson(mean_runs))
        mt_w = cat.mt_weight * mt_alive * rng.lognormal(0.0, 0.25, len(mt_alive))
        fam_alive = np.flatnonzero((cat.fam_birth <= d) & (d < cat.fam_death))
        fam_alive = fam_alive[np.argsort(cat.fam_model_type[fam_alive], kind="stable")]
        fam_mt = cat.fam_model_type[fam_alive]
        has_family = np.zeros(len(mt_w), dtype=bool)
        has_family[fam_mt] = True
        mt_w = np.where(has_family, mt_w, 0.0)
        mt_counts = rng.multinomial(n_runs, mt_w / mt_w.sum())
        bounds = np.searchsorted(fam_mt, np.arange(len(mt_w) + 1))
        picks = []
        for m in np.flatnonzero(mt_counts):
            pool = fam_alive[bounds[m] : bounds[m + 1]]
            p = cat.fam_activity[pool]
            picks.append(rng.choice(pool, size=mt_counts[m], p=p / p.sum()))
        fam = np.concatenate(picks) if picks else np.zeros(0, dtype=int)
        fam = fam[rng.permutation(len(fam))]
        n = len(fam)
        mt = cat.fam_model_type[fam]

        # the run's launch config: the family's habit with occasional changes
        step = rng.choice([-1, 0, 1], n, p=[0.08, 0.84, 0.08])
        trainers = 2 ** np.clip(cat.fam_trainers_log2[fam] + step, 0, 7)
        batch = np.maximum(
            1, np.round(cat.fam_batch[fam] * 2.0 ** rng.choice([-1, 0, 1], n, p=[0.08, 0.84, 0.08]))
        )
        readers = np.maximum(
            1, np.round(trainers * cat.fam_readers_per_trainer[fam] * rng.lognormal(0, 0.3, n))
        )
        sparse = np.round(
            cat.fam_sparse[fam] * np.where(rng.random(n) < 0.25, rng.uniform(0.7, 1.4, n), 1.0)
        )
        hash_size = np.round(
            cat.fam_hash[fam] * np.where(rng.random(n) < 0.1, rng.choice([0.5, 2.0], n), 1.0)
        )
        seq_len = np.round(cat.fam_seq_len[fam] * np.where(rng.random(n) < 0.1, 2.0, 1.0))
        dense = cat.fam_dense[fam]
        flip = rng.random(n) < 0.04
        precision = np.where(
            flip & (cat.fam_precision[fam] != 0), 0, np.where(flip, 1, cat.fam_precision[fam])
        )
        low_precision = precision != 0
        latest = (d + 60) // VERSION_EVERY_DAYS
        version = np.maximum(latest - cat.fam_version_lag[fam], 0)

        summaries = self._summaries(block, mt, sparse, dense, hash_size, seq_len, low_precision)
        arch = cat.mt_archetype[mt]
        reader_base = np.array([a["reader_rate"] for a in ARCHETYPES.values()])[arch]
        feature_load = 1.0 + sparse / 200.0 + dense / 2000.0
        tokens = np.where(
            seq_len > 0,
            seq_len,
            np.where(
                arch == ARCHETYPE_NAMES.index("cnn"), summaries["image_size"] ** 2 / 64.0, 1.0
            ),
        )
        opt_state = np.array([physics.OPTIMIZER_STATE_BYTES[o] for o in OPTIMIZERS])
        sharding_comm = np.array([physics.SHARDING_COMM[s] for s in SHARDINGS])
        jobs = physics.JobArrays(
            flops_per_sample=summaries["flops_per_sample"],
            dense_params=summaries["dense_params"],
            embedding_params=summaries["embedding_params"],
            embedding_bytes_per_sample=summaries["embedding_bytes_per_sample"],
            activation_bytes_per_sample=summaries["activation_bytes_per_sample"],
            kernels_per_step=summaries["kernels_per_step"],
            transformer_layers=summaries["n_transformer_layers"],
            d_model=summaries["d_model"],
            seq_len=seq_len.astype(float),
            num_sparse_features=sparse.astype(float),
            embedding_dim=summaries["embedding_dim"],
            num_trainers=trainers.astype(float),
            batch_size=batch.astype(float),
            devices_requested=cat.fam_devices[fam].astype(float),
            tensor_parallel=cat.fam_tensor_parallel[fam].astype(float),
            pipeline_parallel=cat.fam_pipeline_parallel[fam].astype(float),
            low_precision=low_precision,
            sharding_comm=sharding_comm[cat.fam_sharding[fam]],
            optimizer_state_bytes=opt_state[cat.fam_optimizer[fam]],
            activation_checkpointing=cat.fam_checkpointing[fam],
            num_readers=readers.astype(float),
            reader_rate=reader_base / np.where(arch <= 3, feature_load, 1.0),
            tokens_per_sample=tokens.astype(float),
            hidden_efficiency=(
                cat.mt_efficiency[mt] * cat.fam_efficiency[fam] * self._version_multipliers(version)
            ),
            vendor_efficiency=cat.mt_vendor_efficiency[mt],
        )

        # candidates: vendor support, availability, memory fit; ordered by the family's quota
        hw = self._hardware_arrays()
        specs = self._specs
        available = (specs["available_from"].to_numpy() <= np.datetime64(date)).astype(bool)
        support = cat.mt_vendor_support[mt][:, hw.vendor_index]
        fits = physics.cross_memory_footprint_gb(jobs, hw) <= 0.9 * hw.memory_gb
        eligible = support & available & fits
        too_few = eligible.sum(axis=1) < 2
        if too_few.any():  # the launcher shards harder; the largest-memory types stay eligible
            by_memory = np.argsort(-np.where(support & available, hw.memory_gb, -1.0), axis=1)[
                :, :2
            ]
            forced = np.zeros_like(eligible)
            np.put_along_axis(forced, by_memory, True, axis=1)
            eligible = np.where(too_few[:, None], forced, eligible)
        priority = np.where(eligible, cat.fam_hw_priority[fam], np.inf)
        order = np.argsort(priority, axis=1)
        rank = np.argsort(order, axis=1)
        candidates = eligible & (rank < cat.fam_pool_size[fam][:, None])

        # the legacy scheduler: capacity and habit (the family's first choice), not a uniform draw
        capacity = np.array([LEGACY_CAPACITY[h] for h in specs["hardware_type"]])
        capacity = capacity * np.random.default_rng([self.seed, d, 12]).lognormal(
            0, 0.25, len(capacity)
        )
        score = np.log(capacity)[None, :] + np.where(rank == 0, np.log(HABIT_WEIGHT), 0.0)
        score = np.where(candidates, score + rng.gumbel(size=score.shape), -np.inf)
        chosen = np.argmax(score, axis=1)

        gen2 = rng.random(n) < SERVER_GEN2_SHARE
        jobs = _with_hidden(jobs, np.where(gen2, SERVER_GEN2_SPEEDUP, 1.0))
        logged_hw = _take_hw(hw, chosen)
        median = physics.paired_throughput(jobs, logged_hw) * NOISE_MEDIAN

        # runs become attempts: retries of the same run share its config
        n_attempts = rng.choice(RETRIES[0], n, p=RETRIES[1])
        run = np.repeat(np.arange(n), n_attempts)
        attempt_no = (
            np.arange(len(run)) - np.repeat(np.cumsum(n_attempts) - n_attempts, n_attempts) + 1
        )
        last = attempt_no == n_attempts[run]
        m = len(run)
        noise = rng.lognormal(0.0, JITTER_SIGMA, m)
        straggler = rng.random(m) < STRAGGLER_SHARE
        noise = np.where(straggler, rng.uniform(*STRAGGLER_SLOWDOWN, m), noise)
        measured = median[run] / NOISE_MEDIAN * noise
        status = np.where(
            last,
            np.where(rng.random(m) < 0.985, "succeeded", "failed"),
            np.where(rng.random(m) < 0.6, "failed", "preempted"),
        )
        failed = status == "failed"
        throughput = np.where(failed, np.where(rng.random(m) < 0.3, 0.0, np.nan), measured)
        work = (cat.fam_training_days[fam] * cat.fam_rows_per_day[fam])[run]
        work = work * reader_base[run] / 2.5e4  # slow archetypes train on fewer, larger samples
        full = work / measured
        duration = np.where(
            status == "succeeded",
            full,
            full * np.where(failed, rng.uniform(0.0, 0.2, m), rng.uniform(0.05, 0.9, m)),
        )

        start = dt.datetime.combine(date, dt.time())
        offsets = np.sort(rng.uniform(0, 86_000, n))[rng.permutation(n)]
        retry_delay = np.where(attempt_no > 1, (attempt_no - 1) * rng.uniform(300, 1800, m), 0.0)
        ts_us = ((offsets[run] + retry_delay).clip(max=86_399) * 1e6).astype(np.int64)
        attempt_ids = np.array([f"{date:%Y%m%d}-{i:06d}" for i in range(m)], dtype=object)
        run_ids = rng.integers(10**5, 10**9, n)[run]
        names = _job_names(cat, fam[run], date, run_ids, attempt_no, ts_us, rng)

        hw_names = specs["hardware_type"].to_numpy()
        # alphabetical, so the family's preference order does not leak into the logs
        cand_lists = [sorted(hw_names[np.flatnonzero(row)]) for row in candidates]
        run_hw = hw_names[chosen]
        attempts = pl.DataFrame(
            {
                "attempt_id": attempt_ids,
                "job_name": names,
                "model_type": cat.mt_name[mt][run],
                "ds": [date] * m,
                "launch_ts": np.datetime64(start, "us") + ts_us.astype("timedelta64[us]"),
                "hardware_type": run_hw[run],
                "candidate_hardware": [cand_lists[r] for r in run],
                "num_trainers": trainers[run].astype(np.int64),
                "batch_size": batch[run].astype(np.int64),
                "requested_devices_per_host": cat.fam_devices[fam][run].astype(np.int64),
                "num_readers": readers[run].astype(np.int64),
                "precision": np.array(PRECISIONS)[precision][run],
                "tensor_parallel": cat.fam_tensor_parallel[fam][run].astype(np.int64),
                "pipeline_parallel": cat.fam_pipeline_parallel[fam][run].astype(np.int64),
                "embedding_sharding": np.array(SHARDINGS)[cat.fam_sharding[fam]][run],
                "num_sparse_features": sparse[run].astype(np.int64),
                "num_dense_features": dense[run].astype(np.int64),
                "hash_size": hash_size[run].astype(np.int64),
                "seq_len": seq_len[run].astype(np.int64),
                "training_days": cat.fam_training_days[fam][run].astype(np.int64),
                "optimizer": np.array(OPTIMIZERS)[cat.fam_optimizer[fam]][run],
                "activation_checkpointing": cat.fam_checkpointing[fam][run],
                "package_version": np.array([f"4.{v}.0" for v in version], dtype=object)[run],
                "model_definition": cat.mt_definition[mt][run],
                "status": status,
                "throughput": throughput,
                "duration_s": duration,
            },
            schema=schema("job_attempts"),
            nan_to_null=True,
        )
        dph = physics.devices_per_host(jobs, logged_hw)
        allocations = pl.DataFrame(
            {
                "attempt_id": attempt_ids,
                "num_hosts": trainers[run].astype(np.int64),
                "devices_per_host": dph[run].astype(np.int64),
                "cpu_cores": np.where(gen2, 192, 96)[run].astype(np.int64),
                "host_memory_gb": np.where(gen2, 2048.0, 1024.0)[run],
                "server_subtype": np.array(
                    [f"{h}.gen{g}" for h, g in zip(run_hw, np.where(gen2, 2, 1), strict=True)],
                    dtype=object,
                )[run],
            },
            schema=schema("allocations"),
        )
        vendor_of_logged = hw.vendor_index[chosen]
        truth = _DayTruth(
            attempt_ids=attempt_ids,
            jobs=jobs.take(run),
            work_samples=work,
            logged_hw=chosen[run],
            family=cat.fam_name[fam][run],
            hidden={
                "model_type_efficiency": np.log(cat.mt_efficiency[mt])[run],
                "vendor_efficiency": np.log(
                    cat.mt_vendor_efficiency[mt][np.arange(n), vendor_of_logged]
                )[run],
                "family_efficiency": np.log(cat.fam_efficiency[fam])[run],
                "package_version_efficiency": np.log(self._version_multipliers(version))[run],
                "noise": np.log(noise / NOISE_MEDIAN),
            },
        )
        return SimulatedDay(attempts, allocations), truth

    def _summaries(
        self, block, mt, sparse, dense, hash_size, seq_len, low_precision
    ) -> dict[str, np.ndarray]:
        definitions = _parsed_definitions(self.seed, block)
        keys = np.stack(
            [mt, sparse, dense, hash_size, seq_len, low_precision.astype(float)], axis=1
        )
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        rows = [
            summarize(
                definitions[int(k[0])],
                num_sparse_features=int(k[1]),
                num_dense_features=int(k[2]),
                hash_size=int(k[3]),
                seq_len=int(k[4]),
                bytes_per_value=2 if k[5] else 4,
            )
            for k in unique
        ]
        return {key: np.array([r[key] for r in rows])[inverse.ravel()] for key in rows[0]}

    def _truth(self, d: int) -> _DayTruth:
        if d not in self._truth_cache:
            if len(self._truth_cache) >= 8:
                self._truth_cache.pop(next(iter(self._truth_cache)))
            self._truth_cache[d] = self._generate(d)[1]
        return self._truth_cache[d]


def _take_hw(hw: physics.HardwareArrays, index: np.ndarray) -> physics.HardwareArrays:
    return physics.HardwareArrays(**{k: v[index] for k, v in hw.__dict__.items()})


def _with_hidden(jobs: physics.JobArrays, factor: np.ndarray) -> physics.JobArrays:
    fields = dict(jobs.__dict__)
    fields["hidden_efficiency"] = fields["hidden_efficiency"] * factor
    return physics.JobArrays(**fields)


def _job_names(
    cat: Catalog,
    fam: np.ndarray,
    date: dt.date,
    run_ids: np.ndarray,
    attempt_no: np.ndarray,
    ts_us: np.ndarray,
    rng: np.random.Generator,
) -> list[str]:
    """Raw job names: the family's stable part wrapped in run-specific identifiers."""
    hexes = rng.integers(0, 2**32, len(fam))
    names = []
    for f, run_id, k, ts, hx in zip(fam, run_ids, attempt_no, ts_us, hexes, strict=True):
        base = cat.fam_name[f]
        template = cat.fam_template[f]
        if template == 0:
            names.append(f"{base}_{date:%Y%m%d}_{run_id}_attempt{k}")
        elif template == 1:
            names.append(f"{base}-{date:%Y-%m-%d}-run{run_id}-a{k}")
        elif template == 2:
            stamp = dt.datetime.combine(date, dt.time()) + dt.timedelta(microseconds=int(ts))
            names.append(f"f{run_id}.{base}.{stamp:%Y%m%dT%H%M%S}.retry{k - 1}")
        else:
            names.append(f"{base}/{run_id}/{hx:08x}/{k}")
    return names


class Oracle:
    """The hidden truth of a simulated fleet, for scoring only.

    For any attempt and any hardware type: the true median throughput (what the attempt's
    measured throughput scatters around), and the noise-free duration and cost of running the
    attempt's work there.
    """

    def __init__(self, fleet: SimulatedFleet) -> None:
        self._fleet = fleet

    def families(self, day: int | str | dt.date) -> pl.DataFrame:
        """attempt_id and the true family name of every attempt of one day."""
        truth = self._fleet._truth(parse_day(day))
        return pl.DataFrame(
            {"attempt_id": truth.attempt_ids, "family": truth.family},
            schema={"attempt_id": pl.String, "family": pl.String},
        )

    def _by_day(self, attempt_ids: Sequence[str]) -> Iterator[tuple[_DayTruth, np.ndarray]]:
        """Each day's truth with the positions of the asked attempts in it."""
        ids = np.asarray(list(attempt_ids), dtype=object)
        days = np.array([_day_of(a) for a in ids], dtype=int)
        for d in np.unique(days):
            truth = self._fleet._truth(int(d))
            position = {a: i for i, a in enumerate(truth.attempt_ids)}
            try:
                rows = np.array([position[a] for a in ids[days == d]], dtype=int)
            except KeyError as exc:
                raise FleetArgumentError(f"attempt_id={exc.args[0]!r} does not exist") from None
            yield truth, rows

    def hidden_factors(self, attempt_ids: Sequence[str]) -> pl.DataFrame:
        """ln of each hidden factor of each attempt on the type it ran on (``HIDDEN_FACTORS``):
        for the learnability benchmark's revealed fits and variance shares, never a feature."""
        frames = [
            pl.DataFrame(
                schema={"attempt_id": pl.String, **dict.fromkeys(HIDDEN_FACTORS, pl.Float64)}
            )
        ]
        for truth, rows in self._by_day(attempt_ids):
            frames.append(
                pl.DataFrame(
                    {"attempt_id": truth.attempt_ids[rows]}
                    | {k: truth.hidden[k][rows] for k in HIDDEN_FACTORS}
                )
            )
        return pl.concat(frames)

    def true_medians(
        self, attempt_ids: Sequence[str], hardware_types: Sequence[str] | None = None
    ) -> pl.DataFrame:
        """Long frame: attempt_id, hardware_type, true_median, duration_s, devices, cost_usd
        (devices as ``contract.job_devices`` counts them).

        With ``hardware_types=None`` the attempt's logged hardware type is used.
        """
        specs = self._fleet.hardware_specs()
        names = specs["hardware_type"].to_list()
        unknown = sorted(set(hardware_types or ()) - set(names))
        if unknown:
            raise FleetArgumentError(f"hardware_types={unknown!r} are not in the spec table")
        hw_all = self._fleet._hardware_arrays()
        cost = specs["hourly_cost_usd"].to_numpy()
        wanted = (
            None if hardware_types is None else np.array([names.index(h) for h in hardware_types])
        )
        frames = [_TRUTH_FRAME_SCHEMA.to_frame()]
        for truth, rows in self._by_day(attempt_ids):
            # one (attempt, hardware type) pair per output row
            if wanted is None:
                pair_rows, pair_hw = rows, truth.logged_hw[rows]
            else:
                pair_rows, pair_hw = np.repeat(rows, len(wanted)), np.tile(wanted, len(rows))
            jobs, hw = truth.jobs.take(pair_rows), _take_hw(hw_all, pair_hw)
            median = physics.paired_throughput(jobs, hw) * NOISE_MEDIAN
            devices = job_devices(jobs.num_trainers, jobs.devices_requested, hw.devices_per_host)
            duration = truth.work_samples[pair_rows] / median
            frames.append(
                pl.DataFrame(
                    {
                        "attempt_id": truth.attempt_ids[pair_rows],
                        "hardware_type": np.array(names, dtype=object)[pair_hw],
                        "true_median": median,
                        "duration_s": duration,
                        "devices": devices,
                        "cost_usd": duration / 3600.0 * devices * cost[pair_hw],
                    },
                    schema=_TRUTH_FRAME_SCHEMA,
                )
            )
        return pl.concat(frames)


_TRUTH_FRAME_SCHEMA = pl.Schema(
    {
        "attempt_id": pl.String,
        "hardware_type": pl.String,
        "true_median": pl.Float64,
        "duration_s": pl.Float64,
        "devices": pl.Float64,
        "cost_usd": pl.Float64,
    }
)


# the hidden draws behind an attempt's throughput, as ``Oracle.hidden_factors`` names them; the
# noise is the attempt's own, the others are shared by its model type, family or version
HIDDEN_FACTORS: tuple[str, ...] = (
    "model_type_efficiency",
    "vendor_efficiency",
    "family_efficiency",
    "package_version_efficiency",
    "noise",
)


def _day_of(attempt_id: str) -> int:
    try:
        return parse_day(dt.datetime.strptime(str(attempt_id).split("-")[0], "%Y%m%d").date())
    except (ValueError, FleetArgumentError):
        raise FleetArgumentError(
            f"attempt_id={attempt_id!r} is not a simulated attempt id"
        ) from None


__all__ = [
    "HIDDEN_FACTORS",
    "SPAN_START",
    "FleetArgumentError",
    "Oracle",
    "SimulatedDay",
    "SimulatedFleet",
]
