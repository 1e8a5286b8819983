"""The generated bronze tables: exact schemas, a valid log under the replay rules, dump-tool JSON,
snapshots that match the replayed image, and determinism for a seed."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.pandas.types import from_arrow_schema

from generate_replay_checker import Violation, check_log
from kraft_replay.codec.arrow import CONTROL_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA
from kraft_replay.codec.arrow_payload import records_from_payload_columns
from kraft_replay.codec.jsonfmt import to_dump_json


def _rows(gen, name, where=None):
    df = gen.lake.read(name)
    if where:
        df = df.where(where)
    return df.toArrow().to_pylist()


@pytest.fixture(scope="module")
def log_rows(tiny_generated):
    return sorted(_rows(tiny_generated, "metadata_log"), key=lambda r: r["offset"])


@pytest.fixture(scope="module")
def control_rows(tiny_generated):
    return _rows(tiny_generated, "metadata_control")


def test_record_tables_have_exactly_the_bronze_schemas(tiny_generated) -> None:
    lake = tiny_generated.lake
    for name, arrow_schema in (("metadata_log", LOG_SCHEMA), ("metadata_control", CONTROL_SCHEMA),
                               ("snapshot_records", SNAPSHOT_SCHEMA)):
        got = lake.read(name).schema
        want = from_arrow_schema(arrow_schema)
        assert [(f.name, f.dataType) for f in got.fields] == [(f.name, f.dataType) for f in want.fields], name


def test_log_size_and_record_mix(tiny_generated, log_rows) -> None:
    res = tiny_generated.result
    assert res.rows["metadata_log"] == len(log_rows)
    total = len(log_rows) + sum(1 for r in _rows(tiny_generated, "metadata_control") if r["source_kind"] == "log")
    assert abs(total - res.plan.scenario.log.target_records) <= 50
    kinds = {r["record_type"] for r in log_rows}
    for k in ("FEATURE_LEVEL_RECORD", "REGISTER_BROKER_RECORD", "TOPIC_RECORD", "PARTITION_RECORD",
              "PARTITION_CHANGE_RECORD", "BROKER_REGISTRATION_CHANGE_RECORD", "NO_OP_RECORD", "REMOVE_TOPIC_RECORD",
              "CONFIG_RECORD", "CLIENT_QUOTA_RECORD", "ACCESS_CONTROL_ENTRY_RECORD", "USER_SCRAM_CREDENTIAL_RECORD",
              "DELEGATION_TOKEN_RECORD", "PRODUCER_IDS_RECORD", "REGISTER_CONTROLLER_RECORD",
              "ZK_MIGRATION_STATE_RECORD"):
        assert k in kinds, k
    # several records per batch on average, and exactly one payload column per row with a body
    batches = {r["batch_base_offset"] for r in log_rows}
    assert len(log_rows) / len(batches) > 1.5


def test_log_is_valid_under_the_replay_rules(log_rows, control_rows) -> None:
    log_ctl = [r for r in control_rows if r["source_kind"] == "log"]
    img, _ = check_log(log_rows, log_ctl)
    assert img.mv == 19                      # 3.5-IV2 -> 3.9-IV0 -> 3.8-IV0 -> 3.7-IV4
    assert len(img.brokers) == 5 and not any(b["fenced"] for b in img.brokers.values())
    # versions moved with metadata.version: v0 partition changes before 3.7-IV2, v1 after
    versions = {(r["api_key"], r["record_version"]) for r in log_rows}
    assert {(5, 0), (5, 1), (0, 2), (3, 0), (17, 0), (17, 1)} <= versions


def test_checker_catches_a_broken_log(log_rows, control_rows) -> None:
    """The checker is not vacuous: a PartitionChangeRecord for a missing partition, a wrong broker
    epoch and a NoOp below 3.3-IV1 are each rejected."""
    log_ctl = [r for r in control_rows if r["source_kind"] == "log"]
    rows = [dict(r) for r in log_rows]
    i = next(i for i, r in enumerate(rows) if r["api_key"] == 5)
    rows[i] = {**rows[i], "partition_change": {**rows[i]["partition_change"], "partition_id": 999}}
    with pytest.raises(Violation, match="missing partition"):
        check_log(rows, log_ctl)
    rows = [dict(r) for r in log_rows]
    i = next(i for i, r in enumerate(rows) if r["api_key"] == 17)
    rows[i] = {**rows[i], "broker_registration_change": {**rows[i]["broker_registration_change"], "broker_epoch": 1}}
    with pytest.raises(Violation, match="epoch"):
        check_log(rows, log_ctl)


def test_payload_json_equals_the_codec_rendering(log_rows, tiny_generated) -> None:
    import pyarrow as pa

    snap = _rows(tiny_generated, "snapshot_records")
    by_combo: dict[tuple[int, int], list[dict]] = {}
    for r in log_rows + snap:
        by_combo.setdefault((r["api_key"], r["record_version"]), []).append(r)
    assert len(by_combo) >= 18
    for combo, rows in sorted(by_combo.items()):
        sample = rows[:: max(1, len(rows) // 40)]
        recs = records_from_payload_columns(pa.Table.from_pylist(sample))
        for rec, row in zip(recs, sample, strict=True):
            assert row["payload_json"] == to_dump_json(rec), combo
            assert json.loads(row["payload_json"])["type"] == row["record_type"]


def test_snapshots_equal_the_replayed_image(tiny_generated, log_rows, control_rows) -> None:
    snap_rows = _rows(tiny_generated, "snapshot_records")
    ends = sorted({r["snapshot_end_offset"] for r in snap_rows if r["snapshot_kind"] == "snapshot"})
    assert len(ends) == tiny_generated.result.plan.scenario.log.snapshots
    log_ctl = [r for r in control_rows if r["source_kind"] == "log"]
    _, captured = check_log(log_rows, log_ctl, capture=set(ends))
    for end in ends:
        img = captured[end]
        rows = sorted((r for r in snap_rows if r["snapshot_end_offset"] == end), key=lambda r: r["position_in_snapshot"])
        assert [r["position_in_snapshot"] for r in rows] == list(range(1, len(rows) + 1))
        assert rows[0]["record_type"] == "FEATURE_LEVEL_RECORD" and rows[0]["feature_level"]["feature_level"] == img.mv
        parts = {(r["partition"]["topic_id"], r["partition"]["partition_id"]): r["partition"]
                 for r in rows if r["api_key"] == 3}
        assert set(parts) == set(img.partitions)
        for key, st in img.partitions.items():
            got = parts[key]
            for f in ("replicas", "isr", "leader", "leader_epoch", "partition_epoch"):
                assert got[f] == st[f], (end, key, f)
        topics = {r["topic"]["topic_id"]: r["topic"]["name"] for r in rows if r["api_key"] == 2}
        assert topics == img.topics
        brokers = {r["register_broker"]["broker_id"]: r["register_broker"] for r in rows if r["api_key"] == 0}
        assert {b: (d["broker_epoch"], d["fenced"]) for b, d in brokers.items()} == \
            {b: (s["epoch"], s["fenced"]) for b, s in img.brokers.items()}
        ctl = [r for r in control_rows if r["snapshot_end_offset"] == end and r["source_kind"] == "snapshot"]
        assert sorted(r["control_type"] for r in ctl) == ["SNAPSHOT_FOOTER", "SNAPSHOT_HEADER"]
        last_epoch = next(r["batch_leader_epoch"] for r in reversed(log_rows + log_ctl) if r["offset"] == end - 1)
        assert rows[0]["snapshot_epoch"] == last_epoch


def test_same_seed_same_log_other_seed_different(spark, tiny_generated) -> None:
    from kraft_replay.generate.log import metadata_log
    from kraft_replay.generate.plan import build_plan
    from kraft_replay.generate.scenario import load_scenario

    stored = tiny_generated.lake.read("metadata_log")
    old = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        again = metadata_log(spark, build_plan(load_scenario("tiny"))).repartition(5)
        assert again.exceptAll(stored).count() == 0
        assert stored.exceptAll(again).count() == 0
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", old)
    other = build_plan(load_scenario("tiny", seed=8))
    base = tiny_generated.result.plan
    assert other.topic_ids != base.topic_ids
    assert other.layout.sizes != base.layout.sizes
