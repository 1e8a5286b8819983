"""The metadata log as Spark DataFrames with exactly the bronze schemas (``metadata_log``, ``metadata_control``).

Two sources are unioned:

- the plan's structural batches (few; built on the driver as Arrow with the codec's payload builder);
- the bulk: segments of closed-form batches expanded with ``sequence``/``explode`` and pure column
  expressions (:mod:`kraft_replay.generate.bulk` describes the layout). A bulk batch is either one
  NoOpRecord (only where metadata.version >= 3.3-IV1) or several PartitionChangeRecords of stable
  partitions: an ISR shrink (drop the last live replica; below 3.6-IV0 the leader is re-set to
  itself, bumping its epoch) or an ISR expansion back to all live replicas — the parity of the
  partition's touches since its last reset decides which, so every record changes something. A
  touch of a partition that cannot shrink ("stuck") is a NoOpRecord, or below 3.3-IV1 a leader
  re-election of the current leader.

``payload_json`` comes from :mod:`kraft_replay.generate.jsonexpr`. Generated rows carry
``source_file = "generated:<scenario>"`` and ``source_position = batch_base_offset`` (they were not
read from a file); ``--segments-out`` writes real files with the same records.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from kraft_replay.codec.arrow_payload import PAYLOAD_FIELDS, build_control_columns, build_payload_columns
from kraft_replay.codec.control import CONTROL_TYPE_IDS, ControlRecord, control_json
from kraft_replay.codec.schema import RECORD_TYPES
from kraft_replay.generate.bulk import CYCLE
from kraft_replay.generate.jsonexpr import payload_json_column
from kraft_replay.generate.mv import NO_EPOCH_BUMP_ON_SHRINK_LEVEL
from kraft_replay.generate.plan import PARTITION_CHANGE, Plan, PlannedBatch
from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, OFFSET_BUCKET_SIZE, SNAPSHOT_SCHEMA

NOOP = 20
CHUNK_BATCHES = 200_000

LOG_TYPE: StructType = from_arrow_schema(LOG_SCHEMA)
CONTROL_TYPE: StructType = from_arrow_schema(CONTROL_SCHEMA)
SNAPSHOT_TYPE: StructType = from_arrow_schema(SNAPSHOT_SCHEMA)
PAYLOAD_COLUMNS = [f.name for f in PAYLOAD_FIELDS]


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Select exactly ``schema``'s columns, in order, cast to its types (missing payload columns as null)."""
    have = {f.name: f.dataType for f in df.schema.fields}
    cols = []
    for f in schema.fields:
        if f.name in have and have[f.name].simpleString() == f.dataType.simpleString():
            cols.append(F.col(f.name))           # same type up to nullability: no cast (keeps pruning possible)
        else:
            src = F.col(f.name) if f.name in have else F.lit(None)
            cols.append(src.cast(f.dataType).alias(f.name))
    return df.select(*cols)


def source_file_name(plan: Plan) -> str:
    return f"generated:{plan.scenario.name}"


def _ts_array(ms: list[int]) -> pa.Array:
    return pa.array([m * 1000 for m in ms], pa.timestamp("us", tz="UTC"))


def structural_log(spark: SparkSession, plan: Plan, secrets_key: bytes | None = None) -> DataFrame:
    """Rows of the plan's structural data batches (``payload_json`` added in Spark), credential
    material fingerprinted under ``secrets_key`` (:func:`kraft_replay.codec.secrets.redact_records`)."""
    rows: list[tuple[PlannedBatch, int]] = []
    for b in plan.batches:
        if b.control is None:
            rows.extend((b, i) for i in range(len(b.records)))
    recs = [b.records[i] for b, i in rows]
    cols: dict[str, pa.Array] = {
        "offset": pa.array([b.base_offset + i for b, i in rows], pa.int64()),
        "batch_base_offset": pa.array([b.base_offset for b, _ in rows], pa.int64()),
        "batch_last_offset": pa.array([b.last_offset for b, _ in rows], pa.int64()),
        "batch_leader_epoch": pa.array([b.epoch for b, _ in rows], pa.int32()),
        "append_time": _ts_array([b.time_ms for b, _ in rows]),
        "api_key": pa.array([r.api_key for r in recs], pa.int32()),
        "record_version": pa.array([r.version for r in recs], pa.int32()),
    }
    for f, arr in zip(PAYLOAD_FIELDS, build_payload_columns(recs), strict=True):
        cols[f.name] = arr
    df = spark.createDataFrame(fingerprinted(pa.table(cols), secrets_key))
    combos = {(r.api_key, r.version) for r in recs}
    return _finish_log(df, plan, combos)


def fingerprinted(table: pa.Table, secrets_key: bytes | None) -> pa.Table:
    """Kafka-kraft-facts §12: the generated records of ``table`` with their credential material
    replaced by fingerprints under the lake key (as ingest does; None keeps it)."""
    if secrets_key is None or not table.num_rows:
        return table
    from kraft_replay.codec.secrets import redact_records

    return pa.Table.from_batches([redact_records(b, secrets_key) for b in table.to_batches()], schema=table.schema)


def _finish_log(df: DataFrame, plan: Plan, combos: set[tuple[int, int]],
                always_default: dict[int, frozenset[str]] | None = None) -> DataFrame:
    names: Column | None = None
    for k in sorted({k for k, _ in combos}):
        name = F.lit(RECORD_TYPES[k].tool_name)
        names = F.when(F.col("api_key") == k, name) if names is None else names.when(F.col("api_key") == k, name)
    out = (
        df.withColumn("cluster_id", F.lit(plan.scenario.cluster_id))
        .withColumn("offset_bucket", F.floor(F.col("offset") / OFFSET_BUCKET_SIZE).cast("long"))
        .withColumn("record_type", names if names is not None else F.lit(None).cast("string"))
        .withColumn("payload_json", payload_json_column(combos, always_default=always_default))
        .withColumn("source_file", F.lit(source_file_name(plan)))
        .withColumn("source_position", F.col("batch_base_offset"))
    )
    return conform(out, LOG_TYPE)


def _chunk_bounds(plan: Plan, seg) -> list[int]:  # noqa: ANN001 - a plan Segment
    """Batch indexes splitting a segment at every offset-bucket boundary and at most every CHUNK_BATCHES."""
    lay = plan.layout
    churn = not seg.noop_allowed
    base = lay.prefix(seg.j_start, churn)

    def offset(j: int) -> int:
        return seg.offset_start + lay.prefix(j, churn) - base

    cuts = {seg.j_start, seg.j_end}
    first_bucket = seg.offset_start // OFFSET_BUCKET_SIZE + 1
    last_bucket = offset(seg.j_end) // OFFSET_BUCKET_SIZE
    for m in range(first_bucket, last_bucket + 1):
        lo, hi = seg.j_start, seg.j_end          # smallest j with offset(j) >= m * bucket size
        while lo < hi:
            mid = (lo + hi) // 2
            if offset(mid) >= m * OFFSET_BUCKET_SIZE:
                hi = mid
            else:
                lo = mid + 1
        cuts.add(lo)
    bounds = sorted(cuts)
    out = [bounds[0]]
    for b in bounds[1:]:
        while b - out[-1] > CHUNK_BATCHES:
            out.append(out[-1] + CHUNK_BATCHES)
        if b > out[-1]:
            out.append(b)
    return out


def segments_frame(spark: SparkSession, plan: Plan) -> DataFrame:
    """The plan's bulk segments split into chunks (one Spark partition each) that stay inside one
    offset bucket, so each task writes one or two ``offset_bucket`` partitions without a sort."""
    rows: list[tuple[Any, ...]] = []
    for s in plan.segments:
        bounds = _chunk_bounds(plan, s)
        for lo, hi in zip(bounds, bounds[1:]):
            rows.append((s.seg_id, s.j_start, lo, hi, s.offset_start, s.noop_allowed, s.mv_level, s.raft_epoch, s.down,
                         s.reset_at))
    schema = ("seg_id long, seg_j_start long, j_lo long, j_hi long, offset_start long, noop_allowed boolean, "
              "mv_level int, raft_epoch int, down array<int>, reset_at array<long>")
    # few large chunks: one partition each; many small ones (structural-heavy runs): grouped
    groups: list[list[tuple[Any, ...]]] = []
    size = 0
    for r in rows:
        n = r[3] - r[2]
        if not groups or size + n > CHUNK_BATCHES:
            groups.append([])
            size = 0
        groups[-1].append(r)
        size += n
    rdd = spark.sparkContext.parallelize(groups or [[]], max(1, len(groups))).flatMap(lambda g: g)
    return spark.createDataFrame(rdd, schema)


def _lit_array(values: list[Any], typ: str) -> Column:
    return F.array(*[F.lit(v) for v in values]).cast(f"array<{typ}>")


_BULK_COMBOS = {(NOOP, 0)} | {(PARTITION_CHANGE, v) for v in (0, 1, 2)}
# partition_change fields every bulk record leaves at their default/null
_BULK_FIXED = frozenset({"replicas", "removing_replicas", "adding_replicas", "leader_recovery_state", "directories",
                         "eligible_leader_replicas", "last_known_elr"})
# partition_change fields a bulk record fills (leader_recovery_state is the constant -1)
BULK_PC_FIELDS = ("partition_id", "topic_id", "isr", "leader", "leader_recovery_state")


def bulk_log(spark: SparkSession, plan: Plan) -> DataFrame:
    """The bulk records (NoOp and churn PartitionChangeRecords) as pure column expressions."""
    return _finish_log(_bulk_records(spark, plan), plan, _BULK_COMBOS, {PARTITION_CHANGE: _BULK_FIXED})


def bulk_log_flat(spark: SparkSession, plan: Plan) -> DataFrame:
    """:func:`bulk_log` as a narrow frame for :mod:`kraft_replay.generate.logwrite`: the scalar
    columns the payload does not determine and the filled ``partition_change`` fields as
    ``partition_change__<field>`` columns; the task renders ``payload_json`` from them with the
    codec's vectorised renderer (the JSON expressions of :func:`bulk_log` cost more CPU in Spark
    than generating the records)."""
    recs = _bulk_records(spark, plan)
    pcol = F.col("partition_change")
    return recs.select(
        "offset", "batch_base_offset", "batch_last_offset", "batch_leader_epoch", "append_time", "api_key",
        "record_version",
        *[pcol.getField(f).alias(f"partition_change__{f}") for f in BULK_PC_FIELDS],
    )


def _bulk_records(spark: SparkSession, plan: Plan) -> DataFrame:
    """Bulk rows: the scalar columns, ``api_key``, ``record_version`` and ``partition_change``.

    Rule (no PartitionChangeRecord that changes nothing, facts §5.2): the touch number of a partition
    since its last reset (the greatest ``reset_at`` of its replicas' brokers in the segment) picks a
    shrink (even) or an expansion (odd); a partition whose live replicas cannot shrink without going
    below max(1, min.insync.replicas) gets a NoOpRecord (or, below 3.3-IV1, a re-election of its
    current leader) instead. Below 3.6-IV0 a shrink re-sets the leader (epoch bump, §6.2)."""
    sc = plan.scenario
    lay = plan.layout
    sizes = _lit_array(list(lay.sizes), "int")
    noops = _lit_array(list(lay.noop), "boolean")
    part_all = _lit_array(lay.partial_all[:CYCLE], "long")
    part_churn = _lit_array(lay.partial_churn[:CYCLE], "long")
    sum_all, sum_churn = lay.partial_all[CYCLE], lay.partial_churn[CYCLE]
    brokers = _lit_array(sc.broker_ids, "int")
    topic_ids = _lit_array(plan.topic_ids, "string")
    nb, rf, ppt, P = len(sc.broker_ids), sc.topics.replication_factor, sc.topics.partitions, lay.partitions

    def prefix(j: Column, churn: bool) -> Column:
        arr, total = (part_churn, sum_churn) if churn else (part_all, sum_all)
        return F.floor(j / CYCLE).cast("long") * F.lit(total) + F.get(arr, (j % CYCLE).cast("int"))

    seg = segments_frame(spark, plan)
    batches = (
        seg.withColumn("j", F.explode(F.sequence(F.col("j_lo"), F.col("j_hi") - 1)))
        .where(F.col("j_lo") < F.col("j_hi"))
        .withColumn("c", (F.col("j") % CYCLE).cast("int"))
        .withColumn("size", F.get(sizes, F.col("c")))
        .withColumn("is_noop", F.get(noops, F.col("c")))
        .where(F.col("noop_allowed") | ~F.col("is_noop"))
        .withColumn(
            "batch_base_offset",
            F.col("offset_start") + F.when(
                F.col("noop_allowed"), prefix(F.col("j"), False) - prefix(F.col("seg_j_start"), False)
            ).otherwise(prefix(F.col("j"), True) - prefix(F.col("seg_j_start"), True)),
        )
        .withColumn("batch_last_offset", F.col("batch_base_offset") + F.col("size") - 1)
        .withColumn("time_ms", F.lit(lay.start_ms) + F.floor(F.col("j") * F.lit(lay.span_ms) / F.lit(max(lay.n_batches, 1))).cast("long"))
        .withColumn("churn_base", prefix(F.col("j"), True))
    )
    recs = batches.withColumn("i", F.explode(F.sequence(F.lit(0), F.col("size") - 1)))
    r = F.col("churn_base") + F.col("i")
    k = ((r * F.lit(lay.stride) + F.lit(lay.shift)) % F.lit(P)).cast("long")
    min_isr = sc.topics.min_insync_replicas
    resets = [F.get(F.col("reset_at"), ((F.col("k") + i) % nb).cast("int")) for i in range(rf)]
    last_reset = resets[0] if rf == 1 else F.greatest(*resets)
    recs = (
        recs.withColumn("offset", F.col("batch_base_offset") + F.col("i"))
        .withColumn("k", k)
        .withColumn("replicas", F.array(*[F.get(brokers, ((F.col("k") + i) % nb).cast("int")) for i in range(rf)]))
        # replicas minus the down brokers, in replica order: a concat of 0/1-element arrays, which
        # whole-stage codegen compiles (array_compact/filter take a lambda and run interpreted)
        .withColumn("live", F.concat(*[
            F.when(~F.array_contains(F.col("down"), F.get(F.col("replicas"), i)),
                   F.array(F.get(F.col("replicas"), i))).otherwise(F.array().cast("array<int>"))
            for i in range(rf)]))
        .withColumn("last_reset", last_reset)
        .withColumn("touch", F.floor((r - F.col("last_reset")) / F.lit(P)).cast("long"))
        .withColumn("stuck", (F.size(F.col("live")) < F.lit(2)) | (F.size(F.col("live")) - 1 < F.lit(max(1, min_isr))))
        .withColumn("shrink", ~F.col("stuck") & ((F.col("touch") % 2) == 0))
        .withColumn("is_noop", F.col("is_noop") | (F.col("stuck") & F.col("noop_allowed")))
        .withColumn("record_version", F.when(F.col("is_noop"), F.lit(0))
                    .when(F.col("mv_level") <= 16, F.lit(0)).when(F.col("mv_level") <= 22, F.lit(1)).otherwise(F.lit(2)))
    )
    isr = (F.when(F.col("stuck"), F.lit(None).cast("array<int>"))
           .when(F.col("shrink"), F.slice(F.col("live"), 1, F.size(F.col("live")) - 1)).otherwise(F.col("live")))
    leader = F.when(F.col("stuck") | (F.col("shrink") & (F.col("mv_level") < NO_EPOCH_BUMP_ON_SHRINK_LEVEL)),
                    F.coalesce(F.get(F.col("live"), 0), F.lit(-1))).otherwise(F.lit(-2))
    null_ints = F.lit(None).cast("array<int>")
    # built with the payload struct's exact field types (a cast would hide the fields from column pruning)
    pc = F.struct(
        (F.col("k") % ppt).cast("int").alias("partition_id"),
        F.get(topic_ids, F.floor(F.col("k") / ppt).cast("int")).alias("topic_id"),
        isr.alias("isr"),
        leader.cast("int").alias("leader"),
        null_ints.alias("replicas"),
        null_ints.alias("removing_replicas"),
        null_ints.alias("adding_replicas"),
        F.lit(-1).cast("byte").alias("leader_recovery_state"),
        F.lit(None).cast("array<string>").alias("directories"),
        null_ints.alias("eligible_leader_replicas"),
        null_ints.alias("last_known_elr"),
    )
    out = recs.select(
        "offset", "batch_base_offset", "batch_last_offset",
        F.col("raft_epoch").alias("batch_leader_epoch"),
        F.timestamp_millis(F.col("time_ms")).alias("append_time"),
        F.when(F.col("is_noop"), F.lit(NOOP)).otherwise(F.lit(PARTITION_CHANGE)).alias("api_key"),
        "record_version",
        F.when(~F.col("is_noop"), pc).alias("partition_change"),
    )
    return out


def metadata_log(spark: SparkSession, plan: Plan, secrets_key: bytes | None = None) -> DataFrame:
    """Every data record of the generated log, schema ``metadata_log`` (credential material
    fingerprinted under ``secrets_key``)."""
    return structural_log(spark, plan, secrets_key).unionByName(bulk_log(spark, plan))


def control_rows_table(records: list[tuple[ControlRecord, dict[str, Any]]]) -> pa.Table:
    recs = [r for r, _ in records]
    cols: dict[str, Any] = {k: pa.array([m[k] for _, m in records], t) for k, t in (
        ("cluster_id", pa.string()), ("offset", pa.int64()), ("batch_base_offset", pa.int64()),
        ("batch_last_offset", pa.int64()), ("batch_leader_epoch", pa.int32()))}
    cols["append_time"] = _ts_array([m["time_ms"] for _, m in records])
    cols["control_type"] = pa.array([r.name for r in recs], pa.string())
    cols["control_type_id"] = pa.array([r.type_id for r in recs], pa.int32())
    cols["key_version"] = pa.array([r.key_version for r in recs], pa.int32())
    ctl_fields = [f for f in CONTROL_SCHEMA if f.name in ("leader_change", "snapshot_header", "snapshot_footer",
                                                           "kraft_version", "kraft_voters")]
    for f, arr in zip(ctl_fields, build_control_columns(recs), strict=True):
        cols[f.name] = arr
    cols["payload_json"] = pa.array([control_json(r) for r in recs], pa.string())
    for k, t in (("source_kind", pa.string()), ("snapshot_end_offset", pa.int64()), ("snapshot_epoch", pa.int32()),
                 ("source_file", pa.string()), ("source_position", pa.int64())):
        cols[k] = pa.array([m[k] for _, m in records], t)
    return pa.Table.from_pydict(cols, schema=CONTROL_SCHEMA)


def control_record(ctype: str, data: dict[str, Any]) -> ControlRecord:
    return ControlRecord(CONTROL_TYPE_IDS[ctype], 0, data)


def log_control_table(plan: Plan) -> pa.Table:
    """``metadata_control`` rows of the log's control batches (LEADER_CHANGE at each new Raft epoch)."""
    rows = []
    for b in plan.batches:
        if b.control is None:
            continue
        rows.append((control_record(*b.control), {
            "cluster_id": plan.scenario.cluster_id, "offset": b.base_offset, "batch_base_offset": b.base_offset,
            "batch_last_offset": b.base_offset, "batch_leader_epoch": b.epoch, "time_ms": b.time_ms,
            "source_kind": "log", "snapshot_end_offset": None, "snapshot_epoch": None,
            "source_file": source_file_name(plan), "source_position": b.base_offset}))
    return control_rows_table(rows)
