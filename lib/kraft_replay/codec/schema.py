"""Typed access to the project's field tables of the KRaft metadata records and control schemas.

The tables themselves are plain data in ``_generated_schemas.py`` (written by
``tools/gen_schemas.py`` from the schema language). This module turns them into frozen objects:

- :data:`RECORD_TYPES` — ``api_key -> RecordType`` for every metadata record type (frame type ids);
- :data:`CONTROL_SCHEMAS` — ``name -> MessageSchema`` for the five control-record value schemas;
- :func:`fields_for` — the top-level fields that exist in one version of a record type.

Default values follow the schema language: an absent ``default`` means 0 / false / "" / empty
array / all-zero UUID / a struct of defaults; ``"null"`` means None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kraft_replay.codec._generated_schemas import MESSAGES

__all__ = [
    "CONTROL_SCHEMAS",
    "MESSAGE_SCHEMAS",
    "RECORD_TYPES",
    "RECORD_TYPES_BY_NAME",
    "RECORD_TYPES_BY_TOOL_NAME",
    "ZERO_UUID",
    "FieldSpec",
    "MessageSchema",
    "RecordType",
    "VersionRange",
    "fields_for",
    "record_type",
]

#: Text form of the all-zero UUID (the default of every uuid field).
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"

FIXED_SIZES: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "float64": 8,
    "uuid": 16,
}
INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
VARIABLE_TYPES = frozenset({"string", "bytes", "records"})


@dataclass(frozen=True, slots=True)
class VersionRange:
    """A version range of the schema language; ``high`` None means open-ended (``"N+"``)."""

    low: int
    high: int | None

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and version >= self.low and (self.high is None or version <= self.high)

    def versions(self, upto: int) -> range:
        """Concrete versions of this range, capping open-ended ranges at ``upto``."""
        hi = upto if self.high is None else min(self.high, upto)
        return range(self.low, hi + 1)

    def __str__(self) -> str:
        if self.high is None:
            return f"{self.low}+"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


def _range(raw: tuple[int, int | None] | None) -> VersionRange | None:
    return None if raw is None else VersionRange(raw[0], raw[1])


def _in(rng: VersionRange | None, version: int) -> bool:
    return rng is not None and version in rng


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a message or nested struct, as the schema declares it."""

    name: str  # schema name, e.g. "PartitionId"
    snake: str  # data-dict key, e.g. "partition_id"
    json_name: str  # dump-tool JSON key, e.g. "partitionId"
    type: str  # as written: "int32", "[]int32", "[]BrokerEndpoint", "KRaftVersionFeature"
    struct_name: str | None  # struct type name for struct and array-of-struct fields
    versions: VersionRange | None
    nullable_versions: VersionRange | None
    tagged_versions: VersionRange | None
    tag: int | None
    default_raw: str | None
    flexible_versions: VersionRange | None
    ignorable: bool
    fields: tuple[FieldSpec, ...] | None

    # -- type shape ------------------------------------------------------------------------
    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """Element type of an array (``int32``, ``uuid``, struct name ...) or the type itself."""
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """A single (non-array) nested struct."""
        return self.fields is not None and not self.is_array

    @property
    def is_struct_array(self) -> bool:
        return self.fields is not None and self.is_array

    # -- per-version facts -----------------------------------------------------------------
    def present_in(self, version: int) -> bool:
        return _in(self.versions, version)

    def nullable_in(self, version: int) -> bool:
        return _in(self.nullable_versions, version)

    def tagged_in(self, version: int) -> bool:
        return _in(self.tagged_versions, version)

    def flexible_in(self, version: int, message_flexible: bool) -> bool:
        """Compact encoding for this string/bytes field (the field override wins when given)."""
        if self.flexible_versions is not None:
            return message_flexible and _in(self.flexible_versions, version)
        return message_flexible

    def fields_in(self, version: int) -> tuple[FieldSpec, ...]:
        """Sub-fields present in ``version`` (struct fields only)."""
        return tuple(f for f in (self.fields or ()) if f.present_in(version))

    def default_value(self, version: int | None = None) -> Any:
        """The field's value when absent: from ``default``, else the type's zero value.

        Arrays, structs, strings and bytes with ``default: "null"`` default to None. A struct
        without a null default defaults to a dict of its sub-fields' defaults for ``version``.
        """
        raw = self.default_raw
        if raw is not None and raw.strip() == "null":
            return None
        if self.is_array:
            return []
        if self.fields is not None:
            v = 0 if version is None else version
            return {f.snake: f.default_value(v) for f in self.fields_in(v)}
        t = self.type
        if t in INT_RANGES:
            if raw is None or raw == "":
                return 0
            return _parse_int(raw)
        if t == "bool":
            return raw is not None and raw.strip().lower() == "true"
        if t == "float64":
            return 0.0 if raw is None or raw == "" else float(raw)
        if t == "uuid":
            return ZERO_UUID if raw is None or raw == "" else raw
        if t == "string":
            return "" if raw is None else raw
        if t in ("bytes", "records"):
            return b""
        raise ValueError(f"field {self.name}: unknown type {t!r}")


def _parse_int(raw: str) -> int:
    s = raw.strip()
    if re.fullmatch(r"-?0[xX][0-9a-fA-F]+", s):
        return int(s, 16)
    return int(s)


def _field_from_table(t: dict[str, Any]) -> FieldSpec:
    return FieldSpec(
        name=t["name"],
        snake=t["snake"],
        json_name=t["json"],
        type=t["type"],
        struct_name=t["struct"],
        versions=_range(t["versions"]),
        nullable_versions=_range(t["nullable_versions"]),
        tagged_versions=_range(t["tagged_versions"]),
        tag=t["tag"],
        default_raw=t["default"],
        flexible_versions=_range(t["flexible_versions"]),
        ignorable=t["ignorable"],
        fields=None if t["fields"] is None else tuple(_field_from_table(f) for f in t["fields"]),
    )


@dataclass(frozen=True, slots=True)
class MessageSchema:
    """A whole message (metadata record body or control-record value)."""

    name: str
    file: str
    kind: str  # "metadata" | "data"
    api_key: int | None
    valid_versions: VersionRange
    flexible_versions: VersionRange | None
    fields: tuple[FieldSpec, ...]

    @property
    def min_version(self) -> int:
        return self.valid_versions.low

    @property
    def max_version(self) -> int:
        assert self.valid_versions.high is not None, f"{self.name}: open-ended validVersions"
        return self.valid_versions.high

    def versions(self) -> range:
        return range(self.min_version, self.max_version + 1)

    def is_valid_version(self, version: int) -> bool:
        return version in self.valid_versions

    def is_flexible(self, version: int) -> bool:
        return _in(self.flexible_versions, version)

    def fields_in(self, version: int) -> tuple[FieldSpec, ...]:
        """Top-level fields present in ``version`` (tagged and non-tagged), in schema order."""
        return tuple(f for f in self.fields if f.present_in(version))

    @property
    def has_body(self) -> bool:
        """False for records whose body is always empty (NoOpRecord, EndTransactionRecord)."""
        return bool(self.fields)


@dataclass(frozen=True, slots=True)
class RecordType:
    """A metadata record type: its frame type id and names."""

    api_key: int
    name: str  # "PartitionChangeRecord"
    tool_name: str  # "PARTITION_CHANGE_RECORD" (as Kafka's tools print it)
    column: str  # "partition_change" (payload column; no column if not has_body)
    schema: MessageSchema = field(repr=False)

    @property
    def valid_versions(self) -> VersionRange:
        return self.schema.valid_versions

    @property
    def min_version(self) -> int:
        return self.schema.min_version

    @property
    def max_version(self) -> int:
        return self.schema.max_version

    @property
    def has_body(self) -> bool:
        return self.schema.has_body


def _snake(name: str) -> str:
    name = name.replace("KRaft", "Kraft")
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _schema_from_table(t: dict[str, Any]) -> MessageSchema:
    vv = _range(t["valid_versions"])
    if vv is None:
        raise ValueError(f"{t['name']}: no valid versions")
    return MessageSchema(
        name=t["name"],
        file=t["file"],
        kind=t["kind"],
        api_key=t["api_key"],
        valid_versions=vv,
        flexible_versions=_range(t["flexible_versions"]),
        fields=tuple(_field_from_table(f) for f in t["fields"]),
    )


#: Every schema in the tables, by message name.
MESSAGE_SCHEMAS: dict[str, MessageSchema] = {name: _schema_from_table(t) for name, t in MESSAGES.items()}

#: Metadata record types by frame type id (api key), ascending.
RECORD_TYPES: dict[int, RecordType] = {}
for _s in sorted((s for s in MESSAGE_SCHEMAS.values() if s.kind == "metadata"), key=lambda s: s.api_key or 0):
    assert _s.api_key is not None
    _base = _s.name[: -len("Record")] if _s.name.endswith("Record") else _s.name
    RECORD_TYPES[_s.api_key] = RecordType(
        api_key=_s.api_key,
        name=_s.name,
        tool_name=_snake(_s.name).upper(),
        column=_snake(_base),
        schema=_s,
    )
del _s, _base

RECORD_TYPES_BY_NAME: dict[str, RecordType] = {rt.name: rt for rt in RECORD_TYPES.values()}
RECORD_TYPES_BY_TOOL_NAME: dict[str, RecordType] = {rt.tool_name: rt for rt in RECORD_TYPES.values()}

#: The control-record value schemas (LeaderChangeMessage, SnapshotHeaderRecord,
#: SnapshotFooterRecord, KRaftVersionRecord, VotersRecord), by message name.
CONTROL_SCHEMAS: dict[str, MessageSchema] = {s.name: s for s in MESSAGE_SCHEMAS.values() if s.kind == "data"}


def record_type(api_key: int) -> RecordType:
    """The record type for ``api_key``; KeyError names the unknown id."""
    try:
        return RECORD_TYPES[api_key]
    except KeyError:
        raise KeyError(f"unknown metadata record type id {api_key}") from None


def fields_for(api_key: int, version: int) -> tuple[FieldSpec, ...]:
    """Top-level fields of record type ``api_key`` at ``version`` (ValueError if the version is not valid)."""
    rt = record_type(api_key)
    if not rt.schema.is_valid_version(version):
        raise ValueError(f"{rt.name} has no version {version} (valid: {rt.valid_versions})")
    return rt.schema.fields_in(version)
