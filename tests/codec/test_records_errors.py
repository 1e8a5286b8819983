"""Decoding failures: each gives a RecordDecodeError with the right code, never another exception or a hang."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_replay.codec.records import (
    MetadataRecord,
    RecordDecodeError,
    RecordEncodeError,
    decode_message,
    decode_record_value,
    encode_message,
    encode_record_value,
)

TOPIC = "AAAAAAAAAAEAAAAAAAAAAg"

SAMPLES = [
    MetadataRecord(12, 0, {"name": "metadata.version", "feature_level": 21}),
    MetadataRecord(2, 0, {"name": "foo", "topic_id": TOPIC}),
    MetadataRecord(
        3,
        2,
        {
            "partition_id": 1,
            "topic_id": TOPIC,
            "replicas": [1, 2, 3],
            "isr": [1, 2],
            "directories": [TOPIC, TOPIC, TOPIC],
            "leader": 1,
            "eligible_leader_replicas": [3],
        },
    ),
    MetadataRecord(5, 2, {"partition_id": 1, "topic_id": TOPIC, "isr": [1], "leader": -1, "last_known_elr": [2]}),
    MetadataRecord(
        0,
        3,
        {
            "broker_id": 4,
            "incarnation_id": TOPIC,
            "broker_epoch": 9,
            "rack": "r1",
            "end_points": [{"name": "PLAINTEXT", "host": "b4", "port": 9092, "security_protocol": 0}],
            "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 27}],
            "log_dirs": [TOPIC],
        },
    ),
    MetadataRecord(
        14,
        0,
        {
            "entity": [{"entity_type": "user", "entity_name": None}],
            "key": "producer_byte_rate",
            "value": 1024.0,
            "remove": False,
        },
    ),
    MetadataRecord(
        11,
        0,
        {
            "name": "alice",
            "mechanism": 1,
            "salt": b"\x01\x02",
            "stored_key": b"k" * 32,
            "server_key": b"s" * 32,
            "iterations": 4096,
        },
    ),
    MetadataRecord(25, 0, {"reason": "because"}),
]


def _code(value: bytes) -> str:
    with pytest.raises(RecordDecodeError) as exc:
        decode_record_value(value)
    assert str(exc.value).startswith(exc.value.code + ": ")
    assert "\n" not in str(exc.value)
    return exc.value.code


def test_frame_version_0_and_unknown() -> None:
    good = encode_record_value(SAMPLES[0])
    assert _code(b"\x00" + good[1:]) == "BAD_FRAME_VERSION"
    assert _code(b"\x02" + good[1:]) == "BAD_FRAME_VERSION"
    assert _code(b"\x81\x01" + good[1:]) == "BAD_FRAME_VERSION"  # frame version 129 as a 2-byte varint


@pytest.mark.parametrize("api_key", [6, 13, 16, 28, 127, 300, 40000])
def test_unknown_api_keys(api_key: int) -> None:
    from kraft_replay.codec.varint import write_uvarint

    assert _code(b"\x01" + write_uvarint(api_key) + b"\x00\x00") == "UNKNOWN_RECORD_TYPE"


@pytest.mark.parametrize(("api_key", "version"), [(0, 4), (3, 3), (5, 3), (17, 3), (20, 1), (2, 1), (12, 200)])
def test_versions_outside_valid_range(api_key: int, version: int) -> None:
    from kraft_replay.codec.varint import write_uvarint

    assert _code(bytes([1, api_key]) + write_uvarint(version) + b"\x00") == "UNSUPPORTED_RECORD_VERSION"
    with pytest.raises(RecordEncodeError, match="outside its valid versions"):
        encode_record_value(MetadataRecord(api_key, version, {}))


@pytest.mark.parametrize("rec", SAMPLES, ids=lambda r: f"{r.type_name}-v{r.version}")
def test_truncated_at_every_cut_point(rec: MetadataRecord) -> None:
    value = encode_record_value(rec)
    back = decode_record_value(value)
    assert {k: back.data[k] for k in rec.data} == rec.data
    for cut in range(len(value)):
        assert _code(value[:cut]) == "RECORD_DECODE_ERROR", cut


@pytest.mark.parametrize("rec", SAMPLES + [MetadataRecord(20, 0, {})], ids=lambda r: f"{r.type_name}-v{r.version}")
@pytest.mark.parametrize("garbage", [b"\x00", b"\xff\xff", b"garbage"])
def test_trailing_bytes(rec: MetadataRecord, garbage: bytes) -> None:
    assert _code(encode_record_value(rec) + garbage) == "TRAILING_BYTES"


def test_hostile_lengths_fail_fast() -> None:
    """Huge length/count fields are checked against the remaining bytes before anything is allocated."""
    big = b"\xfe\xff\xff\xff\x0f"  # varint 2**32 - 2
    cases = [
        b"\x01\x02\x00" + big + b"abc",  # TopicRecord name
        b"\x01\x03\x00" + b"\x00" * 20 + big,  # PartitionRecord replicas count
        b"\x01\x0c\x00\x11metadata.version\x00\x15" + big,  # tagged-field count
        b"\x01\x0c\x00\x11metadata.version\x00\x15\x01\x05" + big,  # tagged-field size
        b"\x01\x00\x00" + b"\x00" * 28 + big,  # RegisterBroker endpoints count
        b"\x01\x02\x00\xff\xff\xff\xff\xff\xff",  # overlong varint
    ]
    for value in cases:
        t0 = time.perf_counter()
        assert _code(value) == "RECORD_DECODE_ERROR"
        assert time.perf_counter() - t0 < 0.5


def test_string_longer_than_32767_is_rejected() -> None:
    from kraft_replay.codec.varint import write_uvarint

    name = b"x" * 32768
    value = b"\x01\x02\x00" + write_uvarint(len(name) + 1) + name + b"\x00" * 16 + b"\x00"
    assert _code(value) == "RECORD_DECODE_ERROR"
    with pytest.raises(RecordEncodeError, match="longer than 32767"):
        encode_record_value(MetadataRecord(2, 0, {"name": "x" * 32768, "topic_id": TOPIC}))


def test_bad_utf8_and_null_non_nullable() -> None:
    assert _code(b"\x01\x02\x00\x03\xff\xfe" + b"\x00" * 17) == "RECORD_DECODE_ERROR"
    assert _code(b"\x01\x02\x00\x00" + b"\x00" * 17) == "RECORD_DECODE_ERROR"  # null name


def test_known_tag_not_valid_for_version() -> None:
    # PartitionChangeRecord v0 carrying tag 6 (EligibleLeaderReplicas exists from v2 only)
    value = b"\x01\x05\x00" + b"\x00" * 20 + b"\x01\x06\x01\x01"
    assert _code(value) == "RECORD_DECODE_ERROR"
    assert (
        decode_record_value(b"\x01\x05\x02" + b"\x00" * 20 + b"\x01\x06\x01\x01").data["eligible_leader_replicas"] == []
    )


def test_tagged_size_mismatch() -> None:
    # Leader (tag 1, int32) declared with size 5
    value = b"\x01\x05\x00" + b"\x00" * 20 + b"\x01\x01\x05\x00\x00\x00\x01\x00"
    assert _code(value) == "RECORD_DECODE_ERROR"


def test_empty_and_tiny_values() -> None:
    for v in (b"", b"\x01", b"\x01\x14"):
        assert _code(v) == "RECORD_DECODE_ERROR"


def test_decode_message_errors() -> None:
    with pytest.raises(RecordDecodeError) as exc:
        decode_message("LeaderChangeMessage", 2, b"\x00\x00")
    assert exc.value.code == "UNSUPPORTED_RECORD_VERSION"
    with pytest.raises(RecordDecodeError) as exc:
        decode_message("SnapshotHeaderRecord", 0, b"\x00\x00\x00")
    assert exc.value.code == "RECORD_DECODE_ERROR"
    body = encode_message("SnapshotHeaderRecord", 0, {"version": 0, "last_contained_log_timestamp": 999})
    assert body.hex() == "000000000000000003e700"  # facts §3 vector value
    buf = b"junk" + body + b"tail"
    data, end = decode_message("SnapshotHeaderRecord", 0, buf, 4, 4 + len(body))
    assert data == {"version": 0, "last_contained_log_timestamp": 999} and end == 4 + len(body)
    with pytest.raises(KeyError, match="unknown message schema"):
        decode_message("NoSuchMessage", 0, b"")


def test_encode_errors_are_one_line() -> None:
    with pytest.raises(RecordEncodeError, match="unknown field"):
        encode_record_value(MetadataRecord(2, 0, {"name": "t", "topic_id": TOPIC, "topicid": TOPIC}))
    with pytest.raises(RecordEncodeError, match="does not exist in version 0"):
        encode_record_value(MetadataRecord(3, 0, {"directories": [TOPIC]}))
    with pytest.raises(RecordEncodeError, match="cannot encode"):
        encode_record_value(MetadataRecord(12, 0, {"name": "x", "feature_level": 70000}))
    with pytest.raises(RecordEncodeError, match="uuid"):
        encode_record_value(MetadataRecord(2, 0, {"name": "x", "topic_id": "not-a-uuid"}))
    with pytest.raises(RecordEncodeError, match="non-nullable"):
        encode_record_value(MetadataRecord(2, 0, {"name": None, "topic_id": TOPIC}))
    with pytest.raises(RecordEncodeError, match="unknown metadata record type id 6"):
        encode_record_value(MetadataRecord(6, 0, {}))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=64), st.sampled_from([0, 2, 3, 5, 17, 0x0E, 11, 27, 23]), st.integers(0, 3))
def test_random_bodies_only_raise_decode_errors(body: bytes, api_key: int, version: int) -> None:
    value = bytes([1, api_key, version]) + body
    try:
        rec = decode_record_value(value)
    except RecordDecodeError as exc:
        assert exc.code in {"RECORD_DECODE_ERROR", "TRAILING_BYTES", "UNSUPPORTED_RECORD_VERSION"}
        return
    assert rec.api_key == api_key and rec.version == version


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SAMPLES), st.data())
def test_mutated_values_only_raise_decode_errors(rec: MetadataRecord, data: st.DataObject) -> None:
    value = bytearray(encode_record_value(rec))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(value) - 1))
        value[i] = data.draw(st.integers(0, 255))
    try:
        decode_record_value(bytes(value))
    except RecordDecodeError as exc:
        assert exc.code in {
            "RECORD_DECODE_ERROR",
            "TRAILING_BYTES",
            "UNSUPPORTED_RECORD_VERSION",
            "UNKNOWN_RECORD_TYPE",
            "BAD_FRAME_VERSION",
        }


def test_non_bytes_input() -> None:
    with pytest.raises(RecordDecodeError) as exc:
        decode_record_value(10**9)  # type: ignore[arg-type]
    assert exc.value.code == "RECORD_DECODE_ERROR"
    assert decode_record_value(bytearray(b"\x01\x14\x00\x00")) == MetadataRecord(20, 0, {})
    assert decode_record_value(memoryview(b"\x01\x02\x00\x02a" + b"\x00" * 17)).data["name"] == "a"
    with pytest.raises(RecordDecodeError):
        decode_message("SnapshotFooterRecord", 0, "text")  # type: ignore[arg-type]
