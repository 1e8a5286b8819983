"""Arrow payload columns (docs/design.md "Common payload columns"): types, builder, inverse, Spark."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kraft_replay.codec.arrow_payload import (
    CONTROL_FIELDS,
    PAYLOAD_COLUMN_BY_API_KEY,
    PAYLOAD_FIELDS,
    PayloadError,
    build_payload_columns,
    build_struct_array,
    records_from_payload_columns,
)
from kraft_replay.codec.records import MetadataRecord, decode_record_value, encode_record_value
from kraft_replay.codec.schema import CONTROL_SCHEMAS, RECORD_TYPES

# shared helpers of the sibling test modules, importable whatever pytest's import mode
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_records_real import binary_files, walk_values  # noqa: E402
from test_records_roundtrip import message_strategy, record_strategy  # noqa: E402

DESIGN_COLUMNS = [
    "register_broker",
    "unregister_broker",
    "topic",
    "partition",
    "config",
    "partition_change",
    "fence_broker",
    "unfence_broker",
    "remove_topic",
    "delegation_token",
    "user_scram_credential",
    "feature_level",
    "client_quota",
    "producer_ids",
    "broker_registration_change",
    "access_control_entry",
    "remove_access_control_entry",
    "zk_migration_state",
    "remove_user_scram_credential",
    "begin_transaction",
    "abort_transaction",
    "remove_delegation_token",
    "register_controller",
]
TOPIC = "AAAAAAAAAAEAAAAAAAAAAg"


def _table(records: list[MetadataRecord | None]) -> pa.Table:
    keys = pa.array([None if r is None else r.api_key for r in records], pa.int32())
    vers = pa.array([None if r is None else r.version for r in records], pa.int32())
    cols = build_payload_columns(records)
    return pa.Table.from_arrays(
        [keys, vers, *cols], names=["api_key", "record_version"] + [f.name for f in PAYLOAD_FIELDS]
    )


def _strip_unknown(v):  # type: ignore[no-untyped-def]
    if isinstance(v, dict):
        return {k: _strip_unknown(x) for k, x in v.items() if k != "_unknown_tagged"}
    if isinstance(v, list):
        return [_strip_unknown(x) for x in v]
    return v


def test_columns_and_types_follow_design() -> None:
    assert [f.name for f in PAYLOAD_FIELDS] == DESIGN_COLUMNS
    assert list(PAYLOAD_COLUMN_BY_API_KEY.values()) == DESIGN_COLUMNS
    assert 20 not in PAYLOAD_COLUMN_BY_API_KEY and 24 not in PAYLOAD_COLUMN_BY_API_KEY
    by = {f.name: f.type for f in PAYLOAD_FIELDS}
    rb = by["register_broker"]
    assert rb.field("incarnation_id").type == pa.string()
    assert rb.field("end_points").type.value_type.field("port").type == pa.int32()  # uint16 as int32
    assert rb.field("log_dirs").type == pa.list_(pa.string())
    assert rb.field("is_migrating_zk_broker").type == pa.bool_()
    part = by["partition"]
    assert [f.name for f in part] == [
        "partition_id",
        "topic_id",
        "replicas",
        "isr",
        "removing_replicas",
        "adding_replicas",
        "leader",
        "leader_recovery_state",
        "leader_epoch",
        "partition_epoch",
        "directories",
        "eligible_leader_replicas",
        "last_known_elr",
    ]
    assert part.field("leader_recovery_state").type == pa.int8()
    assert by["client_quota"].field("value").type == pa.float64()
    assert by["user_scram_credential"].field("salt").type == pa.binary()
    assert by["broker_registration_change"].field("fenced").type == pa.int8()
    assert all(f.nullable for f in PAYLOAD_FIELDS)


def test_control_struct_types() -> None:
    assert [f.name for f in CONTROL_FIELDS] == [
        "leader_change",
        "snapshot_header",
        "snapshot_footer",
        "kraft_version",
        "kraft_voters",
    ]
    voters = {f.name: f.type for f in CONTROL_FIELDS}["kraft_voters"].field("voters").type.value_type
    assert voters.field("kraft_version_feature").type == pa.struct(
        [("min_supported_version", pa.int16()), ("max_supported_version", pa.int16())]
    )
    lc = {f.name: f.type for f in CONTROL_FIELDS}["leader_change"]
    assert lc.field("voters").type.value_type.names == ["voter_id", "voter_directory_id"]  # union of v0 and v1


def test_exactly_one_column_per_row_and_nulls_for_absent_fields() -> None:
    recs: list[MetadataRecord | None] = [
        MetadataRecord(20, 0, {}),
        decode_record_value(
            encode_record_value(
                MetadataRecord(3, 0, {"partition_id": 1, "topic_id": TOPIC, "replicas": [1], "isr": [1]})
            )
        ),
        None,
        MetadataRecord(2, 0, {"name": "t", "topic_id": TOPIC}),
        MetadataRecord(24, 0, {}),
    ]
    table = _table(recs)
    nonnull = [[c for c in PAYLOAD_COLUMN_BY_API_KEY.values() if table.column(c)[i].is_valid] for i in range(len(recs))]
    assert nonnull == [[], ["partition"], [], ["topic"], []]
    row = table.column("partition")[1].as_py()
    assert row["directories"] is None and row["eligible_leader_replicas"] is None  # not in v0
    assert row["leader_recovery_state"] == 0 and row["replicas"] == [1]
    assert records_from_payload_columns(table)[1:4] == [recs[1], None, recs[3]]


def test_real_records_round_trip_through_arrow(real_kraft_dir: Path) -> None:
    recs = []
    for path in binary_files(real_kraft_dir):
        values, _ = walk_values(path.read_bytes())
        recs += [decode_record_value(v) for v in values]
    table = _table(recs)
    assert table.num_rows == len(recs) > 70000
    back = records_from_payload_columns(table)
    assert back == recs
    # one column, exactly the records of that type
    assert table.column("partition_change").null_count == len(recs) - sum(r.api_key == 5 for r in recs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.one_of(st.none(), record_strategy()), min_size=1, max_size=12))
def test_random_records_round_trip_through_arrow(recs: list[MetadataRecord | None]) -> None:
    table = _table(recs)
    back = records_from_payload_columns(table)
    for r, b in zip(recs, back, strict=True):
        if r is None:
            assert b is None
            continue
        assert b is not None
        expected = decode_record_value(encode_record_value(r))
        assert b == MetadataRecord(r.api_key, r.version, _strip_unknown(expected.data))
        assert encode_record_value(b) == encode_record_value(
            MetadataRecord(r.api_key, r.version, _strip_unknown(r.data))
        )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_control_struct_array(data: st.DataObject) -> None:
    schema = CONTROL_SCHEMAS["VotersRecord"]
    rows = data.draw(st.lists(st.one_of(st.none(), message_strategy(schema, 0)), min_size=1, max_size=5))
    arr = build_struct_array(schema, rows)
    assert arr.type == {f.name: f.type for f in CONTROL_FIELDS}["kraft_voters"]
    assert arr.to_pylist() == [None if r is None else _strip_unknown(r) for r in rows]


def test_inverse_errors() -> None:
    table = _table([MetadataRecord(2, 0, {"name": "t", "topic_id": TOPIC})])
    with pytest.raises(PayloadError, match="no 'api_key' column"):
        records_from_payload_columns(table.drop_columns(["api_key"]))
    with pytest.raises(PayloadError, match="no 'topic' column"):
        records_from_payload_columns(table.drop_columns(["topic"]))
    bad = table.set_column(1, "record_version", pa.array([3], pa.int32()))
    with pytest.raises(PayloadError, match="no version 3"):
        records_from_payload_columns(bad)
    nulled = table.set_column(table.schema.get_field_index("topic"), "topic", pa.nulls(1, PAYLOAD_FIELDS[2].type))
    with pytest.raises(PayloadError, match="null 'topic' payload column"):
        records_from_payload_columns(nulled)
    with pytest.raises(PayloadError, match="unknown type"):
        build_payload_columns([MetadataRecord(6, 0, {})])


def test_payload_columns_through_spark(spark) -> None:  # type: ignore[no-untyped-def]
    """Spark accepts the payload types and gives the same rows back."""
    recs = [
        decode_record_value(encode_record_value(MetadataRecord(k, RECORD_TYPES[k].max_version, {})))
        for k in PAYLOAD_COLUMN_BY_API_KEY
        if k not in (2, 3, 5, 9, 0, 27)  # those need a non-default uuid/array to be interesting; added below
    ]
    recs += [
        MetadataRecord(
            0,
            3,
            decode_record_value(
                encode_record_value(
                    MetadataRecord(
                        0,
                        3,
                        {
                            "broker_id": 1,
                            "incarnation_id": TOPIC,
                            "end_points": [{"name": "P", "host": "h", "port": 65535, "security_protocol": 0}],
                            "log_dirs": [TOPIC],
                        },
                    )
                )
            ).data,
        ),
        decode_record_value(
            encode_record_value(MetadataRecord(5, 2, {"partition_id": 2, "topic_id": TOPIC, "isr": [1]}))
        ),
        MetadataRecord(20, 0, {}),
    ]
    table = _table(recs)
    df = spark.createDataFrame(table)
    assert df.count() == len(recs)
    back = df.toArrow()
    assert records_from_payload_columns(back) == recs
    port = df.selectExpr("register_broker.end_points[0].port AS p").where("p IS NOT NULL").first()["p"]
    assert port == 65535
