"""A digest of data frames from bytes this module defines, the same under any polars version.

``polars.DataFrame.hash_rows`` is documented as stable only within one polars version, so a
digest built on it changes with an upgrade: every landed day would look changed and every night
would train and register again. ``frame_digest`` is the one digest of frames in the pipeline (the
landing's ``content_sha256`` and a night's fingerprint): SHA-256 over this encoding, version 1.

- ``b"leap-frame-digest/1\\n"``, then for each frame, in order: ``b"frame"``, its height and its
  width, then each column in order: its name, its type tag, its values.
- Integers are unsigned 64-bit little-endian; a *field* is its byte length then its bytes.
- A name is the UTF-8 field of the column name. A type tag is the ASCII field of a name defined
  here (``TAGS``: ``int64``, ``float64``, ``str``, ``date``, ``datetime[us,UTC]``,
  ``list<str>``, ``struct{a:int64,b:str}``...), never polars' spelling of the type.
- Values: the null mask, a byte 0 when no value is null, else a byte 1 and then one byte per row,
  1 where the value is null; then by kind:
  signed integers as int64 and unsigned as uint64 (little-endian, null as 0); floats as
  little-endian float64, null as 0.0 and every NaN as the one quiet NaN ``0x7ff8000000000000``;
  booleans as one byte 0/1 (null 0); dates, datetimes, durations and times as their int64 count
  of days or of the type's unit since the epoch (since midnight for a time), null 0; strings (and
  categoricals, enums) as the int64 UTF-8 byte length of each row (null 0) and then the field of
  all non-null values' UTF-8 bytes joined; binary the same with the raw bytes; lists and arrays as
  the int64 length of each row (null 0) and then the values of all non-empty rows, flattened, as
  a column of the inner type; a struct as each field's values, in order, as columns (null in
  the rows where the struct is null).
- A type with no encoding here (decimal, object) is a ``TypeError`` naming the column.

Rows are digested in their order, as given: equal frames in the same order give the same
digest, and a changed value, name, type, null or row order gives another.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import polars as pl

VERSION = b"leap-frame-digest/1\n"

# polars' types -> the tag this encoding names them by (part of the digested bytes: never change
# an entry; a new type gets a new name)
TAGS: dict[type[pl.DataType], str] = {
    pl.Int8: "int8",
    pl.Int16: "int16",
    pl.Int32: "int32",
    pl.Int64: "int64",
    pl.UInt8: "uint8",
    pl.UInt16: "uint16",
    pl.UInt32: "uint32",
    pl.UInt64: "uint64",
    pl.Float32: "float32",
    pl.Float64: "float64",
    pl.Boolean: "bool",
    pl.String: "str",
    pl.Categorical: "str",
    pl.Enum: "str",
    pl.Binary: "bin",
    pl.Date: "date",
    pl.Time: "time",
    pl.Null: "null",
}
SIGNED = {"int8", "int16", "int32", "int64"}
UNSIGNED = {"uint8", "uint16", "uint32", "uint64"}
TEMPORAL = ("date", "time", "datetime", "duration")


def frame_digest(*frames: pl.DataFrame) -> str:
    """SHA-256 (hex) of ``frames`` in the encoding above: the same bytes under any polars."""
    digest = hashlib.sha256(VERSION)
    for frame in frames:
        digest.update(b"frame" + _u64(frame.height) + _u64(frame.width))
        for column in frame.get_columns():
            tag = type_tag(column.dtype, column.name)
            digest.update(_field(column.name.encode()) + _field(tag.encode()))
            _values(digest, column, tag)
    return digest.hexdigest()


def type_tag(dtype: pl.DataType, column: str = "") -> str:
    """This encoding's name for ``dtype``; a ``TypeError`` naming ``column`` when it has none."""
    base = dtype.base_type()
    if base in TAGS:
        return TAGS[base]
    if base in (pl.Datetime, pl.Duration):
        zone = f",{dtype.time_zone}" if base == pl.Datetime and dtype.time_zone else ""
        name = "datetime" if base == pl.Datetime else "duration"
        return f"{name}[{dtype.time_unit}{zone}]"
    if base in (pl.List, pl.Array):
        return f"list<{type_tag(dtype.inner, column)}>"
    if base == pl.Struct:
        inner = ",".join(f"{f.name}:{type_tag(f.dtype, column)}" for f in dtype.fields)
        return "struct{" + inner + "}"
    raise TypeError(f"column {column!r}: type {dtype} has no encoding in the frame digest")


def _u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def _field(data: bytes) -> bytes:
    return _u64(len(data)) + data


def _array(digest, values: pl.Series | np.ndarray, dtype: str) -> None:
    """Update ``digest`` with ``values`` as a contiguous array of ``dtype`` (byte order and
    width explicit: ``<i8``, ``<u8``, ``<f8``, ``u1``), without another copy of the bytes."""
    array = values.to_numpy() if isinstance(values, pl.Series) else values
    digest.update(np.ascontiguousarray(array, dtype=dtype))


def _values(digest, column: pl.Series, tag: str) -> None:
    """Update ``digest`` with ``column``'s null mask and values, by ``tag`` (see the module)."""
    if column.null_count():
        digest.update(b"\x01")
        _array(digest, column.is_null(), "u1")
    else:
        digest.update(b"\x00")
    kind = tag.split("[", 1)[0].split("<", 1)[0].split("{", 1)[0]
    if kind == "null":
        return
    if kind in SIGNED or kind in TEMPORAL:
        physical = column.to_physical() if kind in TEMPORAL else column
        _array(digest, physical.cast(pl.Int64).fill_null(0), "<i8")
    elif kind in UNSIGNED:
        _array(digest, column.cast(pl.UInt64).fill_null(0), "<u8")
    elif kind.startswith("float"):
        values = column.cast(pl.Float64).fill_null(0.0).to_numpy()
        nan = np.isnan(values)
        _array(digest, np.where(nan, np.nan, values) if nan.any() else values, "<f8")
    elif kind == "bool":
        _array(digest, column.fill_null(False).cast(pl.UInt8), "u1")
    elif kind == "str":
        text = column.cast(pl.String)
        _array(digest, text.str.len_bytes().cast(pl.Int64).fill_null(0), "<i8")
        joined = (text.str.join("", ignore_nulls=True).item() or "").encode()
        digest.update(_u64(len(joined)))
        digest.update(joined)
    elif kind == "bin":
        values = column.to_list()
        _array(digest, np.array([0 if v is None else len(v) for v in values]), "<i8")
        digest.update(_field(b"".join(v for v in values if v is not None)))
    elif kind == "list":
        as_list = column
        if column.dtype.base_type() == pl.Array:
            as_list = column.cast(pl.List(column.dtype.inner))
        lengths = as_list.list.len().fill_null(0).cast(pl.Int64)
        _array(digest, lengths, "<i8")
        inner = as_list.filter(lengths > 0).explode()
        _values(digest, inner, type_tag(inner.dtype))
    else:  # struct: a null row's fields count as null, whatever polars stores under it
        for field in column.dtype.fields:
            values = column.struct.field(field.name)
            if column.null_count():
                values = values.zip_with(column.is_not_null(), values.clear(column.len()))
            _values(digest, values, type_tag(values.dtype))
