"""Hex test vectors of facts §1.8 and §2.4 and the schemas README: decode, check values, re-encode exactly."""

from __future__ import annotations

import pytest

from kraft_replay.codec.records import MetadataRecord, decode_record_value, encode_record_value

TOPIC = "AAAAAAAAAAEAAAAAAAAAAg"  # uuid (0x1, 0x2) in Kafka's text form
ZERO = "AAAAAAAAAAAAAAAAAAAAAA"
UUID_34 = "AAAAAAAAAAMAAAAAAAAABA"
UUID_56 = "AAAAAAAAAAUAAAAAAAAABg"
PART0 = (
    "00000000 0000000000000001 0000000000000002 03 00000001 00000002 03 00000001 00000002 01 01"
    " 00000001 00000000 00000000"
)
RB2 = (
    "00000001 00 0000000000000003 0000000000000004 000000000000000a 02 0a504c41494e54455854 0268 2384 0000 00"
    " 02 116d657461646174612e76657273696f6e 0001 0015 00 00 01 00"
)

# (api key, version, body hex, expected data subset)
VECTORS: list[tuple[int, int, str, dict[str, object]]] = [
    (12, 0, "116d657461646174612e76657273696f6e 0015 00", {"name": "metadata.version", "feature_level": 21}),
    (2, 0, "04666f6f 00000000000000010000000000000002 00", {"name": "foo", "topic_id": TOPIC}),
    (20, 0, "00", {}),
    (4, 0, "02 0274 026b 00 00", {"resource_type": 2, "resource_name": "t", "name": "k", "value": None}),
    (17, 0, "00000001 0000000000000064 01 00 01 01", {"broker_id": 1, "broker_epoch": 100, "fenced": 1}),
    (17, 1, "00000001 0000000000000064 01 01 01 01", {"fenced": 0, "in_controlled_shutdown": 1}),
    (
        5,
        2,
        "00000003 0000000000000001 0000000000000002 00",
        {
            "partition_id": 3,
            "topic_id": TOPIC,
            "isr": None,
            "leader": -2,
            "leader_recovery_state": -1,
            "eligible_leader_replicas": None,
            "directories": None,
        },
    ),
    (
        5,
        2,
        "00000003 0000000000000001 0000000000000002 02 05 01 00 06 01 01",
        {"leader_recovery_state": 0, "eligible_leader_replicas": [], "last_known_elr": None},
    ),
    (
        5,
        0,
        "00000000 0000000000000001 0000000000000002 02 0009 0300000001 00000002 0104 00000002",
        {"partition_id": 0, "isr": [1, 2], "leader": 2, "replicas": None},
    ),
    (23, 0, "00", {"name": None}),
    (23, 0, "01 00 03 03 6162", {"name": "ab"}),
    (
        3,
        0,
        PART0 + " 00",
        {
            "replicas": [1, 2],
            "isr": [1, 2],
            "removing_replicas": [],
            "adding_replicas": [],
            "leader": 1,
            "leader_epoch": 0,
            "partition_epoch": 0,
            "leader_recovery_state": 0,
        },
    ),
    (3, 1, PART0 + " 03" + "00" * 32 + " 00", {"directories": [ZERO, ZERO]}),
    (
        0,
        2,
        RB2 + " 00",
        {
            "broker_id": 1,
            "is_migrating_zk_broker": False,
            "incarnation_id": UUID_34,
            "broker_epoch": 10,
            "end_points": [{"name": "PLAINTEXT", "host": "h", "port": 9092, "security_protocol": 0}],
            "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 21}],
            "rack": None,
            "fenced": True,
            "in_controlled_shutdown": False,
        },
    ),
    (0, 3, RB2 + " 01 00 11 02 0000000000000005 0000000000000006", {"log_dirs": [UUID_56], "fenced": True}),
]


@pytest.mark.parametrize(("api_key", "version", "body", "expected"), VECTORS)
def test_body_vector(api_key: int, version: int, body: str, expected: dict[str, object]) -> None:
    value = bytes([1, api_key, version]) + bytes.fromhex(body.replace(" ", ""))
    rec = decode_record_value(value)
    assert (rec.api_key, rec.version) == (api_key, version)
    for k, v in expected.items():
        assert rec.data[k] == v, k
    assert encode_record_value(rec) == value


def test_batch_vector_record_values() -> None:
    """The two record values inside the facts §1.8 data batch."""
    fl = bytes.fromhex("010c00116d657461646174612e76657273696f6e001500")
    noop = bytes.fromhex("01140000")
    assert decode_record_value(fl) == MetadataRecord(12, 0, {"name": "metadata.version", "feature_level": 21})
    assert decode_record_value(noop) == MetadataRecord(20, 0, {})
    assert encode_record_value(MetadataRecord(12, 0, {"name": "metadata.version", "feature_level": 21})) == fl
    assert encode_record_value(MetadataRecord(20, 0, {})) == noop


def test_encode_fills_defaults_and_orders_tags() -> None:
    """Absent fields take defaults; tagged fields are written in ascending tag order (Directories, tag 8, last)."""
    rec = MetadataRecord(5, 1, {"partition_id": 7, "topic_id": TOPIC, "directories": [ZERO], "leader": 3})
    value = encode_record_value(rec)
    body = value[3:]
    assert body[20] == 2  # after PartitionId (4 bytes) and TopicId (16): two tagged fields
    assert body[21:23] == bytes([1, 4]) and body[23:27] == (3).to_bytes(4, "big")  # tag 1 Leader first
    assert body[27:30] == bytes([8, 17, 2])  # then tag 8 Directories: size 1 + 16, compact count 1+1
    back = decode_record_value(value)
    assert back.data["leader"] == 3 and back.data["directories"] == [ZERO] and back.data["isr"] is None


def test_unknown_tagged_fields_are_kept_and_reemitted() -> None:
    # TopicRecord with unknown tags 5 and 9 (and nothing else)
    value = bytes.fromhex("01020004666f6f00000000000000010000000000000002020502abcd0901ff")
    rec = decode_record_value(value)
    assert rec.data["_unknown_tagged"] == [(5, b"\xab\xcd"), (9, b"\xff")]
    assert encode_record_value(rec) == value
    # nested: an unknown tag inside a RegisterBrokerRecord endpoint element
    base = bytes.fromhex("010002" + RB2.replace(" ", "") + "00")
    i = base.index(bytes.fromhex("2384 0000 00".replace(" ", ""))) + 4
    nested = base[:i] + bytes.fromhex("01 07 01 2a".replace(" ", "")) + base[i + 1 :]
    rec = decode_record_value(nested)
    assert rec.data["end_points"][0]["_unknown_tagged"] == [(7, b"\x2a")]
    assert encode_record_value(rec) == nested
