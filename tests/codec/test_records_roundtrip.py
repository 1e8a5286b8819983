"""decode(encode(x)) == x and encode(decode(b)) == b for random records of every type and version.

The hypothesis strategies are derived from the field tables: every field present in a version,
values drawn from the field's type (nullable fields may be null, tagged fields may hold their
default and are then left off the wire), plus random unknown tagged fields on every struct.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_replay.codec.records import (
    MetadataRecord,
    decode_message,
    decode_record_value,
    encode_message,
    encode_record_value,
    uuid_from_bytes,
)
from kraft_replay.codec.schema import CONTROL_SCHEMAS, RECORD_TYPES, FieldSpec, MessageSchema

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


def scalar_strategy(t: str) -> st.SearchStrategy[Any]:
    if t in _INTS:
        lo, hi = _INTS[t]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]))
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "uuid":
        return st.binary(min_size=16, max_size=16).map(uuid_from_bytes)
    if t == "string":
        return _TEXT
    if t in ("bytes", "records"):
        return st.binary(max_size=12)
    raise AssertionError(t)


def unknown_tags_strategy(fields: tuple[FieldSpec, ...]) -> st.SearchStrategy[list[tuple[int, bytes]]]:
    known = {f.tag for f in fields if f.tag is not None}
    tags = st.integers(0, 300).filter(lambda t: t not in known)
    return st.lists(st.tuples(tags, st.binary(max_size=6)), max_size=2, unique_by=lambda p: p[0]).map(
        lambda xs: sorted(xs)
    )


def field_strategy(f: FieldSpec, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    if f.fields is not None:
        inner = struct_strategy(f.fields, version, flexible)
        s = st.lists(inner, max_size=3) if f.is_array else inner
    elif f.is_array:
        s = st.lists(scalar_strategy(f.element_type), max_size=4)
    else:
        s = scalar_strategy(f.type)
    if f.nullable_in(version):
        s = st.one_of(st.none(), s)
    if f.tagged_in(version):
        s = st.one_of(st.just(f.default_value(version)), s)
    return s


def struct_strategy(fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> st.SearchStrategy[dict[str, Any]]:
    present = [f for f in fields if f.present_in(version)]
    base = st.fixed_dictionaries({f.snake: field_strategy(f, version, flexible) for f in present})
    if not flexible:
        return base
    return st.tuples(base, unknown_tags_strategy(fields)).map(
        lambda p: {**p[0], "_unknown_tagged": p[1]} if p[1] else p[0]
    )


def message_strategy(schema: MessageSchema, version: int) -> st.SearchStrategy[dict[str, Any]]:
    return struct_strategy(schema.fields, version, schema.is_flexible(version))


def record_strategy(api_keys: list[int] | None = None) -> st.SearchStrategy[MetadataRecord]:
    """A random record of any (or the given) type at any valid version."""
    keys = api_keys or sorted(RECORD_TYPES)
    pairs = [(k, v) for k in keys for v in RECORD_TYPES[k].schema.versions()]
    return st.sampled_from(pairs).flatmap(
        lambda kv: message_strategy(RECORD_TYPES[kv[0]].schema, kv[1]).map(lambda d: MetadataRecord(kv[0], kv[1], d))
    )


RECORD_VERSIONS = [(k, v) for k, rt in RECORD_TYPES.items() for v in rt.schema.versions()]
CONTROL_VERSIONS = [(n, v) for n, s in CONTROL_SCHEMAS.items() for v in s.versions()]


def test_every_type_and_version_is_exercised() -> None:
    # 25 types: 21 with version 0 only, RegisterBroker 0-3, Partition / PartitionChange / BrokerRegistrationChange 0-2
    assert len(RECORD_VERSIONS) == 21 + 4 + 3 * 3
    assert len(CONTROL_VERSIONS) == 6  # LeaderChangeMessage 0-1, four others 0


@pytest.mark.parametrize(("api_key", "version"), RECORD_VERSIONS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_record_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    body = data.draw(message_strategy(RECORD_TYPES[api_key].schema, version))
    rec = MetadataRecord(api_key, version, body)
    value = encode_record_value(rec)
    assert value[:3] == bytes([1, api_key, version])
    back = decode_record_value(value)
    assert back == rec
    assert encode_record_value(back) == value


@pytest.mark.parametrize(("name", "version"), CONTROL_VERSIONS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_control_message_round_trip(name: str, version: int, data: st.DataObject) -> None:
    schema = CONTROL_SCHEMAS[name]
    body = data.draw(message_strategy(schema, version))
    value = encode_message(schema, version, body)
    back, end = decode_message(schema, version, value)
    assert end == len(value)
    assert back == body
    assert encode_message(name, version, back) == value


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=16, max_size=16))
def test_uuid_text_form(raw: bytes) -> None:
    from kraft_replay.codec.records import uuid_to_bytes

    text = uuid_from_bytes(raw)
    assert len(text) == 22 and "=" not in text and "+" not in text and "/" not in text
    assert uuid_to_bytes(text) == raw
