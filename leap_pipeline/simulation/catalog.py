"""The fleet's population: model types, their job families, and what each habitually launches.

Built once per seed for the whole span, so any day can be generated on its own. Model types occupy
popularity slots with a long-tailed (Zipf-like) weight; a slot's occupant retires and a new model
type takes its place, which is how new model types appear. Each model type holds a pool of job
families that are born and retire over time (recurring and new families); a family carries a
stable base launch config and a hidden efficiency factor, so its earlier runs predict its
later ones.
"""

from __future__ import annotations

import json
import statistics
import threading
from dataclasses import dataclass

import numpy as np

from .hardware import N_HARDWARE_TYPES, VENDORS

SPAN_DAYS = 730  # days a block of the catalog covers; block 0 is the span from its start

N_SLOTS = 720  # popularity slots occupied by model types at any time
IMMORTAL_SLOTS = 60  # the most popular slots' model types never retire
HEAD_SLOTS = 100
ZIPF_EXPONENT = 2.0
ZIPF_OFFSET = 35.0
MAX_FAMILIES_ALIVE = 600  # families alive at once in the most popular model type
FAMILY_LIFETIME_DAYS = 35.0
FAMILY_DEVIATION = 0.12  # share of families that change a setting their model type fixes
MODEL_TYPE_EFFICIENCY_SIGMA = 0.7  # hidden per-model-type speed factor, sigma of its ln
BATCH_SPREAD_LOG2 = 1.2  # how far a family's batch size strays from its model type's habit

# archetype: share of model types, log2 trainers, log2 per-trainer batch, readers per trainer,
# reader rate (samples/s per reader at reference feature counts), tokens per sample factor
ARCHETYPES: dict[str, dict] = {
    "dlrm": {"share": 0.49, "trainers": 1.5, "batch": 12.0, "readers": 16.0, "reader_rate": 2.5e4},
    "seqrec": {
        "share": 0.20,
        "trainers": 2.5,
        "batch": 10.0,
        "readers": 12.0,
        "reader_rate": 1.2e4,
    },
    "twotower": {
        "share": 0.12,
        "trainers": 1.5,
        "batch": 13.0,
        "readers": 16.0,
        "reader_rate": 3e4,
    },
    "mmoe": {"share": 0.10, "trainers": 2.0, "batch": 12.0, "readers": 16.0, "reader_rate": 2e4},
    "cnn": {"share": 0.045, "trainers": 1.5, "batch": 8.0, "readers": 4.0, "reader_rate": 600.0},
    "lm": {"share": 0.045, "trainers": 2.5, "batch": 5.0, "readers": 2.0, "reader_rate": 400.0},
}
ARCHETYPE_NAMES = tuple(ARCHETYPES)

_DOMAINS = (
    "ads",
    "feed",
    "reels",
    "search",
    "marketplace",
    "notif",
    "integrity",
    "video",
    "groups",
    "stories",
    "messaging",
    "commerce",
    "jobs",
    "gaming",
    "news",
    "pages",
    "events",
    "watch",
    "shops",
    "creators",
)
_TASKS = {
    "dlrm": ("ctr", "cvr", "engagement", "like", "share", "comment", "click", "install", "quality"),
    "seqrec": ("seqrank", "nextitem", "session", "history", "sequence"),
    "twotower": ("retrieval", "candgen", "embed", "match"),
    "mmoe": ("multitask", "mtml", "ranking", "multiobj"),
    "cnn": ("imagecls", "detect", "ocr", "thumbnail"),
    "lm": ("llm", "summarize", "assistant", "translate"),
}
_PURPOSES = (
    "baseline",
    "prod",
    "exp_lr",
    "exp_dim",
    "sweep",
    "holdout",
    "ablation",
    "retrain",
    "shadow",
    "canary",
    "backfill",
    "eval",
    "tune",
    "distill",
    "warmstart",
    "explore",
    "refresh",
    "hparam",
)
_SYLLABLES = ("ka", "mo", "ri", "ta", "ne", "lu", "sa", "jo", "vi", "de", "pa", "zu", "ha", "li")
NAME_TEMPLATES = 4

SHARDINGS = ("table", "row", "column", "data")
OPTIMIZERS = ("adam", "adagrad", "sgd", "lamb")
PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class Catalog:
    """Model types and families as parallel numpy arrays (index = id)."""

    # model types
    mt_name: np.ndarray
    mt_archetype: np.ndarray  # index into ARCHETYPE_NAMES
    mt_birth: np.ndarray
    mt_death: np.ndarray
    mt_weight: np.ndarray
    mt_vendor_support: np.ndarray  # (n_mt, n_vendors) bool
    mt_definition: np.ndarray  # JSON text
    mt_sparse: np.ndarray
    mt_dense: np.ndarray
    mt_hash: np.ndarray
    mt_seq_len: np.ndarray
    mt_efficiency: np.ndarray  # hidden
    mt_vendor_efficiency: np.ndarray  # hidden, (n_mt, n_vendors)
    # families
    fam_name: np.ndarray
    fam_model_type: np.ndarray
    fam_birth: np.ndarray
    fam_death: np.ndarray
    fam_activity: np.ndarray
    fam_template: np.ndarray
    fam_trainers_log2: np.ndarray
    fam_batch: np.ndarray
    fam_readers_per_trainer: np.ndarray
    fam_devices: np.ndarray
    fam_precision: np.ndarray
    fam_sharding: np.ndarray
    fam_optimizer: np.ndarray
    fam_tensor_parallel: np.ndarray
    fam_pipeline_parallel: np.ndarray
    fam_checkpointing: np.ndarray
    fam_sparse: np.ndarray
    fam_dense: np.ndarray
    fam_hash: np.ndarray
    fam_seq_len: np.ndarray
    fam_training_days: np.ndarray
    fam_rows_per_day: np.ndarray  # hidden: work per training day
    fam_version_lag: np.ndarray
    fam_efficiency: np.ndarray  # hidden
    fam_hw_priority: np.ndarray  # (n_fam, n_hw) random keys; lower = preferred
    fam_pool_size: np.ndarray


def _definition(archetype: str, rng: np.random.Generator) -> dict:
    dim = int(rng.choice([32, 64, 128, 256], p=[0.2, 0.4, 0.3, 0.1]))
    pooling = int(rng.integers(5, 40))
    top = [int(w) for w in rng.choice([2048, 1024, 512], size=1)] + [512, 256, 1]
    if archetype == "dlrm":
        layers = [
            {"op": "mlp", "widths": [512, 256, dim]},
            {"op": "embedding_bag", "dim": dim, "pooling": pooling},
            {"op": "interaction", "kind": str(rng.choice(["dot", "cat"], p=[0.7, 0.3]))},
            {"op": "mlp", "widths": top},
        ]
    elif archetype == "seqrec":
        d = int(rng.choice([128, 256, 512]))
        layers = [
            {"op": "embedding_bag", "dim": dim, "pooling": pooling},
            {"op": "mlp", "widths": [d]},
            {
                "op": "transformer",
                "layers": int(rng.integers(2, 7)),
                "d_model": d,
                "heads": int(rng.choice([4, 8])),
                "ffn_mult": 4,
            },
            {"op": "mlp", "widths": [256, 1]},
        ]
    elif archetype == "twotower":
        layers = [
            {"op": "mlp", "widths": [256, dim]},
            {"op": "embedding_bag", "dim": dim, "pooling": pooling},
            {"op": "interaction", "kind": "cat"},
            {"op": "mlp", "widths": [1024, 512, 256, 128]},
        ]
    elif archetype == "mmoe":
        layers = [
            {"op": "mlp", "widths": [512, dim]},
            {"op": "embedding_bag", "dim": dim, "pooling": pooling},
            {"op": "interaction", "kind": "dot"},
            {
                "op": "experts",
                "num_experts": int(rng.integers(4, 17)),
                "widths": [512, 256],
                "tasks": int(rng.integers(2, 9)),
            },
            {"op": "mlp", "widths": [128, 1]},
        ]
    elif archetype == "cnn":
        layers = [
            {
                "op": "conv_stack",
                "blocks": int(rng.integers(8, 25)),
                "channels": int(rng.choice([64, 128, 256])),
                "image_size": int(rng.choice([128, 224, 320])),
            },
            {"op": "mlp", "widths": [1000]},
        ]
    else:  # lm
        d = int(rng.choice([768, 1024, 1536, 2048]))
        layers = [
            {
                "op": "transformer",
                "layers": int(rng.integers(8, 25)),
                "d_model": d,
                "heads": d // 64,
                "ffn_mult": 4,
            },
            {"op": "lm_head", "vocab": int(rng.choice([32000, 50000, 128000]))},
        ]
    return {"layers": layers}


def _handles(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` handles of two or three syllables. Every handle is looked up in the table of all
    of them (a few thousand) rather than joined per family: a span has most of a million
    families, and joining them one by one took a second of every process's first fleet."""
    parts = rng.integers(0, len(_SYLLABLES), size=(n, 3))
    lengths = rng.integers(2, 4, size=n)
    return _HANDLE_TABLE[_handle_codes(parts, lengths)].tolist()


def _unique_family_names(
    model_type_names: list[str],
    purposes: list[str],
    handles: list[str],
    taken: frozenset[str],
) -> list[str]:
    """``MODEL_TYPE.PURPOSE_HANDLE`` per family, in order; a name already taken (by an earlier
    family or one ``taken`` holds) gets an ``x`` until it is not."""
    names = [
        f"{model_type}.{purpose}_{handle}"
        for model_type, purpose, handle in zip(model_type_names, purposes, handles, strict=True)
    ]
    seen = set(taken)
    add = seen.add  # bound once: the loop runs for most of a million families
    for i, name in enumerate(names):
        if name in seen:
            while name in seen:
                name += "x"
            names[i] = name
        add(name)
    return names


def _handle_codes(parts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The row of ``_HANDLE_TABLE`` for each handle: its three syllables' indices and its
    length (2 or 3), in base ``len(_SYLLABLES)``."""
    base = len(_SYLLABLES)
    return ((parts[:, 0] * base + parts[:, 1]) * base + parts[:, 2]) * 2 + (lengths - 2)


def _handle_table() -> np.ndarray:
    base = len(_SYLLABLES)
    parts = np.stack(np.meshgrid(*[np.arange(base)] * 3, indexing="ij"), -1).reshape(-1, 3)
    parts = np.repeat(parts, 2, axis=0)
    lengths = np.tile([2, 3], len(parts) // 2)
    table = np.empty(len(parts), dtype=object)
    table[_handle_codes(parts, lengths)] = [
        "".join(_SYLLABLES[j] for j in row[:k]) for row, k in zip(parts, lengths, strict=True)
    ]
    return table


_HANDLE_TABLE = _handle_table()


def _head_stratified_normal(rng: np.random.Generator, slot: np.ndarray) -> np.ndarray:
    """Standard normal draws, stratified over the head slots.

    The hundred most popular model types carry most attempts; independent draws for them would
    make fleet-wide statistics swing from seed to seed, so their draws cover the quantiles evenly.
    """
    z = rng.standard_normal(len(slot))
    head = np.flatnonzero(slot < HEAD_SLOTS)
    quantiles = (rng.permutation(len(head)) + rng.uniform(0, 1, len(head))) / len(head)
    z[head] = [statistics.NormalDist().inv_cdf(q) for q in quantiles]
    return z


def _model_type_slots(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slot, birth, death) of every model type that occupies a slot during the span."""
    slots, births, deaths = [], [], []
    for rank in range(N_SLOTS):
        mean_life = np.inf if rank < IMMORTAL_SLOTS else 4000.0 / (1.0 + rank / 20.0)
        birth = -1000.0
        death = rng.exponential(mean_life) if np.isfinite(mean_life) else np.inf
        while birth < SPAN_DAYS:
            slots.append(rank)
            births.append(birth)
            deaths.append(death)
            birth, death = death, death + rng.exponential(mean_life)
    return np.array(slots), np.floor(births), np.floor(np.minimum(deaths, 10 * SPAN_DAYS))


def _successor_slots(
    rng: np.random.Generator, tail_death: np.ndarray, end: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slot, birth, death) of the model types that take over a slot before ``end``: each slot's
    chain goes on from the death of its last occupant, as in the first block."""
    slots, births, deaths = [], [], []
    for rank in range(N_SLOTS):
        birth = tail_death[rank]
        if not np.isfinite(birth):  # the occupant never retires (the head slots)
            continue
        mean_life = 4000.0 / (1.0 + rank / 20.0)
        death = birth + rng.exponential(mean_life)
        while birth < end:
            slots.append(rank)
            births.append(birth)
            deaths.append(death)
            birth, death = death, death + rng.exponential(mean_life)
    return (
        np.array(slots, dtype=np.int64),
        np.floor(np.array(births, dtype=float)),
        np.floor(np.array(deaths, dtype=float)),
    )


@dataclass(frozen=True)
class _Inheritance:
    """What a block hands the next: the model types and families still alive at its end (with the
    model types' slots and launch habits, which the catalog does not keep), each slot's last
    death, and the names already taken."""

    catalog: Catalog  # only what lives past the block's end
    slot: np.ndarray
    habits: dict[str, np.ndarray]
    tail_death: np.ndarray  # (N_SLOTS,) when each slot's last occupant retires (inf: never)
    model_type_names: frozenset[str]  # every model type name so far: never reused
    # the ending block's family names, of the model types that live on: a new family of those
    # takes another, so a name comes back, if ever, more than SPAN_DAYS after its family retired
    family_names: frozenset[str]


def _join(carried: np.ndarray | None, new: np.ndarray) -> np.ndarray:
    return new if carried is None else np.concatenate([carried, new])


def build_catalog(seed: int, block: int = 0) -> Catalog:
    """Every model type and family of one block of ``SPAN_DAYS`` days for one seed (block 0: the
    span from its start); deterministic and day-independent.

    Block 0 is the frozen, calibrated span. Each later block starts from what was alive at the end
    of the block before it (the same model types and families, with all their draws) and adds the
    model types and families born during it, drawn the same way from a seed derived from the
    block's index; so a later block costs building every block before it, a few seconds each."""
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 0:
        raise ValueError(f"block={block!r} is not a non-negative integer")
    inherited = _inheritance(seed, int(block)) if block else None
    return _build_block(seed, int(block), inherited).catalog


_INHERITED: dict[tuple[int, int], _Inheritance] = {}  # the last few, to go on from
_KEEP_INHERITED = 2
_INHERITED_LOCK = threading.Lock()


def _inheritance(seed: int, block: int) -> _Inheritance:
    """What ``block`` inherits: the blocks before it are built one after the other (from the
    latest one already handed over) and dropped."""
    with _INHERITED_LOCK:  # threads building fleets at once share the hand-overs
        known = max((b for s, b in _INHERITED if s == seed and b <= block), default=0)
        inherited = _INHERITED.get((seed, known))
        for previous in range(known, block):
            inherited = _build_block(seed, previous, inherited).hand_over()
            _INHERITED[seed, previous + 1] = inherited
            while len(_INHERITED) > _KEEP_INHERITED:
                del _INHERITED[next(iter(_INHERITED))]
    assert inherited is not None
    return inherited


@dataclass(frozen=True)
class _Block:
    catalog: Catalog
    slot: np.ndarray  # per model type of the catalog
    habits: dict[str, np.ndarray]  # per model type of the catalog
    end: int  # the block's first day after it
    model_type_names: frozenset[str]  # every model type name so far

    def hand_over(self) -> _Inheritance:
        """What lives past the block's end. The span capped deaths at ``10 * SPAN_DAYS``; a
        model type of a slot that never retires lives on past the cap."""
        catalog, slot = self.catalog, self.slot
        death = np.where(slot < IMMORTAL_SLOTS, np.inf, catalog.mt_death)
        tail_death = np.full(N_SLOTS, -np.inf)
        np.maximum.at(tail_death, slot, death)
        keep_mt = np.flatnonzero(death > self.end)
        keep_fam = np.flatnonzero(catalog.fam_death > self.end)
        renumber = np.full(len(slot), -1)
        renumber[keep_mt] = np.arange(len(keep_mt))
        fields = {}
        for field in Catalog.__dataclass_fields__:
            values = getattr(catalog, field)
            fields[field] = values[keep_mt] if field.startswith("mt_") else values[keep_fam]
        fields["mt_death"] = death[keep_mt]
        fields["fam_model_type"] = renumber[fields["fam_model_type"]]
        assert (fields["fam_model_type"] >= 0).all()  # a living family's model type lives too
        return _Inheritance(
            catalog=Catalog(**fields),
            slot=slot[keep_mt],
            habits={key: values[keep_mt] for key, values in self.habits.items()},
            tail_death=tail_death,
            model_type_names=self.model_type_names,
            family_names=frozenset(catalog.fam_name[np.isin(catalog.fam_model_type, keep_mt)]),
        )


def _build_block(seed: int, block: int, inherited: _Inheritance | None) -> _Block:
    """One block's catalog, inherited model types and families first (in their order), with what
    the next block needs of it. Block 0's draws are the span's as they were frozen, in their
    order."""
    start, end = block * SPAN_DAYS, (block + 1) * SPAN_DAYS
    rng = np.random.default_rng([seed, 7001] if block == 0 else [seed, 7001, block])
    carried = None if inherited is None else inherited.catalog
    if inherited is None:
        slot, mt_birth, mt_death = _model_type_slots(rng)
    else:
        slot, mt_birth, mt_death = _successor_slots(rng, inherited.tail_death, end)
    n_mt = len(slot)  # the model types born in this block (all of them in block 0)
    weight = (slot + ZIPF_OFFSET) ** -ZIPF_EXPONENT
    shares = np.array([a["share"] for a in ARCHETYPES.values()])
    archetype = rng.choice(len(ARCHETYPES), size=n_mt, p=shares)
    # the most popular model types are all recommendation models, in fixed proportions so that
    # fleet-wide statistics do not hinge on which archetypes a seed puts in the head
    head = np.flatnonzero(slot < HEAD_SLOTS)
    counts = np.round(shares[:4] / shares[:4].sum() * len(head)).astype(int)
    counts[0] += len(head) - counts.sum()
    archetype[head] = rng.permutation(np.repeat(np.arange(4), counts))

    used: set[str] = set() if inherited is None else set(inherited.model_type_names)
    names, definitions = [], []
    for i in range(n_mt):
        arch = ARCHETYPE_NAMES[archetype[i]]
        stem = f"{rng.choice(_DOMAINS)}_{rng.choice(_TASKS[arch])}_{arch}"
        version = int(rng.integers(1, 10))
        while f"{stem}_v{version}" in used:
            version += 1
        name = f"{stem}_v{version}"
        used.add(name)
        names.append(name)
        definitions.append(json.dumps(_definition(arch, rng), separators=(",", ":")))

    is_lm = archetype == ARCHETYPE_NAMES.index("lm")
    is_cnn = archetype == ARCHETYPE_NAMES.index("cnn")
    dense_inputs = ~(is_lm | is_cnn)
    mt_sparse = np.where(
        dense_inputs, np.clip(np.round(rng.lognormal(np.log(80), 0.5, n_mt)), 8, 800), 0
    )
    mt_dense = np.where(
        dense_inputs, np.clip(np.round(rng.lognormal(np.log(300), 0.7, n_mt)), 10, 4000), 0
    )
    mt_hash = np.where(dense_inputs, np.round(10 ** rng.uniform(6.0, 8.7, n_mt)), 0)
    seq_arch = archetype == ARCHETYPE_NAMES.index("seqrec")
    mt_seq = np.where(seq_arch, rng.choice([64, 128, 256, 512], n_mt), 0)
    mt_seq = np.where(is_lm, rng.choice([512, 1024, 2048], n_mt), mt_seq)

    support = np.ones((n_mt, len(VENDORS)), dtype=bool)
    support[:, 1] = rng.random(n_mt) < 0.45
    support[:, 2] = rng.random(n_mt) < 0.22
    support[:, 3] = rng.random(n_mt) < 0.22
    vendor_eff = np.ones((n_mt, len(VENDORS)))
    vendor_eff[:, 1] = rng.lognormal(np.log(0.85), 0.15, n_mt)
    vendor_eff[:, 2] = rng.lognormal(np.log(0.75), 0.2, n_mt)
    vendor_eff[:, 3] = rng.lognormal(np.log(0.8), 0.2, n_mt)
    mt_eff = np.exp(MODEL_TYPE_EFFICIENCY_SIGMA * _head_stratified_normal(rng, slot))

    # every model type of the block from here on: the inherited ones first, then the new ones
    def model_types(field: str, new: np.ndarray) -> np.ndarray:
        return _join(None if carried is None else getattr(carried, field), new)

    n_carried = 0 if carried is None else len(carried.mt_name)
    all_slot = _join(None if inherited is None else inherited.slot, slot)
    all_names = model_types("mt_name", np.array(names, dtype=object))
    archetype_all = model_types("mt_archetype", archetype)
    birth_all = model_types("mt_birth", mt_birth)
    death_all = model_types("mt_death", mt_death)
    weight_all = model_types("mt_weight", weight)
    is_lm_all = archetype_all == ARCHETYPE_NAMES.index("lm")
    is_cnn_all = archetype_all == ARCHETYPE_NAMES.index("cnn")
    dense_all = ~(is_lm_all | is_cnn_all)
    sparse_all = model_types("mt_sparse", mt_sparse)
    dense_count_all = model_types("mt_dense", mt_dense)
    hash_all = model_types("mt_hash", mt_hash)
    seq_all = model_types("mt_seq_len", mt_seq)

    # families: a stock alive at the span start (or at the type's birth) plus a birth process;
    # a model type inherited from the block before keeps its living families as its stock
    alive_target = np.maximum(
        1, np.round(MAX_FAMILIES_ALIVE * (weight_all / weight_all.max()) ** 0.75)
    )
    fam_mt, fam_birth, fam_death = [], [], []
    for i in range(len(all_slot)):
        n0 = int(alive_target[i])
        first = max(birth_all[i], float(start))
        last = min(death_all[i], end)
        if last <= first and birth_all[i] >= start:
            continue
        if i < n_carried:
            stock_birth = stock_death = np.zeros(0)
        else:
            stock_birth = (
                np.full(n0, birth_all[i]) if birth_all[i] >= start else -rng.uniform(1, 120, n0)
            )
            stock_death = first + rng.exponential(FAMILY_LIFETIME_DAYS, n0)
        n_new = rng.poisson(n0 / FAMILY_LIFETIME_DAYS * max(last - first, 0.0))
        new_birth = np.floor(rng.uniform(first, max(last, first + 1), n_new))
        new_death = new_birth + rng.exponential(FAMILY_LIFETIME_DAYS, n_new)
        births = np.concatenate([stock_birth, new_birth])
        fam_mt.append(np.full(len(births), i))
        fam_birth.append(births)
        fam_death.append(np.minimum(np.concatenate([stock_death, new_death]), death_all[i]))
    f_mt = np.concatenate(fam_mt)
    f_birth = np.floor(np.concatenate(fam_birth))
    f_death = np.floor(np.concatenate(fam_death))
    n_fam = len(f_mt)  # the families born in this block (with the span's first stock in block 0)
    f_arch = archetype_all[f_mt]

    handles = _handles(rng, n_fam)
    purposes = rng.integers(0, len(_PURPOSES), n_fam)
    fam_names = _unique_family_names(
        all_names[f_mt].tolist(),
        [_PURPOSES[p] for p in purposes.tolist()],
        handles,
        frozenset() if inherited is None else inherited.family_names,
    )

    def inherited_habit(key: str) -> np.ndarray | None:
        return None if inherited is None else inherited.habits[key]

    habits: dict[str, np.ndarray] = {}
    arch_trainers = np.array([a["trainers"] for a in ARCHETYPES.values()])
    arch_batch = np.array([a["batch"] for a in ARCHETYPES.values()])
    arch_readers = np.array([a["readers"] for a in ARCHETYPES.values()])
    # model-type habits, then a family's own deviation from them
    habits["trainers"] = _join(
        inherited_habit("trainers"),
        arch_trainers[archetype] + 0.8 * _head_stratified_normal(rng, slot),
    )
    habits["batch"] = _join(
        inherited_habit("batch"), arch_batch[archetype] + 1.0 * _head_stratified_normal(rng, slot)
    )
    trainers_log2 = np.clip(np.round(habits["trainers"][f_mt] + rng.normal(0, 0.45, n_fam)), 0, 7)
    # batch sizes people pick: eight "round" values per octave (1024, 1152, 1280, ...)
    batch_log2 = np.clip(habits["batch"][f_mt] + rng.normal(0, BATCH_SPREAD_LOG2, n_fam), 2, 16)
    octave = np.floor(batch_log2)
    batch = 2**octave * (1.0 + np.round((2 ** (batch_log2 - octave) - 1.0) * 8) / 8)
    batch = np.maximum(np.round(batch), 1)

    # settings a model type fixes for most of its families; a few families deviate
    def habit(key: str, mt_values: np.ndarray, fam_values: np.ndarray) -> np.ndarray:
        habits[key] = _join(inherited_habit(key), mt_values)
        return np.where(rng.random(n_fam) < FAMILY_DEVIATION, fam_values, habits[key][f_mt])

    precision = habit(
        "precision",
        rng.choice(len(PRECISIONS), n_mt, p=[0.2, 0.7, 0.1]),
        rng.choice(len(PRECISIONS), n_fam, p=[0.2, 0.7, 0.1]),
    )
    precision = np.where(
        is_lm_all[f_mt] | is_cnn_all[f_mt], np.minimum(precision, 1) + (precision == 2), precision
    )
    precision = np.where((is_lm_all | is_cnn_all)[f_mt] & (precision == 0), 1, precision)
    tp = np.where(is_lm_all[f_mt], rng.choice([1, 2, 4, 8], n_fam, p=[0.4, 0.3, 0.2, 0.1]), 1)
    pp = np.where(is_lm_all[f_mt], rng.choice([1, 2, 4], n_fam, p=[0.6, 0.3, 0.1]), 1)
    sharding_p = [0.5, 0.25, 0.15, 0.1]
    sharding = habit(
        "sharding", rng.choice(4, n_mt, p=sharding_p), rng.choice(4, n_fam, p=sharding_p)
    )
    sharding = np.where(dense_all[f_mt], sharding, 3)
    optimizer_p = [0.35, 0.5, 0.1, 0.05]
    optimizer = habit(
        "optimizer", rng.choice(4, n_mt, p=optimizer_p), rng.choice(4, n_fam, p=optimizer_p)
    )
    optimizer = np.where(dense_all[f_mt], optimizer, np.where(optimizer == 3, 3, 0))
    devices_p = [0.8, 0.1, 0.07, 0.03]
    devices = habit(
        "devices",
        rng.choice([8, 4, 2, 1], n_mt, p=devices_p),
        rng.choice([8, 4, 2, 1], n_fam, p=devices_p),
    )

    # the new families' fields, drawn in this order
    new_families = {
        "fam_name": np.array(fam_names, dtype=object),
        "fam_model_type": f_mt,
        "fam_birth": f_birth,
        "fam_death": f_death,
        "fam_activity": rng.lognormal(0.0, 0.8, n_fam),
        "fam_template": rng.integers(0, NAME_TEMPLATES, n_fam),
        "fam_trainers_log2": trainers_log2,
        "fam_batch": batch,
        "fam_readers_per_trainer": arch_readers[f_arch] * rng.lognormal(0.0, 0.5, n_fam),
        "fam_devices": devices,
        "fam_precision": precision,
        "fam_sharding": sharding,
        "fam_optimizer": optimizer,
        "fam_tensor_parallel": tp,
        "fam_pipeline_parallel": pp,
        "fam_checkpointing": is_lm_all[f_mt] & (rng.random(n_fam) < 0.5),
        "fam_sparse": np.round(sparse_all[f_mt] * rng.lognormal(0, 0.15, n_fam)),
        "fam_dense": np.round(dense_count_all[f_mt] * rng.lognormal(0, 0.15, n_fam)),
        "fam_hash": np.round(hash_all[f_mt] * rng.lognormal(0, 0.3, n_fam)),
        "fam_seq_len": np.where(
            seq_all[f_mt] > 0,
            seq_all[f_mt] * rng.choice([0.5, 1.0, 2.0], n_fam, p=[0.2, 0.6, 0.2]),
            0,
        ),
        "fam_training_days": rng.choice([1, 3, 7, 14, 30, 60, 90], n_fam),
        "fam_rows_per_day": 10 ** rng.normal(7.0, 0.6, n_fam),
        "fam_version_lag": rng.choice([0, 1, 2, 3], n_fam, p=[0.6, 0.2, 0.12, 0.08]),
        "fam_efficiency": rng.lognormal(0.0, 0.15, n_fam),
        "fam_hw_priority": rng.random((n_fam, N_HARDWARE_TYPES)),
        "fam_pool_size": rng.integers(2, 9, n_fam),
    }
    catalog = Catalog(
        mt_name=all_names,
        mt_archetype=archetype_all,
        mt_birth=birth_all,
        mt_death=death_all,
        mt_weight=weight_all,
        mt_vendor_support=model_types("mt_vendor_support", support),
        mt_definition=model_types("mt_definition", np.array(definitions, dtype=object)),
        mt_sparse=sparse_all,
        mt_dense=dense_count_all,
        mt_hash=hash_all,
        mt_seq_len=seq_all,
        mt_efficiency=model_types("mt_efficiency", mt_eff),
        mt_vendor_efficiency=model_types("mt_vendor_efficiency", vendor_eff),
        **{
            field: _join(None if carried is None else getattr(carried, field), values)
            for field, values in new_families.items()
        },
    )
    return _Block(catalog, all_slot, habits, end, frozenset(used))
