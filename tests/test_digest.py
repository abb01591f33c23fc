"""The frame digest: bytes the project defines, pinned, so a library upgrade cannot change it, and
the one digest behind a landing's ``content_sha256`` and a night's fingerprint."""

import datetime as dt
import hashlib
import math
import struct

import polars as pl
import pytest

from leap_pipeline.data.digest import frame_digest

# the digest of FIXED below; a change of this value makes every landed day look changed and every
# night train and register again: only ever with a new encoding version (digest.VERSION)
PINNED = "2070ac44b161d90a182b8e3d8590d27aa122421630d0845929f8b53457942d1d"


def fixed_frame() -> pl.DataFrame:
    """Every kind of column the pipeline's frames hold, with nulls, NaN and non-ASCII text."""
    return pl.DataFrame(
        {
            "id": ["a-1", None, "𝔽é", ""],
            "n": pl.Series([1, None, -3, 2**40], dtype=pl.Int64),
            "small": pl.Series([1, 2, 3, 4], dtype=pl.Int32),
            "u": pl.Series([0, 2**64 - 1, None, 7], dtype=pl.UInt64),
            "x": [0.5, None, float("nan"), -0.0],
            "ok": [True, None, False, True],
            "ds": [dt.date(2026, 1, 1), None, dt.date(1969, 12, 31), dt.date(2027, 12, 31)],
            "at": pl.Series(
                [
                    dt.datetime(2026, 1, 1, 12),
                    None,
                    dt.datetime(2026, 1, 2),
                    dt.datetime(1970, 1, 1),
                ],
                dtype=pl.Datetime("us"),
            ),
            "tags": [["x", "y"], [], None, ["𝔽"]],
            "kind": pl.Series(["p", "q", None, "p"], dtype=pl.Categorical),
            "meta": [{"k": 1, "v": "a"}, None, {"k": None, "v": "b"}, {"k": 2, "v": None}],
            "utc": pl.Series([dt.datetime(2026, 1, 1), None, None, dt.datetime(2026, 6, 1)])
            .dt.replace_time_zone("UTC")
            .dt.cast_time_unit("ms"),
        }
    )


def test_the_digest_of_a_fixed_frame_is_pinned():
    assert frame_digest(fixed_frame()) == PINNED


def test_the_bytes_are_the_documented_encoding():
    """A small frame of each common kind of column, encoded by hand as the module describes."""

    def u64(n):
        return struct.pack("<Q", n)

    def field(data):
        return u64(len(data)) + data

    frame = pl.DataFrame(
        {
            "n": [7, None],
            "s": ["é", "ab"],
            "x": [float("nan"), None],
            "ok": [True, None],
            "d": [dt.date(1970, 1, 2), None],
            "l": [["a"], None],
        }
    )
    nulls = b"\x01\x00\x01"  # the second row is null
    expected = (
        b"leap-frame-digest/1\n" + b"frame" + u64(2) + u64(6)
        + field(b"n") + field(b"int64") + nulls + struct.pack("<qq", 7, 0)
        + field(b"s") + field(b"str") + b"\x00" + struct.pack("<qq", 2, 2) + field("éab".encode())
        + field(b"x") + field(b"float64") + nulls + u64(0x7FF8000000000000) + struct.pack("<d", 0)
        + field(b"ok") + field(b"bool") + nulls + b"\x01\x00"
        + field(b"d") + field(b"date") + nulls + struct.pack("<qq", 1, 0)
        + field(b"l") + field(b"list<str>") + nulls + struct.pack("<qq", 1, 0)
        + b"\x00" + struct.pack("<q", 1) + field(b"a")  # the flattened values: "a"
    )  # fmt: skip
    assert frame_digest(frame) == hashlib.sha256(expected).hexdigest()


def test_the_digest_follows_content_not_storage():
    frame = fixed_frame()
    chunked = pl.concat([frame.head(2), frame.tail(2)], rechunk=False)
    assert chunked.n_chunks() == 2 and frame_digest(chunked) == frame_digest(frame)
    nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]  # another NaN payload
    assert math.isnan(nan)
    with_nan = frame.with_columns(x=pl.Series([0.5, None, nan, -0.0]))
    assert frame_digest(with_nan) == frame_digest(frame)
    assert frame_digest(frame, frame) != frame_digest(frame)  # frames count, in order


@pytest.mark.parametrize(
    "change",
    [
        lambda f: f.with_columns(n=pl.Series([1, 0, -3, 2**40])),  # a null became 0
        lambda f: f.with_columns(small=pl.col("small").cast(pl.Int64)),  # same values, new type
        lambda f: f.rename({"x": "y"}),
        lambda f: f.reverse(),
        lambda f: f.with_columns(id=pl.Series(["a-1", None, "𝔽é", None])),  # "" became null
        lambda f: f.with_columns(tags=pl.Series([["x"], ["y"], None, ["𝔽"]])),  # one boundary
        lambda f: f.with_columns(x=pl.Series([0.5, None, float("nan"), 0.0])),  # -0.0 -> 0.0
        lambda f: f.select(reversed(f.columns)),
    ],
)
def test_any_change_of_value_null_type_name_or_order_changes_the_digest(change):
    assert frame_digest(change(fixed_frame())) != frame_digest(fixed_frame())


def test_a_type_without_an_encoding_is_refused_by_name():
    frame = pl.DataFrame({"price": pl.Series(["1.5"]).cast(pl.Decimal(10, 2))})
    with pytest.raises(TypeError, match="'price'"):
        frame_digest(frame)


def test_the_landing_digest_and_the_night_fingerprint_do_not_follow_polars_row_hash(monkeypatch):
    """What a polars upgrade does to ``hash_rows`` (documented stable within one version only)
    changes neither a landing's ``content_sha256`` nor a night's fingerprint."""
    from leap_pipeline.data.feature_table import land_day
    from leap_pipeline.data.sources import SimulatorSource
    from leap_pipeline.modeling.training import night_fingerprint
    from leap_pipeline.orchestration.data_assets import source_log_row
    from leap_pipeline.settings import TrainingSettings

    day = dt.date(2026, 1, 5)
    landed = land_day(SimulatorSource(seed=3, scale=0.02).read_day(day), day)
    settings = TrainingSettings(profile="quick")

    def digests():
        return (
            source_log_row("src", landed)["content_sha256"][0],
            night_fingerprint(settings, landed.attempts, landed.allocations),
        )

    before = digests()
    monkeypatch.setattr(
        pl.DataFrame,
        "hash_rows",
        lambda self, *a, **k: pl.Series(range(self.height), dtype=pl.UInt64),
    )
    assert digests() == before
    assert before[0] == frame_digest(landed.attempts, landed.allocations, landed.hardware_specs)
