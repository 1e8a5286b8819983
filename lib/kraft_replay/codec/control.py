"""Control records of the metadata log and snapshots (facts §3).

A control batch (attribute bit 5) holds records whose

* **key** is 4 bytes: int16 key version (0; a negative version is corrupt, other versions are read
  as version 0) then int16 control type;
* **value** is the message body at schema version 0 with no frame prefix.

Only types 2-6 appear in the metadata log: LEADER_CHANGE (LeaderChangeMessage), SNAPSHOT_HEADER
(SnapshotHeaderRecord), SNAPSHOT_FOOTER (SnapshotFooterRecord), KRAFT_VERSION (KRaftVersionRecord)
and KRAFT_VOTERS (VotersRecord). ABORT (0), COMMIT (1) and unknown ids are rejected.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from typing import Any

from kraft_replay.codec.schema import CONTROL_SCHEMAS, FieldSpec, MessageSchema

__all__ = [
    "CONTROL_TYPES",
    "CONTROL_TYPE_IDS",
    "ControlType",
    "ControlRecord",
    "ControlDecodeError",
    "CONTROL_VALUE_VERSION",
    "decode_control_key",
    "decode_control_record",
    "encode_control_record",
    "control_json",
]

# Every control value is written and read at schema version 0 (facts §3).
CONTROL_VALUE_VERSION = 0

_KEY = struct.Struct(">hh")


@dataclass(frozen=True, slots=True)
class ControlType:
    """A control record type: id, name as Kafka prints it, value schema, bronze struct column."""

    type_id: int
    name: str
    schema_name: str
    column: str

    @property
    def schema(self) -> MessageSchema:
        return CONTROL_SCHEMAS[self.schema_name]


CONTROL_TYPES: dict[int, ControlType] = {
    2: ControlType(2, "LEADER_CHANGE", "LeaderChangeMessage", "leader_change"),
    3: ControlType(3, "SNAPSHOT_HEADER", "SnapshotHeaderRecord", "snapshot_header"),
    4: ControlType(4, "SNAPSHOT_FOOTER", "SnapshotFooterRecord", "snapshot_footer"),
    5: ControlType(5, "KRAFT_VERSION", "KRaftVersionRecord", "kraft_version"),
    6: ControlType(6, "KRAFT_VOTERS", "VotersRecord", "kraft_voters"),
}
CONTROL_TYPE_IDS: dict[str, int] = {t.name: i for i, t in CONTROL_TYPES.items()}
_NAMES_OUTSIDE_METADATA = {0: "ABORT", 1: "COMMIT"}


class ControlDecodeError(ValueError):
    """A control record that cannot be decoded; ``code`` is a quarantine reason code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class ControlRecord:
    """A decoded control record: key version, type and the value's fields (snake_case dict)."""

    type_id: int
    key_version: int
    data: dict[str, Any]

    @property
    def control_type(self) -> ControlType:
        return CONTROL_TYPES[self.type_id]

    @property
    def name(self) -> str:
        return CONTROL_TYPES[self.type_id].name


def decode_control_key(key: bytes | None) -> tuple[int, int]:
    """``(key_version, type_id)`` of a control record key; raises :class:`ControlDecodeError`."""
    if key is None or len(key) < 4:
        raise ControlDecodeError("BAD_RECORD_FRAMING", f"control record key must be 4 bytes, got {0 if key is None else len(key)}")
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise ControlDecodeError("BAD_RECORD_FRAMING", f"control record key version {version} is negative")
    if len(key) != 4:
        raise ControlDecodeError("TRAILING_BYTES", f"control record key has {len(key) - 4} bytes after the type")
    return version, type_id


def decode_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Decode a control record (facts §3): key, then the value at schema version 0."""
    from kraft_replay.codec.records import RecordDecodeError, decode_message

    key_version, type_id = decode_control_key(key)
    ctype = CONTROL_TYPES.get(type_id)
    if ctype is None:
        name = _NAMES_OUTSIDE_METADATA.get(type_id, "UNKNOWN")
        raise ControlDecodeError("UNKNOWN_CONTROL_TYPE", f"control record type {type_id} ({name}) is not valid in the metadata log")
    if value is None:
        raise ControlDecodeError("BAD_RECORD_FRAMING", f"{ctype.name} control record has a null value")
    try:
        data, end = decode_message(ctype.schema, CONTROL_VALUE_VERSION, value, 0)
    except RecordDecodeError as exc:
        raise ControlDecodeError("RECORD_DECODE_ERROR", f"{ctype.name}: {exc}") from None
    except (ValueError, IndexError, KeyError) as exc:
        raise ControlDecodeError("RECORD_DECODE_ERROR", f"{ctype.name}: {exc}") from None
    if end != len(value):
        raise ControlDecodeError("TRAILING_BYTES", f"{ctype.name}: {len(value) - end} bytes after the message body")
    return ControlRecord(type_id, key_version, data)


def encode_control_record(record: ControlRecord) -> tuple[bytes, bytes]:
    """``(key, value)`` bytes of a control record (inverse of :func:`decode_control_record`)."""
    from kraft_replay.codec.records import encode_message

    ctype = CONTROL_TYPES.get(record.type_id)
    if ctype is None:
        raise ValueError(f"control record type {record.type_id} is not valid in the metadata log")
    key = _KEY.pack(record.key_version, record.type_id)
    return key, bytes(encode_message(ctype.schema, CONTROL_VALUE_VERSION, record.data))


def _json_value(f: FieldSpec, v: Any) -> Any:
    if v is None:
        return None
    if f.fields is not None:
        if f.is_array:
            return [_json_obj(f.fields, 0, e) for e in v]
        return _json_obj(f.fields, 0, v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    return v


def _json_obj(fields: tuple[FieldSpec, ...], version: int, data: dict[str, Any]) -> dict[str, Any]:
    return {f.json_name: _json_value(f, data.get(f.snake)) for f in fields if f.present_in(version)}


def control_json(rec: ControlRecord) -> str:
    """JSON of a control record value as the dump tool prints it after the control type: camelCase
    field names, every field of schema version 0 (e.g. ``{"version":0,"leaderId":1,...}``)."""
    return json.dumps(_json_obj(rec.control_type.schema.fields, CONTROL_VALUE_VERSION, rec.data), separators=(",", ":"))
