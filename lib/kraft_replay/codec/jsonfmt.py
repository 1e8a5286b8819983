"""The JSON rendering ``kafka-dump-log --cluster-metadata-decoder`` prints for a metadata record.

Rule: ``{"type":"<TOOL_NAME>","version":<v>,"data":{...}}`` with compact separators; ``data``
holds, in schema order and under camelCase names, every non-tagged field of the record's version
(null when it is null) and each tagged field only when its value differs from the field's
default. Nested structs and array elements follow the same rule. UUIDs print in Kafka's text
form, bytes as standard base64 with padding, float64 the way Java's ``Double.toString`` prints
(``1.0E7``, ``1.0E-4``, ``0.5``), strings with JSON escapes (control characters as ``\\u00XX``
with upper-case hex, non-ASCII characters as themselves). Unknown tagged fields are not printed.

:func:`from_dump_json` is the inverse used to ingest dump-log text: fields absent from the JSON
take their defaults, and a JSON null in an array/string/struct field that the version does not
allow to be null also takes the default (Kafka 2.8-era dumps print such arrays as null).
"""

from __future__ import annotations

import base64
import json
import math
import re
import threading
from decimal import Decimal
from typing import Any

from kraft_replay.codec.records import MetadataRecord, uuid_to_bytes
from kraft_replay.codec.schema import RECORD_TYPES, RECORD_TYPES_BY_TOOL_NAME, FieldSpec, MessageSchema

__all__ = [
    "DumpJsonError",
    "from_dump_json",
    "java_double",
    "json_string",
    "message_from_json",
    "message_json",
    "to_dump_json",
]


class DumpJsonError(ValueError):
    """A dump-log JSON payload could not be turned into a record."""


# ----------------------------------------------------------------------------------------------
# Scalars
# ----------------------------------------------------------------------------------------------

_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def json_string(s: str) -> str:
    """A JSON string literal as Jackson writes it (only ``"``, ``\\`` and control characters escaped)."""
    if s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    if not _NEEDS_ESCAPE.search(s):
        return '"' + s + '"'
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _SHORT.get(m.group(), f"\\u{ord(m.group()):04X}"), s) + '"'


def java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` prints it (shortest round-trip digits).

    Plain decimal with at least one fraction digit when 10^-3 <= |x| < 10^7, otherwise
    ``d.dddE<exp>``; ``NaN``, ``Infinity``, ``-Infinity``, ``0.0`` and ``-0.0`` as such.
    """
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    d = Decimal(repr(abs(x)))
    digits = "".join(map(str, d.as_tuple().digits)).rstrip("0") or "0"
    exp = d.adjusted()
    if -3 <= exp < 7:
        if exp >= 0:
            ip = digits[: exp + 1].ljust(exp + 1, "0")
            fp = digits[exp + 1 :] or "0"
        else:
            ip = "0"
            fp = "0" * (-exp - 1) + digits
        return f"{sign}{ip}.{fp}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp}"


# ----------------------------------------------------------------------------------------------
# Record -> JSON
# ----------------------------------------------------------------------------------------------


_INT_TYPES = frozenset({"int8", "int16", "uint16", "int32", "uint32", "int64"})


def _b64(v: Any) -> str:
    return '"' + base64.b64encode(bytes(v)).decode("ascii") + '"'


def _scalar_expr(t: str, v: str) -> str:
    """Python expression rendering the non-null scalar held in variable ``v`` of schema type ``t``."""
    if t == "string":
        return f"_js({v})"
    if t == "uuid":
        return f"'\"' + {v} + '\"'"
    if t == "bool":
        return f"('true' if {v} else 'false')"
    if t == "float64":
        return f"_jd({v})"
    if t in ("bytes", "records"):
        return f"_b64({v})"
    return f"str(int({v}))"


class _JsonGen:
    """Generates one JSON writer per (struct, version) from the field tables (compiled once, cached)."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {"_js": json_string, "_jd": java_double, "_b64": _b64}
        self.cache: dict[tuple[int, int], str] = {}
        self.n = 0

    def struct_fn(self, fields: tuple[FieldSpec, ...], version: int) -> str:
        """Name of the generated writer ``fn(d) -> '{...}'`` for a struct at ``version``.

        Each field renders into a local; tagged fields render to ``''`` when at their default;
        one f-string joins the pieces (each prefixed with a comma, the first comma dropped).
        """
        key = (id(fields), version)
        name = self.cache.get(key)
        if name is not None:
            return name
        self.n += 1
        name = f"_j{self.n}"
        self.cache[key] = name
        lines = [f"def {name}(d):"]
        pieces: list[str] = []
        for i, f in enumerate(fields):
            if not f.present_in(version):
                continue
            dv = f.default_value(version)
            dname = f"_D{self.n}_{i}"
            self.ns[dname] = dv
            # the writer only reads values, so the shared default object can stand in for absent fields
            lines.append(f"    v = d.get({f.snake!r}, {dname})")
            render = self._value_expr(f, version, "v")
            if f.type in _INT_TYPES:
                render = "str(v)"
            if f.tagged_in(version):
                lines.append(
                    f"    r{i} = (',\"{f.json_name}\":' + ('null' if v is None else {render})) if v != {dname} else ''"
                )
                pieces.append(f"{{r{i}}}")
            else:
                lines.append(f"    r{i} = 'null' if v is None else {render}")
                pieces.append(f',"{f.json_name}":{{r{i}}}')
        if not pieces:
            lines.append("    return '{}'")
        else:
            body = "".join(pieces).replace("'", "\\'")
            lines.append(f"    s = f'{body}'")
            lines.append("    return '{' + s[1:] + '}'")
        code = compile("\n".join(lines) + "\n", f"<kraft_replay.codec json {name}>", "exec")
        exec(code, self.ns)  # noqa: S102 - source built from our own field tables
        return name

    def _value_expr(self, f: FieldSpec, version: int, v: str) -> str:
        if f.fields is not None:
            fn = self.struct_fn(f.fields, version)
            if f.is_array:
                return f"'[' + ','.join([{fn}(x) for x in {v}]) + ']'"
            return f"{fn}({v})"
        if f.is_array:
            et = f.element_type
            if et == "uuid":
                return f"('[\"' + '\",\"'.join({v}) + '\"]' if {v} else '[]')"
            if et in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
                return f"'[' + ','.join(map(str, {v})) + ']'"
            return f"'[' + ','.join([{_scalar_expr(et, 'x')} for x in {v}]) + ']'"
        return _scalar_expr(f.type, v)


_JGEN = _JsonGen()
_JGEN_LOCK = threading.Lock()
_WRITERS: dict[tuple[int, int], Any] = {}
_CONST: dict[tuple[int, int], str] = {}


def to_dump_json(record: MetadataRecord) -> str:
    """The ``payload:`` JSON of ``kafka-dump-log --cluster-metadata-decoder`` for ``record``."""
    key = (record.api_key, record.version)
    if not record.data:
        const = _CONST.get(key)
        if const is not None:
            return const
    w = _WRITERS.get(key)
    if w is None:
        rt = RECORD_TYPES.get(record.api_key)
        if rt is None:
            raise ValueError(f"unknown metadata record type id {record.api_key}")
        if not rt.schema.is_valid_version(record.version):
            raise ValueError(f"{rt.name} has no version {record.version} (valid: {rt.valid_versions})")
        with _JGEN_LOCK:
            fn = _JGEN.ns[_JGEN.struct_fn(rt.schema.fields, record.version)]
        prefix = f'{{"type":"{rt.tool_name}","version":{record.version},"data":'
        w = (prefix, fn, rt.has_body)
        _WRITERS[key] = w
    try:
        text = w[0] + w[1](record.data) + "}"
    except Exception as exc:  # noqa: BLE001 - a value of the wrong type for its field
        raise ValueError(
            f"{w[0][9 : w[0].index(',') - 1]} v{record.version}: cannot render JSON ({type(exc).__name__}: {exc})"
        ) from None
    if not w[2]:
        _CONST[key] = text
    return text


def message_json(schema: MessageSchema, version: int, data: dict[str, Any]) -> str:
    """The ``data`` object of any message body (e.g. a control-record value) under the same rules."""
    if not schema.is_valid_version(version):
        raise ValueError(f"{schema.name} has no version {version} (valid: {schema.valid_versions})")
    with _JGEN_LOCK:
        fn = _JGEN.ns[_JGEN.struct_fn(schema.fields, version)]
    try:
        return fn(data)  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{schema.name} v{version}: cannot render JSON ({type(exc).__name__}: {exc})") from None


# ----------------------------------------------------------------------------------------------
# JSON -> record
# ----------------------------------------------------------------------------------------------


def _from_scalar(t: str, v: Any, where: str) -> Any:
    if t in ("string",):
        if not isinstance(v, str):
            raise DumpJsonError(f"{where}: expected a string, got {v!r}")
        return v
    if t == "uuid":
        try:
            uuid_to_bytes(v)
        except ValueError as exc:
            raise DumpJsonError(f"{where}: {exc}") from None
        return v
    if t == "bool":
        if not isinstance(v, bool):
            raise DumpJsonError(f"{where}: expected true/false, got {v!r}")
        return v
    if t == "float64":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise DumpJsonError(f"{where}: expected a number, got {v!r}")
        return float(v)
    if t in ("bytes", "records"):
        if not isinstance(v, str):
            raise DumpJsonError(f"{where}: expected base64 text, got {v!r}")
        try:
            return base64.b64decode(v, validate=True)
        except ValueError:
            raise DumpJsonError(f"{where}: bad base64 {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, int):
        raise DumpJsonError(f"{where}: expected an integer, got {v!r}")
    return v


def _from_struct(fields: tuple[FieldSpec, ...], version: int, obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise DumpJsonError(f"{where}: expected an object, got {obj!r}")
    by_json = {f.json_name: f for f in fields if f.present_in(version)}
    unknown = [k for k in obj if k not in by_json]
    if unknown:
        raise DumpJsonError(f"{where}: unknown field(s) {', '.join(unknown)} for version {version}")
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present_in(version):
            continue
        if f.json_name not in obj:
            out[f.snake] = f.default_value(version)
            continue
        v = obj[f.json_name]
        w = f"{where}.{f.json_name}"
        if v is None:
            if not f.nullable_in(version) and f.type in (
                "bool",
                "int8",
                "int16",
                "uint16",
                "int32",
                "uint32",
                "int64",
                "float64",
                "uuid",
            ):
                raise DumpJsonError(f"{w}: null is not allowed")
            out[f.snake] = None if f.nullable_in(version) else f.default_value(version)
            continue
        if f.is_array:
            if not isinstance(v, list):
                raise DumpJsonError(f"{w}: expected an array, got {v!r}")
            if f.fields is not None:
                out[f.snake] = [_from_struct(f.fields, version, e, f"{w}[]") for e in v]
            else:
                out[f.snake] = [_from_scalar(f.element_type, e, f"{w}[]") for e in v]
        elif f.fields is not None:
            out[f.snake] = _from_struct(f.fields, version, v, w)
        else:
            out[f.snake] = _from_scalar(f.type, v, w)
    return out


def from_dump_json(text: str) -> MetadataRecord:
    """Parse one dump-log ``payload:`` JSON into a record (inverse of :func:`to_dump_json`)."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, TypeError, RecursionError) as exc:
        raise DumpJsonError(f"payload is not JSON: {type(exc).__name__}: {exc}") from None
    if not isinstance(doc, dict) or not {"type", "version"} <= doc.keys():
        raise DumpJsonError('payload JSON needs "type", "version" and "data"')
    rt = RECORD_TYPES_BY_TOOL_NAME.get(doc["type"])
    if rt is None:
        raise DumpJsonError(f"unknown record type {doc['type']!r}")
    version = doc["version"]
    if isinstance(version, bool) or not isinstance(version, int) or not rt.schema.is_valid_version(version):
        raise DumpJsonError(f"{rt.tool_name} has no version {version!r} (valid: {rt.valid_versions})")
    data = message_from_json(rt.schema, version, doc.get("data", {}), where=rt.tool_name)
    return MetadataRecord(rt.api_key, version, data)


def message_from_json(schema: MessageSchema, version: int, obj: Any, *, where: str | None = None) -> dict[str, Any]:
    """The ``data`` dict of any message body (e.g. a control-record value) from its JSON object.

    Inverse of :func:`message_json`: camelCase keys, absent fields take their defaults.
    Raises :class:`DumpJsonError` for anything that does not fit the schema.
    """
    if not schema.is_valid_version(version):
        raise DumpJsonError(f"{schema.name} has no version {version} (valid: {schema.valid_versions})")
    try:
        return _from_struct(schema.fields, version, obj, where or schema.name)
    except RecursionError:
        raise DumpJsonError(f"{where or schema.name}: JSON nested too deeply") from None
