"""The Spark replay, rule by rule (facts §5.1-§5.6, §6; docs/design.md "Silver tables (replay)"), on the
hand-built scenarios of replay_scenarios.py (replayed once for the session, one cluster each):
chispa assertions on the version rows each rule implies, written out by hand."""

from __future__ import annotations

import pyarrow as pa
from chispa import assert_df_equality
from pyspark.sql import functions as F

from kraft_replay.ingest.schemas import LOG_SCHEMA
from kraft_replay.replay.schemas import SILVER_TABLES

T1, T2, T3 = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw"
ZERO = "AAAAAAAAAAAAAAAAAAAAAA"


def _rows(res, table: str, cluster: str, *cols: str, where=None):
    df = res[table].where(F.col("cluster_id") == cluster)
    if where is not None:
        df = df.where(where)
    return df.select(*cols).orderBy("valid_from_offset", F.col("record_offset").asc_nulls_first())


def test_partition_change_sentinels_and_epochs(spark, scenario_runs) -> None:
    """§5.2: Leader −2 / LRS −1 / null lists = unchanged; leader_epoch + 1 whenever Leader ≠ −2 (same
    leader, −1 included); partition_epoch + 1 on every change; changed_fields names what differs."""
    _, res, _ = scenario_runs
    cols = ("valid_from_offset", "leader", "leader_epoch", "partition_epoch", "isr", "leader_recovery_state", "changed_fields")
    got = _rows(res, "partitions", "sentinels", *cols, where=(F.col("topic_id") == T1) & (F.col("partition_id") == 0))
    every = ["topic_name", "replicas", "isr", "removing_replicas", "adding_replicas", "leader", "leader_recovery_state",
             "leader_epoch", "partition_epoch", "directories", "eligible_leader_replicas", "last_known_elr"]
    want = spark.createDataFrame([
        (8, 1, 0, 0, [1, 2, 3], 0, every),
        (10, 1, 0, 1, [1, 2], 0, ["isr", "partition_epoch"]),
        (11, 1, 1, 2, [1, 2], 0, ["leader_epoch", "partition_epoch"]),
        (12, -1, 2, 3, [], 0, ["isr", "leader", "leader_epoch", "partition_epoch"]),
        (13, -1, 2, 4, [], 1, ["leader_recovery_state", "partition_epoch"]),
        (14, 2, 3, 5, [2], 0, ["isr", "leader", "leader_recovery_state", "leader_epoch", "partition_epoch", "last_known_elr"]),
        (15, 2, 3, 6, [2], 0, ["replicas", "partition_epoch", "directories"]),
        (16, 2, 3, 7, [2], 0, ["partition_epoch"]),
    ], "valid_from_offset long, leader int, leader_epoch int, partition_epoch int, isr array<int>, "
       "leader_recovery_state tinyint, changed_fields array<string>")
    assert_df_equality(got, want, ignore_nullable=True)
    dirs = _rows(res, "partitions", "sentinels", "valid_from_offset", "replicas", "directories",
                 where=(F.col("topic_id") == T1) & (F.col("partition_id") == 0) & (F.col("valid_from_offset") == 15))
    assert [(r.replicas, r.directories) for r in dirs.collect()] == [([2, 3], [ZERO, ZERO])]  # MIGRATING per replica


def test_versions_tile_the_offsets(spark, scenario_runs) -> None:
    _, res, _ = scenario_runs
    got = _rows(res, "partitions", "tiles", "valid_from_offset", "valid_to_offset", "record_type",
                where=(F.col("topic_id") == T1) & (F.col("partition_id") == 0))
    want = spark.createDataFrame([(8, 10, "PARTITION_RECORD"), (10, 11, "PARTITION_CHANGE_RECORD"),
                                  (11, None, "PARTITION_CHANGE_RECORD")],
                                 "valid_from_offset long, valid_to_offset long, record_type string")
    assert_df_equality(got, want, ignore_nullable=True)


def test_committed_transaction_is_visible_at_its_end(spark, scenario_runs) -> None:
    """§5.1: records between Begin and End are visible from the End's offset (and time); a version
    superseded inside the transaction is never visible (valid_from = valid_to)."""
    _, res, _ = scenario_runs
    got = _rows(res, "partitions", "txn_commit", "valid_from_offset", "valid_to_offset", "record_offset", "isr")
    want = spark.createDataFrame([(6, 6, 3, [1]), (6, None, 4, [])],
                                 "valid_from_offset long, valid_to_offset long, record_offset long, isr array<int>")
    assert_df_equality(got, want, ignore_nullable=True)
    t = _rows(res, "topics", "txn_commit", "valid_from_offset", "record_offset", "name")
    assert_df_equality(t, spark.createDataFrame([(6, 2, "t")], "valid_from_offset long, record_offset long, name string"),
                       ignore_nullable=True)
    for cluster in ("txn_abort", "txn_failover", "txn_open"):  # aborted / dangling / still open: nothing applies
        assert res["partitions"].where(F.col("cluster_id") == cluster).isEmpty(), cluster
        assert res["topics"].where((F.col("cluster_id") == cluster) & (F.col("topic_id") == T1)).isEmpty(), cluster


def test_remove_topic_closes_partitions_and_topic_configs(spark, scenario_runs) -> None:
    """§5.2: RemoveTopicRecord deletes the topic, each of its partitions and each TOPIC config of its
    name (through a join), as tombstones at its offset; removing it again is UNKNOWN_ENTITY."""
    _, res, _ = scenario_runs
    rm = 16
    tomb = F.col("deleted") & (F.col("valid_from_offset") == rm)
    got = (res["partitions"].where((F.col("cluster_id") == "remove_topic") & tomb)
           .select("topic_id", "partition_id", "record_type", "record_offset", "leader", "valid_to_offset")
           .orderBy("partition_id"))
    want = spark.createDataFrame([(T1, 0, "REMOVE_TOPIC_RECORD", rm, None, None), (T1, 1, "REMOVE_TOPIC_RECORD", rm, None, None)],
                                 "topic_id string, partition_id int, record_type string, record_offset long, leader int, "
                                 "valid_to_offset long")
    assert_df_equality(got, want, ignore_nullable=True)
    cfg = _rows(res, "configs", "remove_topic", "resource_name", "name", "value", "deleted", "valid_from_offset",
                where=F.col("resource_type") == 2).orderBy("resource_name", "name", "valid_from_offset")
    want = spark.createDataFrame([
        ("orders", "cleanup.policy", "compact", False, 11), ("orders", "cleanup.policy", None, True, 15),
        ("orders", "retention.ms", "1000", False, 10), ("orders", "retention.ms", None, True, rm),
        ("orders", "retention.ms", "7", False, 20), ("payments", "retention.ms", "5", False, 12)],
        "resource_name string, name string, value string, deleted boolean, valid_from_offset long")
    assert_df_equality(cfg, want, ignore_nullable=True)
    an = res["replay_anomalies"].where(F.col("cluster_id") == "remove_topic").select("offset", "reason_code").orderBy("offset")
    assert_df_equality(an, spark.createDataFrame([(17, "UNKNOWN_ENTITY"), (21, "UNKNOWN_TOPIC")],
                                                 "offset long, reason_code string"), ignore_nullable=True)


def test_broker_epoch_checks_and_fencing(spark, scenario_runs) -> None:
    """§5.3: Fence/Unfence need the registered broker with its current epoch."""
    _, res, _ = scenario_runs
    got = _rows(res, "brokers", "fence", "valid_from_offset", "fenced", "record_type", "changed_fields")
    want = spark.createDataFrame([
        (1, True, "REGISTER_BROKER_RECORD", ["broker_epoch", "incarnation_id", "is_migrating_zk_broker", "end_points",
                                             "features", "rack", "fenced", "in_controlled_shutdown", "log_dirs"]),
        (3, False, "UNFENCE_BROKER_RECORD", ["fenced"]), (5, True, "FENCE_BROKER_RECORD", ["fenced"])],
        "valid_from_offset long, fenced boolean, record_type string, changed_fields array<string>")
    assert_df_equality(got, want, ignore_nullable=True)
    an = (res["replay_anomalies"].where(F.col("cluster_id") == "fence").select("offset", "reason_code", "entity", "message")
          .orderBy("offset"))
    want = spark.createDataFrame([
        (2, "BROKER_EPOCH_MISMATCH", "broker 1", "UNFENCE_BROKER_RECORD epoch 8 did not match the current broker epoch 1"),
        (4, "UNKNOWN_BROKER", "broker 9", "FENCE_BROKER_RECORD for unregistered broker 9")],
        "offset long, reason_code string, entity string, message string")
    assert_df_equality(an, want, ignore_nullable=True)


def test_snapshot_at_a_gap_sets_and_deletes(spark, scenario_runs) -> None:
    """§5.6: a snapshot loaded at a gap makes the image equal to it at END − 1: changed entities get a
    version (record_offset null), unmentioned ones a tombstone (record_type null) — except
    metadata.version, producer ids and the ZK state — and equal ones nothing."""
    _, res, _ = scenario_runs
    end = 19
    at_load = (F.col("cluster_id") == "snap_at_gap") & (F.col("valid_from_offset") == end - 1)
    cols = ["deleted", "record_offset", "record_type", "snapshot_end_offset"]
    got = {t: sorted(tuple(r) for r in res[t].where(at_load).select(*SILVER_TABLES[t].key_names, *cols).collect())
           for t in ("topics", "partitions", "brokers", "controllers", "features", "configs", "producer_ids", "zk_migration_state")}
    assert got == {
        "topics": [(T1, True, None, None, end), (T2, False, None, "TOPIC_RECORD", end)],
        "partitions": [(T1, 0, True, None, None, end), (T1, 1, True, None, None, end), (T2, 0, False, None, "PARTITION_RECORD", end)],
        "brokers": [(1, False, None, "REGISTER_BROKER_RECORD", end), (2, False, None, "REGISTER_BROKER_RECORD", end),
                    (3, True, None, None, end)],
        "controllers": [(3000, True, None, None, end)],
        "features": [("group.version", True, None, None, end)],
        "configs": [(2, "orders", "retention.ms", True, None, None, end)],
        "producer_ids": [], "zk_migration_state": [],
    }
    # the snapshot's own record that cannot apply: an anomaly at END - 1 naming its position
    an = res["replay_anomalies"].where((F.col("cluster_id") == "snap_at_gap") & (F.col("reason_code") == "UNKNOWN_BROKER")).first()
    assert (an.offset, an.snapshot_end_offset) == (end - 1, end) and an.message.endswith("(snapshot position 6)")
    # replay goes on after the snapshot with the snapshot's epochs
    p = res["partitions"].where((F.col("cluster_id") == "snap_at_gap") & (F.col("valid_from_offset") == 20)).first()
    assert (p.topic_id, p.isr, p.leader_epoch, p.partition_epoch) == (T2, [1], 4, 10)


def test_metadata_version_names_and_unknown_levels(spark, scenario_runs) -> None:
    """§5.4 / §6: metadata.version carries its release name; levels §6 does not know (0 included) are
    UNKNOWN_METADATA_VERSION and change nothing; level 0 removes another feature."""
    _, res, _ = scenario_runs
    got = _rows(res, "features", "features", "name", "feature_level", "metadata_version", "deleted", "valid_from_offset")
    want = spark.createDataFrame([
        ("metadata.version", 21, "3.9-IV0", False, 1), ("group.version", 1, None, False, 2),
        ("group.version", None, None, True, 4), ("metadata.version", 27, "4.1-IV1", False, 7)],
        "name string, feature_level smallint, metadata_version string, deleted boolean, valid_from_offset long")
    assert_df_equality(got, want, ignore_nullable=True)


def test_secrets_never_leave_bronze(scenario_runs) -> None:
    """SCRAM salts / stored / server keys and token HMACs are not in any silver table."""
    _, _, got = scenario_runs
    payload = {f.name for f in LOG_SCHEMA.field("user_scram_credential").type} | {"hmac", "token_hmac"}
    secrets = payload - {"name", "mechanism", "iterations"}
    assert secrets >= {"salt", "stored_key", "server_key"}
    for t, table in got.items():
        assert not (set(table.schema.names) & secrets), t
        for f in table.schema:
            assert not pa.types.is_binary(f.type), (t, f.name)
    scram = got["scram_credentials"].to_pylist()
    assert {(r["name"], r["mechanism"], r["iterations"], r["deleted"]) for r in scram} == {
        ("alice", 1, 4096, False), ("bob", 2, 8192, False), ("bob", 2, None, True)}


def test_the_cast_types_are_the_contracts_types(spark) -> None:
    """``spark_type``, what the domains cast to (an atomic type by name, others as a ``DataType``), casts
    every silver table's columns to its contract's Spark types: timestamps with the session's time zone
    (``timestamp_ltz``) whatever its default timestamp type, lists with their element nullability."""
    from kraft_replay.replay.versioning import spark_schema, spark_type
    from kraft_replay.spark import session_conf

    assert spark_type(pa.int64()) == "bigint" and spark_type(pa.timestamp("us", tz="UTC")) == "timestamp_ltz"
    for name, spec in SILVER_TABLES.items():
        with session_conf(spark, {"spark.sql.timestampType": "TIMESTAMP_NTZ"}):
            cast = spark.range(1).select(*[F.lit(None).cast(spark_type(f.type)).alias(f.name) for f in spec.schema])
        assert [(f.name, f.dataType) for f in cast.schema] == [(f.name, f.dataType) for f in spark_schema(name)], name
