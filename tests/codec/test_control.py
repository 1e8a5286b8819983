"""Control records (facts §3): the snapshot-header vector, every metadata control type, bad keys."""

from __future__ import annotations

import pytest

from kraft_replay.codec.batch import RecordBatch, build_batch, encode_batch, iter_batches
from kraft_replay.codec.control import (
    CONTROL_TYPES,
    ControlDecodeError,
    ControlRecord,
    decode_control_record,
    encode_control_record,
)

HEADER_VECTOR = bytes.fromhex(
    "0000000000000000 00000047 00000005 02 16716ae4 0020 00000000 00000000000004d2"
    "00000000000004d2 ffffffffffffffff ffff ffffffff 00000001 2a 00 00 00 08 00000003 16"
    "0000 00000000000003e7 00 00".replace(" ", "")
)


def test_snapshot_header_vector() -> None:
    (b,) = list(iter_batches(HEADER_VECTOR))
    assert isinstance(b, RecordBatch) and b.is_control and b.partition_leader_epoch == 5
    (r,) = b.records
    rec = decode_control_record(r.key, r.value)
    assert rec.name == "SNAPSHOT_HEADER" and rec.key_version == 0
    assert rec.data == {"version": 0, "last_contained_log_timestamp": 999}
    key, value = encode_control_record(rec)
    assert build_batch([value], keys=[key], base_offset=0, leader_epoch=5, timestamp_ms=1234, control=True) == HEADER_VECTOR
    assert encode_batch(b) == HEADER_VECTOR


SAMPLES = {
    2: {"version": 0, "leader_id": 1, "voters": [{"voter_id": 1}, {"voter_id": 2}], "granting_voters": [{"voter_id": 1}]},
    3: {"version": 0, "last_contained_log_timestamp": 1},
    4: {"version": 0},
    5: {"version": 0, "kraft_version": 1},
}


@pytest.mark.parametrize("type_id", sorted(SAMPLES))
def test_roundtrip(type_id: int) -> None:
    rec = ControlRecord(type_id, 0, SAMPLES[type_id])
    key, value = encode_control_record(rec)
    back = decode_control_record(key, value)
    assert back.name == CONTROL_TYPES[type_id].name
    for k, v in SAMPLES[type_id].items():
        assert back.data[k] == v


def test_voters_roundtrip_through_its_own_decode() -> None:
    from kraft_replay.codec.records import decode_message

    schema = CONTROL_TYPES[6].schema
    # a minimal VotersRecord built from the schema defaults, then one voter
    value = bytes.fromhex("0000" "02" "00000001" + "00" * 16 + "02" "02" "41" "02" "68" "2384" "00" "0000" "0001" "00" "00" "00")
    data, end = decode_message(schema, 0, value, 0)
    assert end == len(value)
    rec = decode_control_record(b"\x00\x00\x00\x06", value)
    assert rec.name == "KRAFT_VOTERS" and rec.data == data
    assert encode_control_record(rec) == (b"\x00\x00\x00\x06", value)


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        (b"\x00\x00\x00\x01", b"\x00", "UNKNOWN_CONTROL_TYPE"),      # COMMIT marker
        (b"\x00\x00\x00\x09", b"\x00", "UNKNOWN_CONTROL_TYPE"),
        (b"\xff\xff\x00\x02", b"\x00", "BAD_RECORD_FRAMING"),        # negative key version
        (b"\x00\x00", b"\x00", "BAD_RECORD_FRAMING"),
        (None, b"\x00", "BAD_RECORD_FRAMING"),
        (b"\x00\x00\x00\x04", None, "BAD_RECORD_FRAMING"),
        (b"\x00\x00\x00\x04", b"\x00\x00\x00\x00", "TRAILING_BYTES"),
        (b"\x00\x00\x00\x03", b"\x00\x00\x00", "RECORD_DECODE_ERROR"),
    ],
)
def test_bad_control_records(key: bytes | None, value: bytes | None, code: str) -> None:
    with pytest.raises(ControlDecodeError) as err:
        decode_control_record(key, value)
    assert err.value.code == code


def test_key_version_above_zero_is_read_as_zero() -> None:
    rec = decode_control_record(b"\x00\x01\x00\x04", b"\x00\x00\x00")
    assert rec.key_version == 1 and rec.name == "SNAPSHOT_FOOTER"
