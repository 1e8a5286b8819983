"""The generated bronze tables: exact schemas, a valid log under the replay rules, dump-tool JSON,
snapshots that match the replayed image, and determinism for a seed."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.pandas.types import from_arrow_schema

from generate_replay_checker import Violation, check_log
from kraft_replay.codec.arrow_payload import records_from_payload_columns
from kraft_replay.codec.jsonfmt import to_dump_json
from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA


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


def _mutate(rows, i, column, **changes):
    out = [dict(r) for r in rows]
    out[i] = {**out[i], column: {**out[i][column], **changes}}
    return out


def test_checker_catches_a_broken_log(log_rows, control_rows) -> None:
    """The checker is not vacuous: a PartitionChangeRecord for a missing partition, a wrong broker epoch,
    a change that changes nothing, an ISR shrink without a leader-epoch bump below 3.6-IV0, a fenced ISR
    member, an illegal metadata.version downgrade, a level outside the brokers' ranges and a log not
    starting with metadata.version are each rejected (a NoOp below 3.3-IV1: test_legacy_scenario_log)."""
    log_ctl = [r for r in control_rows if r["source_kind"] == "log"]
    check_log(log_rows, log_ctl)                      # the unmutated log passes
    rows = log_rows
    pcs = [i for i, r in enumerate(rows) if r["api_key"] == 5]
    with pytest.raises(Violation, match="missing partition"):
        check_log(_mutate(rows, pcs[0], "partition_change", partition_id=999), log_ctl)
    i = next(i for i, r in enumerate(rows) if r["api_key"] == 17)
    with pytest.raises(Violation, match="epoch"):
        check_log(_mutate(rows, i, "broker_registration_change", broker_epoch=1), log_ctl)
    # a record repeating the previous change of its partition changes nothing
    i = next(i for i in pcs if rows[i]["partition_change"]["leader"] == -2 and rows[i]["partition_change"]["isr"]
             and rows[i + 1]["api_key"] in (5, 20) and rows[i + 1]["record_version"] == rows[i]["record_version"])
    dup = [dict(r) for r in rows]
    dup[i + 1] = {**dup[i + 1], "api_key": 5, "record_type": "PARTITION_CHANGE_RECORD",
                  "partition_change": dict(rows[i]["partition_change"])}
    with pytest.raises(Violation, match="changes nothing"):
        check_log(dup, log_ctl)
    # below 3.6-IV0 (tiny starts at 3.5-IV2) an ISR shrink must set Leader
    first_raise = next(r["offset"] for r in rows if r["api_key"] == 12 and r["feature_level"]["feature_level"] >= 12)
    cands = [i for i in pcs if rows[i]["offset"] < first_raise and rows[i]["partition_change"]["isr"] is not None
             and rows[i]["partition_change"]["leader"] != -2][:30]
    _, before = check_log(rows, log_ctl, capture={rows[i]["offset"] for i in cands})
    i = next(i for i in cands if set(before[rows[i]["offset"]].partitions[
        (rows[i]["partition_change"]["topic_id"], rows[i]["partition_change"]["partition_id"])]["isr"])
        - set(rows[i]["partition_change"]["isr"]))
    with pytest.raises(Violation, match="leader-epoch bump"):
        check_log(_mutate(rows, i, "partition_change", leader=-2), log_ctl)
    # an ISR written with a broker that is fenced at that moment
    fence = next(r for r in rows if r["api_key"] == 17 and r["broker_registration_change"]["fenced"] == 1)
    b = fence["broker_registration_change"]["broker_id"]
    i = next(i for i in pcs if rows[i]["offset"] > fence["offset"] and rows[i]["partition_change"]["isr"])
    with pytest.raises(Violation, match=f"ISR member {b} is fenced"):
        check_log(_mutate(rows, i, "partition_change", isr=[*rows[i]["partition_change"]["isr"], b]), log_ctl)
    # metadata.version records: the accepted 3.9-IV0 -> 3.8-IV0 downgrade turned into one across 3.7-IV2,
    # the raise to 3.9-IV0 turned into one above the 3.9 brokers' range, and a log not starting with it
    mvs = [i for i, r in enumerate(rows) if r["api_key"] == 12]
    down = next(i for i in mvs if rows[i]["feature_level"]["feature_level"] == 20)
    with pytest.raises(Violation, match="crosses a level that changed metadata"):
        check_log(_mutate(rows, down, "feature_level", feature_level=16), log_ctl)
    up = next(i for i in mvs if rows[i]["feature_level"]["feature_level"] == 21)
    with pytest.raises(Violation, match="outside broker .* supported range"):
        check_log(_mutate(rows, up, "feature_level", feature_level=22), log_ctl)
    with pytest.raises(Violation, match="before the metadata.version FeatureLevelRecord"):
        check_log(_mutate(rows, mvs[0], "feature_level", name="group.version"), log_ctl)


def test_no_partition_change_changes_nothing_and_shrinks_bump_the_epoch(log_rows, control_rows) -> None:
    """Counted directly (independent of the checker): every PartitionChangeRecord differs from the
    partition's state, and tiny (3.5-IV2 until the upgrade) bumps the leader epoch on ISR shrinks."""
    state: dict = {}
    shrinks_before_36 = 0
    mv = 0
    for r in log_rows:
        if r["api_key"] == 12 and r["feature_level"]["name"] == "metadata.version":
            mv = r["feature_level"]["feature_level"]
        elif r["api_key"] == 3:
            d = r["partition"]
            state[(d["topic_id"], d["partition_id"])] = {"isr": d["isr"], "replicas": d["replicas"]}
        elif r["api_key"] == 5:
            d = r["partition_change"]
            st = state[(d["topic_id"], d["partition_id"])]
            changed = d["leader"] != -2 or any(d[f] is not None and d[f] != st.get(f) for f in ("isr", "replicas")) \
                or d["adding_replicas"] is not None or d["removing_replicas"] is not None
            assert changed, r["offset"]
            if d["isr"] is not None and set(st["isr"]) - set(d["isr"]) and mv < 12:
                assert d["leader"] != -2, r["offset"]
                shrinks_before_36 += 1
            for f in ("isr", "replicas"):
                if d[f] is not None:
                    st[f] = d[f]
    assert shrinks_before_36 > 100


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
    """Same seed: the log and every derived table are generated again identically (whatever the
    partitioning); another seed: different data, not just different plan parameters."""
    from kraft_replay.generate.log import metadata_log
    from kraft_replay.generate.plan import build_plan
    from kraft_replay.lake.keys import lake_key
    from kraft_replay.generate.requests import feature_update_requests, metadata_requests, produce_requests
    from kraft_replay.generate.runner import scenario_events
    from kraft_replay.generate.scenario import load_scenario
    from kraft_replay.generate.timelines import broker_progress

    lake = tiny_generated.lake
    stored = lake.read("metadata_log")
    old = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        plan = build_plan(load_scenario("tiny"))
        again = metadata_log(spark, plan, lake_key(str(tiny_generated.lake_dir), create=False)).repartition(5)
        assert again.exceptAll(stored).count() == 0
        assert stored.exceptAll(again).count() == 0
        for name, df in (("broker_progress", broker_progress(spark, plan)),
                         ("metadata_requests", metadata_requests(spark, plan)),
                         ("produce_requests", produce_requests(spark, plan, stored)),
                         ("feature_update_requests", feature_update_requests(spark, plan)),
                         ("scenario_events", scenario_events(spark, plan))):
            table = lake.read(name)
            assert df.count() == table.count() > 0, name
            assert df.exceptAll(table).count() == 0, name
        other_plan = build_plan(load_scenario("tiny", seed=8))
        other = metadata_log(spark, other_plan)
        cols = ["offset", "api_key", "payload_json"]
        assert other.select(*cols).exceptAll(stored.select(*cols)).count() > other.count() // 2
        other_progress = broker_progress(spark, other_plan).select("broker_id", "observed_at", "applied_offset")
        assert other_progress.exceptAll(lake.read("broker_progress").select(
            "broker_id", "observed_at", "applied_offset")).count() > 0
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", old)
