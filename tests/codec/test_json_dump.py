"""to_dump_json / from_dump_json against the real ``kafka-dump-log --cluster-metadata-decoder`` text."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from kraft_replay.codec.jsonfmt import DumpJsonError, from_dump_json, java_double, json_string, to_dump_json
from kraft_replay.codec.records import MetadataRecord, decode_record_value, encode_record_value

# shared helpers of the sibling test modules, importable whatever pytest's import mode
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_records_real import binary_files, walk_values  # noqa: E402
from test_records_roundtrip import record_strategy  # noqa: E402

TOPIC = "AAAAAAAAAAEAAAAAAAAAAg"


def payload_lines(real_kraft_dir: Path) -> list[tuple[str, str]]:
    out = []
    for path in sorted(real_kraft_dir.glob("text__*cluster-metadata-decoder*.txt")):
        for line in path.read_text().splitlines():
            if line.startswith("#"):
                continue
            m = re.search(r"payload: (\{.*\})\s*$", line)
            if m:
                out.append((path.name, m.group(1)))
    return out


def _schema_drift_2_8(src: dict) -> dict:
    """What the current schemas print for a Kafka 2.8-preview payload.

    Two fields changed after 2.8: RegisterBrokerRecord gained ``Fenced`` (declared in every
    version, default true) and PartitionRecord's Removing/AddingReplicas stopped being nullable
    (2.8 printed them as null; the current schema reads null as the empty default).
    """
    out = json.loads(json.dumps(src))
    if out["type"] == "REGISTER_BROKER_RECORD":
        out["data"]["fenced"] = True
    if out["type"] == "PARTITION_RECORD":
        for k in ("removingReplicas", "addingReplicas"):
            if out["data"][k] is None:
                out["data"][k] = []
    return out


def test_every_payload_line_round_trips(real_kraft_dir: Path) -> None:
    lines = payload_lines(real_kraft_dir)
    assert len(lines) == 13  # 7 in the 2.8 README transcript, 6 in the 3.7 Strimzi excerpt
    exact = 0
    for fname, src in lines:
        rec = from_dump_json(src)
        again = decode_record_value(encode_record_value(rec))
        out = to_dump_json(again)
        if "__2.8.txt" in fname:
            assert json.loads(out) == _schema_drift_2_8(json.loads(src)), src
            if json.loads(out) == json.loads(src):
                assert out == src
                exact += 1
        else:
            assert out == src  # Kafka 3.7 output: byte-for-byte the same text
            exact += 1
    assert exact == 10  # all but the two 2.8 RegisterBroker lines and the 2.8 PartitionRecord line


def test_tagged_fields_print_only_when_not_default() -> None:
    base = {
        "partition_id": 0,
        "topic_id": TOPIC,
        "replicas": [1],
        "isr": [1],
        "leader": 1,
        "leader_epoch": 0,
        "partition_epoch": 0,
        "directories": [TOPIC],
    }
    assert "leaderRecoveryState" not in to_dump_json(MetadataRecord(3, 1, base))
    assert '"leaderRecoveryState":1,' in to_dump_json(MetadataRecord(3, 1, {**base, "leader_recovery_state": 1}))
    j = to_dump_json(
        MetadataRecord(5, 2, {"partition_id": 3, "topic_id": TOPIC, "isr": [1, 2], "eligible_leader_replicas": []})
    )
    assert j == (
        '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":3,'
        '"topicId":"AAAAAAAAAAEAAAAAAAAAAg","isr":[1,2],"eligibleLeaderReplicas":[]}}'
    )
    assert to_dump_json(MetadataRecord(20, 0, {})) == '{"type":"NO_OP_RECORD","version":0,"data":{}}'
    assert to_dump_json(MetadataRecord(17, 0, {"broker_id": 1, "broker_epoch": 5, "fenced": -1})) == (
        '{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":0,"data":{"brokerId":1,"brokerEpoch":5,"fenced":-1}}'
    )


def test_bytes_floats_and_escapes() -> None:
    rec = MetadataRecord(
        11,
        0,
        {
            "name": 'a"b\\c\n\x01é',
            "mechanism": 1,
            "salt": b"\x00\xff",
            "stored_key": b"",
            "server_key": b"abc",
            "iterations": 4096,
        },
    )
    j = to_dump_json(rec)
    assert '"name":"a\\"b\\\\c\\n\\u0001é"' in j
    assert '"salt":"AP8=","storedKey":"","serverKey":"YWJj"' in j
    assert from_dump_json(j) == rec
    q = MetadataRecord(
        14, 0, {"entity": [{"entity_type": "user", "entity_name": None}], "key": "k", "value": 1e7, "remove": False}
    )
    assert '"value":1.0E7' in to_dump_json(q)
    assert from_dump_json(to_dump_json(q)) == q


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (1e7, "1.0E7"),
        (1e-4, "1.0E-4"),
        (0.001, "0.001"),
        (0.5, "0.5"),
        (1024.0, "1024.0"),
        (9999999.0, "9999999.0"),
        (-2.5e-5, "-2.5E-5"),
        (1.5e300, "1.5E300"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (123456.789, "123456.789"),
        (float("inf"), "Infinity"),
        (float("nan"), "NaN"),
    ],
)
def test_java_double(x: float, text: str) -> None:
    assert java_double(x) == text


def test_json_string_escapes_like_jackson() -> None:
    assert json_string("plain") == '"plain"'
    assert json_string("\x1f\t/") == '"\\u001F\\t/"'


def test_real_binary_records_round_trip_through_json(real_kraft_dir: Path) -> None:
    n = 0
    for path in binary_files(real_kraft_dir):
        values, _ = walk_values(path.read_bytes())
        for value in values:
            rec = decode_record_value(value)
            text = to_dump_json(rec)
            assert from_dump_json(text) == rec
            n += 1
    assert n > 70000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(record_strategy())
def test_random_records_round_trip_through_json(rec: MetadataRecord) -> None:
    text = to_dump_json(rec)
    assert json.loads(text)["type"] == rec.type_name
    expected = decode_record_value(encode_record_value(rec))
    stripped = _strip_unknown(expected.data)
    assert from_dump_json(text) == MetadataRecord(rec.api_key, rec.version, stripped)


def _strip_unknown(v):  # type: ignore[no-untyped-def]
    if isinstance(v, dict):
        return {k: _strip_unknown(x) for k, x in v.items() if k != "_unknown_tagged"}
    if isinstance(v, list):
        return [_strip_unknown(x) for x in v]
    return v


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json", "not JSON"),
        ('{"type":"NOPE_RECORD","version":0,"data":{}}', "unknown record type"),
        ('{"type":"TOPIC_RECORD","version":1,"data":{}}', "no version 1"),
        ('{"type":"TOPIC_RECORD","version":0,"data":{"name":"x","color":"red"}}', "unknown field"),
        ('{"type":"TOPIC_RECORD","version":0,"data":{"name":"x","topicId":"zz"}}', "uuid"),
        ('{"type":"TOPIC_RECORD","version":0,"data":{"name":5}}', "expected a string"),
        ('{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"x","featureLevel":null}}', "null is not allowed"),
        (
            '{"type":"PARTITION_RECORD","version":1,"data":{"directories":["AAAAAAAAAAEAAAAAAAAAAg"],"leader":"1"}}',
            "expected an integer",
        ),
        ("[1,2]", "needs"),
    ],
)
def test_from_dump_json_errors(text: str, match: str) -> None:
    with pytest.raises(DumpJsonError, match=match):
        from_dump_json(text)


def test_absent_fields_take_defaults() -> None:
    rec = from_dump_json('{"type":"PARTITION_CHANGE_RECORD","version":0,"data":{"partitionId":1}}')
    assert rec.data["leader"] == -2 and rec.data["isr"] is None and rec.data["topic_id"] == "AAAAAAAAAAAAAAAAAAAAAA"
    assert from_dump_json('{"type":"REGISTER_BROKER_RECORD","version":0,"data":{}}').data["fenced"] is True


def test_message_json_and_bad_values() -> None:
    from kraft_replay.codec.jsonfmt import message_json
    from kraft_replay.codec.schema import CONTROL_SCHEMAS

    lc = CONTROL_SCHEMAS["LeaderChangeMessage"]
    assert message_json(lc, 0, {"version": 0, "leader_id": 3, "voters": [{"voter_id": 1}], "granting_voters": []}) == (
        '{"version":0,"leaderId":3,"voters":[{"voterId":1}],"grantingVoters":[]}'
    )
    with pytest.raises(ValueError, match="no version 2"):
        message_json(lc, 2, {})
    with pytest.raises(ValueError, match="TOPIC_RECORD v0: cannot render JSON"):
        to_dump_json(MetadataRecord(2, 0, {"name": 5, "topic_id": TOPIC}))


def test_deeply_nested_json_is_a_dump_json_error() -> None:
    """Hostile nesting must surface as DumpJsonError, not RecursionError."""
    import pytest as _pytest

    from kraft_replay.codec.jsonfmt import DumpJsonError, from_dump_json

    deep = '{"type":"TOPIC_RECORD","version":0,"data":' + "[" * 200_000 + "]" * 200_000 + "}"
    with _pytest.raises(DumpJsonError):
        from_dump_json(deep)
