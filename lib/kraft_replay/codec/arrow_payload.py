"""Arrow types of the bronze payload columns, a columnar builder for them, and its inverse.

Rule (docs/design.md, "Common payload columns"): one nullable struct column per metadata record
type with a non-empty body, named by the type in snake_case without ``_record``, in api-key order.
A struct holds the union of the type's fields over all its versions, in schema order, typed:
int8/16/32/64 as such, uint16 as int32 (uint32 as int64), float64 as double, uuid as string
(Kafka text form), bytes as binary, bool as bool, string as string, arrays as lists, nested
structs as structs. Fields absent from a record's version are null. Exactly one payload column
is non-null per row (none for NoOpRecord / EndTransactionRecord, and none for a missing record).

Control-record value columns (``leader_change``, ``snapshot_header``, ``snapshot_footer``,
``kraft_version``, ``kraft_voters``) follow the same type rules.

Unknown tagged fields (``"_unknown_tagged"``) have no Arrow column; they survive only in the
raw bytes of the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from kraft_replay.codec.records import MetadataRecord
from kraft_replay.codec.schema import CONTROL_SCHEMAS, RECORD_TYPES, FieldSpec, MessageSchema

__all__ = [
    "CONTROL_COLUMN_BY_SCHEMA",
    "CONTROL_FIELDS",
    "CONTROL_STRUCT_TYPES",
    "PAYLOAD_COLUMN_BY_API_KEY",
    "PAYLOAD_FIELDS",
    "PAYLOAD_STRUCT_TYPES",
    "PayloadError",
    "arrow_type",
    "build_control_columns",
    "build_payload_columns",
    "build_struct_array",
    "null_columns",
    "records_from_payload_columns",
    "struct_type",
    "struct_rows_to_data",
]

_SCALARS: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "uint16": pa.int32(),
    "int32": pa.int32(),
    "uint32": pa.int64(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "uuid": pa.string(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "records": pa.binary(),
}


class PayloadError(ValueError):
    """Arrow payload rows could not be turned back into records."""


def _struct_of(fields: Sequence[FieldSpec]) -> pa.StructType:
    return pa.struct([pa.field(f.snake, arrow_type(f), nullable=True) for f in fields])


def arrow_type(f: FieldSpec) -> pa.DataType:
    """Arrow type of one field (union of its sub-fields over all versions for structs)."""
    if f.fields is not None:
        st = _struct_of(f.fields)
        return pa.list_(st) if f.is_array else st
    et = f.element_type
    try:
        base = _SCALARS[et]
    except KeyError:
        raise ValueError(f"field {f.name}: no Arrow type for {f.type!r}") from None
    return pa.list_(base) if f.is_array else base


def struct_type(schema: MessageSchema) -> pa.StructType:
    """Struct type of a whole message: the union of its fields over all versions, schema order."""
    return _struct_of(schema.fields)


def _control_column(name: str) -> str:
    return {
        "LeaderChangeMessage": "leader_change",
        "SnapshotHeaderRecord": "snapshot_header",
        "SnapshotFooterRecord": "snapshot_footer",
        "KRaftVersionRecord": "kraft_version",
        "VotersRecord": "kraft_voters",
    }[name]


#: Payload column name per api key (record types with a body only).
PAYLOAD_COLUMN_BY_API_KEY: dict[int, str] = {k: rt.column for k, rt in RECORD_TYPES.items() if rt.has_body}
#: Struct type per payload column.
PAYLOAD_STRUCT_TYPES: dict[str, pa.StructType] = {
    rt.column: struct_type(rt.schema) for rt in RECORD_TYPES.values() if rt.has_body
}
#: The payload columns, in api-key order.
PAYLOAD_FIELDS: list[pa.Field] = [
    pa.field(col, PAYLOAD_STRUCT_TYPES[col], nullable=True) for col in PAYLOAD_COLUMN_BY_API_KEY.values()
]

#: Control column name per control schema name.
CONTROL_COLUMN_BY_SCHEMA: dict[str, str] = {name: _control_column(name) for name in CONTROL_SCHEMAS}
#: Struct type per control column.
CONTROL_STRUCT_TYPES: dict[str, pa.StructType] = {
    CONTROL_COLUMN_BY_SCHEMA[name]: struct_type(s) for name, s in CONTROL_SCHEMAS.items()
}
#: Control struct columns in control-type order (leader_change ... kraft_voters).
CONTROL_FIELDS: list[pa.Field] = [
    pa.field(col, CONTROL_STRUCT_TYPES[col], nullable=True)
    for col in ("leader_change", "snapshot_header", "snapshot_footer", "kraft_version", "kraft_voters")
]


def _struct_array_dense(stype: pa.StructType, rows: Sequence[dict[str, Any]]) -> pa.StructArray:
    """A non-null struct array of ``rows`` (one type's data dicts; keys not in ``stype`` are ignored).

    pyarrow's C conversion of the dicts of one type at once was measured ~15-20% faster than
    collecting one Python list per leaf and assembling with ``StructArray.from_arrays``
    (PartitionChange/Partition/RegisterBroker rows, 0.8M vs 1.0M rows/s), so it is used here;
    the rows of all other types are never touched (see :func:`_expand`).
    """
    return pa.array(rows, type=stype)


def _expand(dense: pa.Array, positions: np.ndarray, n: int) -> pa.Array:
    """Place ``dense[i]`` at row ``positions[i]`` of a length-``n`` array, nulls elsewhere."""
    if len(positions) == n:
        return dense
    idx = np.full(n, -1, dtype=np.int64)
    idx[positions] = np.arange(len(positions), dtype=np.int64)
    indices = pa.array(idx, mask=idx < 0)
    return dense.take(indices)


def null_columns(types: Sequence[pa.DataType], n: int) -> list[pa.Array]:
    """All-null arrays of length ``n``, one per type, every buffer a slice of one shared zeroed buffer
    (``pa.nulls`` gives each array its own, e.g. ~10 MB a payload struct column per million rows:
    most rows of a metadata log fill none of the 23 payload columns)."""
    zero = pa.py_buffer(np.zeros(8 * n + 16, dtype=np.uint8))

    def null(t: pa.DataType) -> pa.Array:
        if pa.types.is_struct(t):
            return pa.StructArray.from_buffers(t, n, [zero], null_count=n,
                                               children=[null(t.field(i).type) for i in range(t.num_fields)])
        if pa.types.is_list(t):
            return pa.Array.from_buffers(t, n, [zero, zero], null_count=n, children=[pa.array([], t.value_type)])
        if pa.types.is_string(t) or pa.types.is_binary(t):
            return pa.Array.from_buffers(t, n, [zero, zero, zero], null_count=n)
        if pa.types.is_primitive(t):
            return pa.Array.from_buffers(t, n, [zero, zero], null_count=n)
        return pa.nulls(n, t)

    return [null(t) for t in types]


def build_struct_array(schema: MessageSchema, rows: Sequence[dict[str, Any] | None]) -> pa.Array:
    """Struct column of ``schema`` (see :func:`struct_type`) for message data dicts; None gives a null row."""
    stype = struct_type(schema)
    n = len(rows)
    pos = np.fromiter((i for i, r in enumerate(rows) if r is not None), dtype=np.int64)
    if len(pos) == 0:
        return pa.nulls(n, type=stype)
    dense = _struct_array_dense(stype, [rows[i] for i in pos])  # type: ignore[misc]
    return _expand(dense, pos, n)


def build_control_columns(records: Sequence[Any]) -> list[pa.Array]:
    """Control struct columns aligned with :data:`CONTROL_FIELDS` for control records
    (:class:`kraft_replay.codec.control.ControlRecord`, one row each): each row fills its type's column."""
    from kraft_replay.codec.control import CONTROL_TYPES

    out = []
    for f in CONTROL_FIELDS:
        ctype = next(t for t in CONTROL_TYPES.values() if t.column == f.name)
        rows = [r.data if r.type_id == ctype.type_id else None for r in records]
        out.append(build_struct_array(ctype.schema, rows))
    return out


def build_payload_columns(records: Sequence[MetadataRecord | None]) -> list[pa.Array]:
    """Payload columns aligned with :data:`PAYLOAD_FIELDS` for ``records`` (one row each).

    Each record fills exactly one column (its type's), every other column is null in that row;
    records of types without a body and None entries fill none.
    """
    n = len(records)
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(records):
        if r is not None:
            g = groups.get(r.api_key)
            if g is None:
                groups[r.api_key] = g = []
            g.append(i)
    unknown = [k for k in groups if k not in RECORD_TYPES]
    if unknown:
        raise PayloadError(f"records of unknown type id(s) {sorted(unknown)} have no payload column")
    out: list[pa.Array] = []
    for api_key, col in PAYLOAD_COLUMN_BY_API_KEY.items():
        stype = PAYLOAD_STRUCT_TYPES[col]
        members = groups.get(api_key)
        if not members:
            out.append(pa.nulls(n, type=stype))
            continue
        dense = _struct_array_dense(stype, [records[i].data for i in members])  # type: ignore[union-attr]
        out.append(_expand(dense, np.asarray(members, dtype=np.int64), n))
    return out


# (snake name, keep None, sub-plan or None, is array) per field present in a version
_Plan = list[tuple[str, bool, "list[Any] | None", bool]]
_PLANS: dict[tuple[int, int], _Plan] = {}


def _plan(fields: Sequence[FieldSpec], version: int) -> _Plan:
    key = (id(fields), version)
    plan = _PLANS.get(key)
    if plan is None:
        plan = []
        for f in fields:
            if not f.present_in(version):
                continue
            keep_none = f.nullable_in(version) or f.default_value(version) is None
            sub = _plan(f.fields, version) if f.fields is not None else None
            plan.append((f.snake, keep_none, sub, f.is_array))
        _PLANS[key] = plan
    return plan


def _apply(plan: _Plan, row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for snake, keep_none, sub, is_array in plan:
        v = row.get(snake)
        if v is None:
            if keep_none:
                out[snake] = None
            continue
        if sub is not None:
            v = [_apply(sub, e) for e in v] if is_array else _apply(sub, v)
        out[snake] = v
    return out


def struct_rows_to_data(fields: Sequence[FieldSpec], version: int, row: dict[str, Any]) -> dict[str, Any]:
    """Arrow struct row (``to_pylist`` form) -> data dict of ``version``.

    Keeps the fields present in ``version`` only. A null in a field the version does not allow
    to be null is left out, so the encoder writes the field's default (as for absent fields).
    """
    return _apply(_plan(fields, version), row)


def records_from_payload_columns(
    table: pa.Table | pa.RecordBatch, *, api_key_column: str = "api_key", version_column: str = "record_version"
) -> list[MetadataRecord | None]:
    """Arrow rows -> records (inverse of :func:`build_payload_columns`).

    ``table`` needs the ``api_key`` and ``record_version`` columns and the payload column of every
    record type that occurs (columns of types that do not occur may be missing). A row whose api
    key is null gives None; a row whose payload column is null for a type with a body is an error.
    """
    names = set(table.schema.names)
    for c in (api_key_column, version_column):
        if c not in names:
            raise PayloadError(f"payload table has no {c!r} column (columns: {', '.join(sorted(names))})")
    keys = table.column(api_key_column).to_pylist()
    versions = table.column(version_column).to_pylist()
    rows_by_key: dict[int, list[Any]] = {}
    plans: dict[tuple[int, int], _Plan | None] = {}  # None: a type without body
    for k, v in set(zip(keys, versions, strict=True)):
        if k is None:
            continue
        rt = RECORD_TYPES.get(k)
        if rt is None:
            raise PayloadError(f"unknown record type id {k} in column {api_key_column!r}")
        if v is None or not rt.schema.is_valid_version(v):
            i = next(i for i, (a, b) in enumerate(zip(keys, versions, strict=True)) if a == k and b == v)
            raise PayloadError(f"row {i}: {rt.name} has no version {v} (valid: {rt.valid_versions})")
        if rt.has_body:
            if rt.column not in names:
                raise PayloadError(f"payload table has {rt.name} rows but no {rt.column!r} column")
            if k not in rows_by_key:
                rows_by_key[k] = table.column(rt.column).to_pylist()
            plans[(k, v)] = _plan(rt.schema.fields, v)
        else:
            plans[(k, v)] = None
    out: list[MetadataRecord | None] = []
    append = out.append
    for i, (k, v) in enumerate(zip(keys, versions, strict=True)):
        if k is None:
            append(None)
            continue
        plan = plans[(k, v)]
        if plan is None:
            append(MetadataRecord(k, v, {}))
            continue
        row = rows_by_key[k][i]
        if row is None:
            rt = RECORD_TYPES[k]
            raise PayloadError(f"row {i}: {rt.name} row has a null {rt.column!r} payload column")
        append(MetadataRecord(k, v, _apply(plan, row)))
    return out
