"""``payload_json`` as Spark column expressions, built from the codec's field tables.

Rule (the dump tool's rendering, same as :func:`kraft_replay.codec.jsonfmt.to_dump_json`):
``{"type":"<TOOL_NAME>","version":<v>,"data":{...}}`` with compact separators; ``data`` holds, in
schema order and under camelCase names, every non-tagged field of the version (``null`` when null)
and each tagged field only when it differs from its default; nested structs and array elements
follow the same rule. Integers print as decimals, booleans as ``true``/``false``, strings and UUIDs
as JSON strings (Spark's JSON writer escapes like the dump tool), float64 as Java's
``Double.toString``, bytes as padded standard base64.

The expression for a record type and version reads that type's payload struct column; no Python
runs per row.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from kraft_replay.codec.schema import RECORD_TYPES, FieldSpec

_INTS = {"int8", "int16", "uint16", "int32", "uint32", "int64"}


def _json_string(col: Column) -> Column:
    """A string column as a JSON string literal (null stays null)."""
    arr = F.to_json(F.array(col))
    return F.when(col.isNotNull(), F.regexp_extract(arr, r"^\[(.*)\]$", 1))


def _scalar_json(t: str, col: Column) -> Column:
    if t in _INTS:
        return col.cast("string")
    if t == "bool":
        return F.when(col, F.lit("true")).when(~col, F.lit("false"))
    if t == "uuid":
        return F.concat(F.lit('"'), col, F.lit('"'))
    if t == "string":
        return _json_string(col)
    if t == "float64":
        return _json_string(col)
    if t in ("bytes", "records"):
        return F.concat(F.lit('"'), F.regexp_replace(F.base64(col), "[\r\n]", ""), F.lit('"'))
    raise ValueError(f"no JSON rendering for type {t!r}")


def _value_json(f: FieldSpec, version: int, col: Column) -> Column:
    if f.fields is not None:
        if f.is_array:
            inner = F.transform(col, lambda e: struct_json(f.fields or (), version, e))
            return F.concat(F.lit("["), F.array_join(inner, ","), F.lit("]"))
        return struct_json(f.fields, version, col)
    if f.is_array:
        if f.element_type in _INTS:
            return F.concat(F.lit("["), F.array_join(col.cast("array<string>"), ","), F.lit("]"))
        if f.element_type in ("string", "uuid"):
            return F.to_json(col)
        inner = F.transform(col, lambda e: _scalar_json(f.element_type, e))
        return F.concat(F.lit("["), F.array_join(inner, ","), F.lit("]"))
    return _scalar_json(f.type, col)


def _differs_from_default(f: FieldSpec, version: int, col: Column) -> Column:
    dv = f.default_value(version)
    if dv is None:
        return col.isNotNull()
    if isinstance(dv, list):
        return col.isNotNull() & (F.size(col) > 0)
    if isinstance(dv, bool):
        return col.isNotNull() & (col != F.lit(dv))
    if isinstance(dv, (int, float, str)):
        return col.isNotNull() & (col != F.lit(dv))
    if isinstance(dv, bytes):
        return col.isNotNull() & (F.length(col) > 0)
    raise ValueError(f"field {f.name}: no default comparison for {dv!r}")


def struct_json(fields: tuple[FieldSpec, ...], version: int, col: Column,
                always_default: frozenset[str] = frozenset()) -> Column:
    """JSON object text of one struct value (the record body or a nested struct) at ``version``.

    ``always_default`` names tagged fields the caller knows hold their default in every row; they
    would never print, so no expression is built for them.
    """
    pieces: list[Column] = []
    for f in fields:
        if not f.present_in(version) or (f.snake in always_default and f.tagged_in(version)):
            continue
        sub = col.getField(f.snake)
        head = F.lit(f'"{f.json_name}":')
        if f.tagged_in(version):
            pieces.append(F.when(_differs_from_default(f, version, sub), F.concat(head, _value_json(f, version, sub))))
        else:
            pieces.append(F.concat(head, F.coalesce(_value_json(f, version, sub), F.lit("null"))))
    if not pieces:
        return F.lit("{}")
    return F.concat(F.lit("{"), F.concat_ws(",", *pieces), F.lit("}"))


def record_json(api_key: int, version: int, always_default: frozenset[str] = frozenset()) -> Column:
    """``payload_json`` of one record type and version, reading its payload struct column."""
    rt = RECORD_TYPES[api_key]
    head = f'{{"type":"{rt.tool_name}","version":{version},"data":'
    if not rt.has_body:
        return F.lit(head + "{}}")
    body = struct_json(rt.schema.fields, version, F.col(rt.column), always_default)
    return F.concat(F.lit(head), body, F.lit("}"))


def payload_json_column(combos: set[tuple[int, int]], api_key: str = "api_key", version: str = "record_version",
                        always_default: dict[int, frozenset[str]] | None = None) -> Column:
    """``payload_json`` for rows whose (api key, version) is one of ``combos`` (null for any other)."""
    expr: Column | None = None
    for k, v in sorted(combos):
        cond = (F.col(api_key) == k) & (F.col(version) == v)
        js = record_json(k, v, (always_default or {}).get(k, frozenset()))
        expr = F.when(cond, js) if expr is None else expr.when(cond, js)
    return expr if expr is not None else F.lit(None).cast("string")
