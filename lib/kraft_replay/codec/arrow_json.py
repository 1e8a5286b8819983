"""``payload_json`` for a whole Arrow payload column at once (vectorised with pyarrow compute).

Rule: the same rendering as :func:`kraft_replay.codec.jsonfmt.to_dump_json`, the dump tool's
``{"type":"<TOOL_NAME>","version":<v>,"data":{...}}`` with compact separators: in schema order and
under camelCase names, every non-tagged field of the version (``null`` when null) and each tagged
field only when it differs from its default (a null where the default is not null counts as
different and prints ``null``). Integers print as decimals, booleans as ``true``/``false``, UUIDs and
strings as JSON strings (only ``"``, ``\\`` and control characters escaped). A null in a field
that is not nullable at the version means the field was absent and stands for its default.

Covers record types whose fields at the version are scalars (integers, booleans, UUIDs, strings)
or arrays of those, e.g. ``PartitionChangeRecord`` and ``NoOpRecord``; :func:`supports` says whether
a (type, version) qualifies and :func:`record_json_arrow` raises :class:`ArrowJsonUnsupported`
otherwise, so callers fall back to the row-wise renderer.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.codec.jsonfmt import json_string
from kraft_replay.codec.schema import RECORD_TYPES, FieldSpec

__all__ = ["ArrowJsonUnsupported", "record_json_arrow", "supports"]

_INTS = frozenset({"int8", "int16", "uint16", "int32", "uint32", "int64"})
_SCALARS = _INTS | {"bool", "uuid", "string"}
_ESCAPE = r'[\x00-\x1f"\\]'


class ArrowJsonUnsupported(ValueError):
    """The (record type, version) has a field this renderer does not handle (nested structs, bytes, floats)."""


def _field_ok(f: FieldSpec) -> bool:
    if f.fields is not None:
        return False
    return (f.element_type if f.is_array else f.type) in _SCALARS


_SUPPORTS: dict[tuple[int, int], bool] = {}


def supports(api_key: int, version: int) -> bool:
    """Whether :func:`record_json_arrow` renders this record type and version."""
    ok = _SUPPORTS.get((api_key, version))
    if ok is None:
        rt = RECORD_TYPES.get(api_key)
        ok = (rt is not None and rt.schema.is_valid_version(version)
              and all(_field_ok(f) for f in rt.schema.fields if f.present_in(version)))
        _SUPPORTS[(api_key, version)] = ok
    return ok


def _quoted(strings: pa.Array, escape: bool) -> pa.Array:
    """Each string as a JSON string literal (null stays null)."""
    if escape and pc.any(pc.match_substring_regex(strings, _ESCAPE)).as_py():
        return pa.array([None if s is None else json_string(s) for s in strings.to_pylist()], pa.string())
    return pc.binary_join_element_wise('"', strings, '"', "")


def _scalar_text(t: str, col: pa.Array) -> pa.Array:
    if t in _INTS:
        return pc.cast(col, pa.string())
    if t == "bool":
        return pc.if_else(col, "true", "false")
    return _quoted(pc.cast(col, pa.string()), escape=(t == "string"))


def _array_joined(element_type: str, col: pa.Array) -> pa.Array:
    """``a,b,...`` per list (null stays null)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    # offsets index into the whole values buffer (also for a slice), so render all values once and
    # put them under the column's own validity and offsets
    items = _scalar_text(element_type, col.values)
    rebuilt = pa.Array.from_buffers(pa.list_(pa.string()), len(col), col.buffers()[:2], offset=col.offset,
                                    children=[items])
    return pc.binary_join(rebuilt, ",")


def _array_text(element_type: str, col: pa.Array) -> pa.Array:
    """``[a,b,...]`` per list (null stays null)."""
    return pc.binary_join_element_wise("[", _array_joined(element_type, col), "]", "")


def _value_text(f: FieldSpec, col: pa.Array) -> pa.Array:
    return _array_text(f.element_type, col) if f.is_array else _scalar_text(f.type, col)


def _differs(dv: object, col: pa.Array, absent_is_default: bool) -> pa.Array:
    """Rows whose value is not the field's non-null default (the condition for printing a tagged field;
    a tagged field whose default is null is printed where it is not null, see :func:`_struct_text`)."""
    if isinstance(dv, list):
        return pc.fill_null(pc.greater(pc.list_value_length(col), 0), not absent_is_default)
    return pc.fill_null(pc.not_equal(col, pa.scalar(dv, col.type)), True)


def _struct_text(fields: tuple[FieldSpec, ...], version: int, arr: pa.StructArray, head: str = "",
                 tail: str = "") -> pa.Array:
    """``head + {...} + tail`` per row: one element-wise join of literal field prefixes and value texts
    (a tagged field's prefix and text are joined first, then blanked where the field is at its default)."""
    n = len(arr)
    args: list[object] = []      # literal strings and string arrays, joined in order
    for f in fields:
        if not f.present_in(version):
            continue
        col = arr.field(f.snake)
        dv = f.default_value(version)
        # a null in a field that cannot be null means the field was absent: it holds its default
        absent_is_default = dv is not None and not f.nullable_in(version)
        if absent_is_default and not f.is_array and col.null_count:
            col = pc.fill_null(col, pa.scalar(dv, col.type))
        if dv is None and f.tagged_in(version):
            # printed where not null: the joined piece is null exactly there, and blank after fill_null
            if col.null_count == n:
                continue
            if f.is_array:
                piece = pc.binary_join_element_wise(f',"{f.json_name}":[', _array_joined(f.element_type, col), "]", "")
            else:
                piece = pc.binary_join_element_wise(f',"{f.json_name}":', _scalar_text(f.type, col), "")
            args.append(pc.fill_null(piece, "") if piece.null_count else piece)
            continue
        differs = _differs(dv, col, absent_is_default) if f.tagged_in(version) else None
        if differs is not None and not pc.any(differs).as_py():
            continue                       # a tagged field at its default in every row prints nothing
        text = _value_text(f, col)
        if absent_is_default and f.is_array:
            text = pc.fill_null(text, "[]")
        elif text.null_count:
            text = pc.fill_null(text, "null")
        if differs is None:
            args.append(("," if args else "") + f'"{f.json_name}":')
            args.append(text)
        else:
            piece = pc.binary_join_element_wise(f',"{f.json_name}":', text, "")
            if not pc.all(differs).as_py():
                piece = pc.if_else(differs, piece, "")
            args.append(piece)
    if not args:
        return pa.array([head + "{}" + tail] * n, pa.string())
    if isinstance(args[0], str):
        args[0] = head + "{" + args[0]
        body = pc.binary_join_element_wise(*args, "}" + tail, "")
    else:
        # the first printed field is tagged: its piece starts with a comma to drop
        inner = pc.utf8_slice_codeunits(pc.binary_join_element_wise(*args, "") if len(args) > 1 else args[0], 1)
        body = pc.binary_join_element_wise(head + "{", inner, "}" + tail, "")
    return body


def record_json_arrow(api_key: int, version: int, payload: pa.StructArray | None, length: int | None = None) -> pa.Array:
    """``payload_json`` of every row, all of record type ``api_key`` at ``version``.

    ``payload`` is the type's payload struct column (rows where it is null give null); for a type
    without a body pass ``None`` and ``length``.
    """
    rt = RECORD_TYPES.get(api_key)
    if rt is None:
        raise ArrowJsonUnsupported(f"unknown metadata record type id {api_key}")
    if not supports(api_key, version):
        raise ArrowJsonUnsupported(f"{rt.tool_name} v{version}: a field needs the row-wise renderer")
    head = f'{{"type":"{rt.tool_name}","version":{version},"data":'
    if not rt.has_body:
        n = length if payload is None else len(payload)
        return pa.array([head + "{}}"] * (n or 0), pa.string())
    if payload is None:
        raise ValueError(f"{rt.tool_name}: the payload column is required")
    if isinstance(payload, pa.ChunkedArray):
        payload = payload.combine_chunks()
    text = _struct_text(rt.schema.fields, version, payload, head, "}")
    if payload.null_count:
        text = pc.if_else(pc.is_valid(payload), text, pa.scalar(None, pa.string()))
    return text
