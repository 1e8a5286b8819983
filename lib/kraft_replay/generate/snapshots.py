"""Snapshots of the generated log (bronze ``snapshot_records`` and their ``metadata_control`` rows).

Rules (facts §4.2-§4.3, §5): a snapshot with exclusive end offset ``E`` holds the image after every
log record below ``E``; its epoch is the Raft epoch of the last contained record. Record order:
metadata.version FeatureLevelRecord, other features, ZkMigrationState (from 3.4-IV0), brokers,
controllers (from 3.7-IV0), each topic followed by its partitions, configs, client quotas, the
producer-id counter (BrokerId -1, BrokerEpoch -1), ACLs, SCRAM credentials, delegation tokens —
each at the record version the snapshot's metadata.version selects. Positions inside the file start
at 1 (position 0 is the SnapshotHeader control batch); data batches hold up to
``SNAPSHOT_BATCH_RECORDS`` records and the SnapshotFooter follows the last one.

Partition state is computed in Spark from the log itself: replicas/ISR/removing/adding/ELR take the
last non-null value, the leader the last value other than -2, the leader epoch counts leader changes
and the partition epoch counts every PartitionChangeRecord (facts §5.2). Everything else comes from
the plan's driver-side state at that point. ``bootstrap.checkpoint`` holds the bootstrap
metadata.version record (``snapshot_end_offset`` 0, epoch 0, kind ``bootstrap``).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kraft_replay.codec.arrow_payload import PAYLOAD_FIELDS, build_payload_columns
from kraft_replay.codec.records import MetadataRecord
from kraft_replay.codec.schema import RECORD_TYPES, ZERO_UUID
from kraft_replay.generate import mv
from kraft_replay.generate.jsonexpr import payload_json_column
from kraft_replay.generate.log import (
    SNAPSHOT_TYPE,
    conform,
    control_record,
    control_rows_table,
    fingerprinted,
    source_file_name,
)
from kraft_replay.generate.plan import (
    ACL,
    CLIENT_QUOTA,
    CONFIG,
    DELEGATION_TOKEN,
    FEATURE_LEVEL,
    PARTITION,
    PRODUCER_IDS,
    REGISTER_BROKER,
    REGISTER_CONTROLLER,
    SCRAM,
    TOPIC,
    ZK_MIGRATION,
    Plan,
    SnapshotPoint,
)
from kraft_replay.ingest.schemas import OFFSET_BUCKET_SIZE

SNAPSHOT_BATCH_RECORDS = 1000


def _lenient(api_key: int, version: int, data: dict[str, Any]) -> MetadataRecord:
    """A record keeping only the fields ``version`` has (defaults for the missing ones)."""
    rt = RECORD_TYPES[api_key]
    out: dict[str, Any] = {}
    for f in rt.schema.fields:
        if f.present_in(version):
            out[f.snake] = data.get(f.snake, f.default_value(version))
    return MetadataRecord(api_key, version, out)


def _head_records(plan: Plan, snap: SnapshotPoint) -> tuple[list[MetadataRecord], list[MetadataRecord]]:
    """(records before the topics, records after the topics) from the plan's state at the snapshot."""
    st = snap.state
    level = st["mv"]
    head = [_lenient(FEATURE_LEVEL, 0, {"name": "metadata.version", "feature_level": level})]
    head += [_lenient(FEATURE_LEVEL, 0, {"name": n, "feature_level": v}) for n, v in sorted(st["features"].items()) if v]
    if level >= mv.ZK_MIGRATION_LEVEL:
        head.append(_lenient(ZK_MIGRATION, 0, {"zk_migration_state": 0}))
    rbv = mv.register_broker_version(level)
    for b, info in sorted(st["brokers"].items()):
        data = dict(info["data"])
        data.update(fenced=info["fenced"], in_controlled_shutdown=info["ics"])
        head.append(_lenient(REGISTER_BROKER, rbv, data))
    if level >= mv.CONTROLLER_REGISTRATION_LEVEL:
        for c, info in sorted(st["controllers"].items()):
            head.append(_lenient(REGISTER_CONTROLLER, 0, info["data"]))
    tail = [_lenient(CONFIG, 0, {"resource_type": t, "resource_name": n, "name": k, "value": v})
            for (t, n, k), v in sorted(st["configs"].items())]
    tail += [_lenient(CLIENT_QUOTA, 0, {"entity": [{"entity_type": "user", "entity_name": u}], "key": k, "value": v,
                                        "remove": False}) for (u, k), v in sorted(st["quotas"].items())]
    if st["next_producer_id"] >= 0:
        tail.append(_lenient(PRODUCER_IDS, 0, {"broker_id": -1, "broker_epoch": -1,
                                               "next_producer_id": st["next_producer_id"]}))
    tail += [_lenient(ACL, 0, d) for _, d in sorted(st["acls"].items())]
    if level >= mv.SCRAM_LEVEL:
        tail += [_lenient(SCRAM, 0, d) for _, d in sorted(st["scram"].items())]
    if level >= mv.DELEGATION_TOKEN_LEVEL:
        tail += [_lenient(DELEGATION_TOKEN, 0, d) for _, d in sorted(st["tokens"].items())]
    return head, tail


ARRAY_FIELDS = ("replicas", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr")


def partition_state(log: DataFrame, end_offset: int, topic_ids: set[str] | None = None) -> DataFrame:
    """Per partition, its registration after every record below ``end_offset`` (rule in the module doc).

    Columns: ``topic_id``, ``partition_id``, ``replicas``, ``isr``, ``removing_replicas``,
    ``adding_replicas``, ``leader``, ``leader_epoch``, ``partition_epoch``, ``eligible_leader_replicas``,
    ``last_known_elr``. With ``topic_ids``, only the partitions of those topics (e.g. the live ones).

    Mechanism: "last non-null value" of an array cannot be hash-aggregated (Spark sorts every row for
    it), so a first pass hash-aggregates the fixed-width parts over all rows — the leader, the epoch
    counts and, per array field, the offset of its last non-null value — and a second pass takes the
    arrays from only the rows at those offsets (a broadcast semi-join: at most a few per partition,
    reading only the offset buckets that hold them).
    """
    bucket_max = max(end_offset - 1, 0) // OFFSET_BUCKET_SIZE
    rows = log.where((F.col("offset") < end_offset) & (F.col("offset_bucket") <= bucket_max)
                     & F.col("api_key").isin(3, 5))
    is_pr = F.col("api_key") == 3
    p, c = F.col("partition"), F.col("partition_change")

    def pick(field: str) -> Column:
        v = F.when(is_pr, p.getField(field)).otherwise(c.getField(field))
        return v

    keys = [F.coalesce(p.topic_id, c.topic_id).alias("topic_id"),
            F.coalesce(p.partition_id, c.partition_id).alias("partition_id")]
    cheap = rows.select(
        *keys, "offset",
        is_pr.alias("is_pr"),
        *[pick(f).isNotNull().alias(f"has_{f}") for f in ARRAY_FIELDS],
        F.when(is_pr, p.leader).when(c.leader != -2, c.leader).alias("leader"),
        F.when(is_pr, p.leader_epoch).alias("base_leader_epoch"),
        F.when(is_pr, p.partition_epoch).alias("base_partition_epoch"),
        (~is_pr & (c.leader != -2)).alias("leader_change"),
    )
    scalars = cheap.groupBy("topic_id", "partition_id").agg(
        F.max_by(F.col("leader"), F.when(F.col("leader").isNotNull(), F.col("offset"))).alias("leader"),
        (F.max("base_leader_epoch") + F.sum(F.col("leader_change").cast("int"))).cast("int").alias("leader_epoch"),
        (F.max("base_partition_epoch") + F.sum((~F.col("is_pr")).cast("int"))).cast("int").alias("partition_epoch"),
        *[F.max(F.when(F.col(f"has_{f}"), F.col("offset"))).alias(f"at_{f}") for f in ARRAY_FIELDS],
    )
    # a few rows per partition: fetched once, the offsets to look up broadcast from the driver
    spark = log.sparkSession
    fixed = scalars.toArrow()
    if topic_ids is not None:
        fixed = fixed.filter(pc.is_in(fixed.column("topic_id"), pa.array(sorted(topic_ids), pa.string())))
    scalars = spark.createDataFrame(fixed)
    at = set()
    for f in ARRAY_FIELDS:
        at.update(v for v in fixed.column(f"at_{f}").to_pylist() if v is not None)
    needed = spark.createDataFrame([(v,) for v in sorted(at)] or [(-1,)], "offset long")
    buckets = sorted({v // OFFSET_BUCKET_SIZE for v in at}) or [-1]    # prunes the second scan's files
    arrays = rows.where(F.col("offset_bucket").isin(buckets)).join(F.broadcast(needed), "offset", "left_semi").select(
        *keys, "offset", *[pick(f).alias(f) for f in ARRAY_FIELDS])

    def last(col: str) -> Column:
        return F.max_by(F.col(col), F.when(F.col(col).isNotNull(), F.col("offset"))).alias(col)

    arrays = arrays.groupBy("topic_id", "partition_id").agg(*[last(f) for f in ARRAY_FIELDS])
    return scalars.join(arrays, ["topic_id", "partition_id"], "left").select(
        "topic_id", "partition_id", *ARRAY_FIELDS[:2], *ARRAY_FIELDS[2:4], *ARRAY_FIELDS[4:], "leader",
        "leader_epoch", "partition_epoch")


def _position_expr(pos: F.Column) -> Column:
    return F.lit(1) + F.floor((pos - 1) / SNAPSHOT_BATCH_RECORDS).cast("long") * SNAPSHOT_BATCH_RECORDS


def snapshot_records(spark: SparkSession, plan: Plan, log: DataFrame, snap: SnapshotPoint,
                     secrets_key: bytes | None = None) -> tuple[DataFrame, int]:
    """``snapshot_records`` rows of one snapshot and the number of data records it holds (credential
    material fingerprinted under ``secrets_key``)."""
    st = snap.state
    level = st["mv"]
    head, tail = _head_records(plan, snap)
    topics = sorted(st["live_topics"].items(), key=lambda kv: kv[1])
    parts = partition_state(log, snap.end_offset, {tid for tid, _ in topics})
    counts = {r["topic_id"]: r["n"] for r in parts.groupBy("topic_id").agg(F.count("*").alias("n")).collect()}
    # positions: head, then per topic [TopicRecord, partitions...], then tail
    pos = 1 + len(head)
    driver: list[tuple[int, MetadataRecord]] = [(1 + i, r) for i, r in enumerate(head)]
    block: list[tuple[str, int]] = []
    for tid, name in topics:
        driver.append((pos, _lenient(TOPIC, 0, {"name": name, "topic_id": tid})))
        block.append((tid, pos + 1))
        pos += 1 + counts.get(tid, 0)
    for r in tail:
        driver.append((pos, r))
        pos += 1
    n_records = pos - 1
    time_ms = snap.last_contained_ms
    common = {"snapshot_end_offset": snap.end_offset, "snapshot_epoch": snap.epoch, "kind": "snapshot"}
    ddf = _driver_rows(spark, plan, driver, time_ms, common, secrets_key)
    pv = mv.partition_record_version(level)
    starts = spark.createDataFrame(block or [("", 0)], "b_topic_id string, b_start long")
    pdf = parts.join(F.broadcast(starts), F.col("topic_id") == F.col("b_topic_id"))
    position = F.col("b_start") + F.col("partition_id")
    struct_type = SNAPSHOT_TYPE["partition"].dataType
    directories = F.transform(F.col("replicas"), lambda _: F.lit(ZERO_UUID)) if pv >= 1 else F.lit(None).cast("array<string>")
    pstruct = F.struct(
        F.col("partition_id").cast("int").alias("partition_id"), F.col("topic_id").alias("topic_id"),
        "replicas", "isr", "removing_replicas", "adding_replicas", F.col("leader").cast("int").alias("leader"),
        F.lit(0).cast("byte").alias("leader_recovery_state"), "leader_epoch", "partition_epoch",
        directories.alias("directories"),
        (F.col("eligible_leader_replicas") if pv >= 2 else F.lit(None).cast("array<int>")).alias("eligible_leader_replicas"),
        (F.col("last_known_elr") if pv >= 2 else F.lit(None).cast("array<int>")).alias("last_known_elr"),
    ).cast(struct_type)
    prows = pdf.select(
        position.alias("position_in_snapshot"),
        F.lit(PARTITION).alias("api_key"), F.lit(pv).alias("record_version"),
        pstruct.alias("partition"),
    )
    prows = _finish(prows, plan, {(PARTITION, pv)}, time_ms, common)
    return ddf.unionByName(prows), n_records


def _driver_rows(spark: SparkSession, plan: Plan, rows: list[tuple[int, MetadataRecord]], time_ms: int,
                 common: dict[str, Any], secrets_key: bytes | None = None) -> DataFrame:
    recs = [r for _, r in rows]
    cols: dict[str, pa.Array] = {
        "position_in_snapshot": pa.array([p for p, _ in rows], pa.int64()),
        "api_key": pa.array([r.api_key for r in recs], pa.int32()),
        "record_version": pa.array([r.version for r in recs], pa.int32()),
    }
    for f, arr in zip(PAYLOAD_FIELDS, build_payload_columns(recs), strict=True):
        cols[f.name] = arr
    df = spark.createDataFrame(fingerprinted(pa.table(cols), secrets_key))
    return _finish(df, plan, {(r.api_key, r.version) for r in recs}, time_ms, common)


def _finish(df: DataFrame, plan: Plan, combos: set[tuple[int, int]], time_ms: int, common: dict[str, Any]) -> DataFrame:
    names = F.create_map(*[x for k, rt in sorted(RECORD_TYPES.items()) for x in (F.lit(k), F.lit(rt.tool_name))])
    out = (
        df.withColumn("cluster_id", F.lit(plan.scenario.cluster_id))
        .withColumn("snapshot_end_offset", F.lit(common["snapshot_end_offset"]).cast("long"))
        .withColumn("snapshot_epoch", F.lit(common["snapshot_epoch"]).cast("int"))
        .withColumn("snapshot_kind", F.lit(common["kind"]))
        .withColumn("batch_base_offset", _position_expr(F.col("position_in_snapshot")))
        .withColumn("append_time", F.timestamp_millis(F.lit(time_ms)))
        .withColumn("record_type", names[F.col("api_key")])
        .withColumn("payload_json", payload_json_column(combos))
        .withColumn("source_file", F.lit(source_file_name(plan)))
        .withColumn("source_position", F.col("batch_base_offset"))
    )
    return conform(out, SNAPSHOT_TYPE)


def bootstrap_records(spark: SparkSession, plan: Plan, secrets_key: bytes | None = None) -> DataFrame:
    """``snapshot_records`` rows of ``bootstrap.checkpoint`` (credential material fingerprinted)."""
    rows = [(1 + i, r) for i, r in enumerate(plan.bootstrap_records)]
    common = {"snapshot_end_offset": 0, "snapshot_epoch": 0, "kind": "bootstrap"}
    return _driver_rows(spark, plan, rows, plan.scenario.start_ms, common, secrets_key)


def snapshot_control_table(plan: Plan, points: list[tuple[int, int, str, int, int]]) -> pa.Table:
    """``metadata_control`` rows for snapshot files: (end offset, epoch, kind, record count, time ms) each."""
    rows = []
    for end, epoch, kind, n, time_ms in points:
        header = control_record("SNAPSHOT_HEADER", {"version": 0, "last_contained_log_timestamp": time_ms})
        footer = control_record("SNAPSHOT_FOOTER", {"version": 0})
        for rec, off in ((header, 0), (footer, n + 1)):
            rows.append((rec, {"cluster_id": plan.scenario.cluster_id, "offset": off, "batch_base_offset": off,
                               "batch_last_offset": off, "batch_leader_epoch": epoch, "time_ms": time_ms,
                               "source_kind": kind, "snapshot_end_offset": end, "snapshot_epoch": epoch,
                               "source_file": source_file_name(plan), "source_position": off}))
    return control_rows_table(rows)

