"""``partitions``: PartitionRecord / PartitionChangeRecord / RemoveTopicRecord (facts §5.2).

* PartitionRecord creates or wholly replaces a partition of an existing topic (null ISR, removing/
  adding replicas, ELR, LastKnownElr -> ``[]``; LeaderRecoveryState default 0);
* PartitionChangeRecord merges into the current registration: null lists, Leader −2 and
  LeaderRecoveryState −1 mean "unchanged"; ``leader_epoch`` + 1 whenever Leader ≠ −2 (even to the
  same leader or −1), ``partition_epoch`` + 1 on every change;
* directories: absent, empty or all-zero mean one MIGRATING (zero) directory per replica; a real
  list must have one entry per replica (``DIRECTORIES_MISMATCH`` otherwise);
* RemoveTopicRecord (and a TopicRecord for an existing topic id) closes every partition of the topic;
  a loaded snapshot sets what it holds and deletes what it does not mention (§5.6).

Computed with window functions of one partitioning (by partition) and one order (visible offset,
offset): sentinels normalised to nulls; the events of one partition are cut into *segments* at each
reset (an applied PartitionRecord, a snapshot's partition, a tombstone); ``last(..., ignorenulls)``
carries every field forward from the last reset and the epochs are the reset's plus running counts
of the applied changes. Whether a change applies depends on its topic (a broadcast range join with
the topic versions), on the partition existing (the last reset), on its own values — and, for
directories only, on the carried state; that last check is resolved optimistically (one pass, no
failure) and, for the partitions where it finds a mismatch, by a fixpoint over DataFrame passes that
marks the first mismatching change of a segment per pass (real logs: no mismatch).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

from kraft_replay.replay.records import API, ZERO_UUID
from kraft_replay.replay.versioning import (
    MAIN, ORDER, STREAM, anomaly, annotate, current, spark_type, versions,
)
from kraft_replay.replay.schemas import SILVER_TABLES
from kraft_replay.spark import lineage_cut

__all__ = ["partition_events", "partitions", "MAX_FIXPOINT_PASSES"]

KEY = ["topic_id", "partition_id"]
LISTS = ["replicas", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr"]
MAX_FIXPOINT_PASSES = 64
_RAW = ["r_" + x for x in (*LISTS, "leader", "lrs", "le", "pe", "dirs", "topic_name")]
_META = ["_vis", "_ord", "_sub", "_vtime", "record_offset", "record_type", "snapshot_end_offset"]
#: the windows' partition columns: the partition first, so that the sort's prefix tells rows apart
#: (docs/design.md, "Versioned tables")
_BY_PARTITION = [*KEY, *STREAM]


def _entity() -> Column:
    return F.format_string("partition %s-%d", F.col("topic_id"), F.col("partition_id"))


def _real(dirs: Column) -> Column:
    """A directory list with a non-zero entry (facts §5.2: otherwise it means MIGRATING)."""
    return F.coalesce(F.size(F.array_remove(dirs, F.lit(ZERO_UUID))) > 0, F.lit(False))


def _raw(kind: str, values: dict[str, Column]) -> list[Column]:
    types = {"r_leader": "int", "r_lrs": "int", "r_le": "int", "r_pe": "int", "r_topic_name": "string",
             "r_dirs": "array<string>"}
    return [F.lit(kind).alias("kind")] + [
        (values.get(c, F.lit(None))).cast(types.get(c, "array<int>")).alias(c) for c in _RAW]


def partition_events(recs: DataFrame) -> DataFrame:
    """The partition records as raw events (kind ``PR`` / ``PC``) with Kafka's sentinels normalised:
    PartitionRecord lists null -> ``[]``, LeaderRecoveryState null -> 0; PartitionChangeRecord Leader
    −2 -> null, LeaderRecoveryState −1 -> null (unchanged)."""
    meta = [F.col("cluster_id"), F.col("_sid"), F.col("_vis"), F.col("offset").alias("_ord"), F.lit(1).alias("_sub"),
            F.col("_vtime"), F.col("offset").alias("record_offset"), F.col("record_type"),
            F.lit(None).cast("long").alias("snapshot_end_offset")]
    p = F.col("partition")
    pr = recs.where(F.col("api_key") == API["PARTITION"]).select(
        *meta, p.topic_id.alias("topic_id"), p.partition_id.alias("partition_id"),
        *_raw("PR", {
            "r_replicas": F.coalesce(p.replicas, F.array()), "r_isr": F.coalesce(p.isr, F.array()),
            "r_removing_replicas": F.coalesce(p.removing_replicas, F.array()),
            "r_adding_replicas": F.coalesce(p.adding_replicas, F.array()),
            "r_eligible_leader_replicas": F.coalesce(p.eligible_leader_replicas, F.array()),
            "r_last_known_elr": F.coalesce(p.last_known_elr, F.array()),
            "r_leader": p.leader, "r_lrs": F.coalesce(p.leader_recovery_state.cast("int"), F.lit(0)),
            "r_le": p.leader_epoch, "r_pe": p.partition_epoch, "r_dirs": F.coalesce(p.directories, F.array()),
        }))
    c = F.col("partition_change")
    pc = recs.where(F.col("api_key") == API["PARTITION_CHANGE"]).select(
        *meta, c.topic_id.alias("topic_id"), c.partition_id.alias("partition_id"),
        *_raw("PC", {
            **{f"r_{x}": c[x] for x in LISTS},
            "r_leader": F.when(c.leader != -2, c.leader),
            "r_lrs": F.coalesce(c.leader_recovery_state.cast("int"), F.lit(-1)),
            "r_dirs": c.directories,
        }))
    return pr.unionByName(pc)


def _fresh_events(fresh: DataFrame, loads: DataFrame) -> DataFrame:
    """Facts §5.6: a loaded snapshot's partitions as reset events (kind ``S``) at END − 1."""
    cur = current(fresh, "partitions")
    ld = loads.select("cluster_id", F.col("snapshot_end_offset").alias("_sid"), "at", "at_time")
    j = cur.join(ld, ["cluster_id", "_sid"])
    return j.select(
        "cluster_id", F.lit(MAIN).cast("long").alias("_sid"), F.col("at").alias("_vis"), F.col("at").alias("_ord"), F.lit(1).alias("_sub"),
        F.col("at_time").alias("_vtime"), F.lit(None).cast("long").alias("record_offset"), "record_type",
        F.col("_sid").cast("long").alias("snapshot_end_offset"), "topic_id", "partition_id",
        *_raw("S", {**{f"r_{x}": F.col(x) for x in LISTS}, "r_leader": F.col("leader"),
                    "r_lrs": F.col("leader_recovery_state"), "r_le": F.col("leader_epoch"),
                    "r_pe": F.col("partition_epoch"), "r_dirs": F.col("directories"), "r_topic_name": F.col("topic_name")}))


def _tombstone_events(topic_drops: DataFrame, keys: DataFrame) -> DataFrame:
    """Facts §5.2: a removed (or re-created) topic closes each of its partitions: one tombstone
    candidate per partition id ever seen for the topic (the window keeps those that exist)."""
    j = topic_drops.join(keys, ["cluster_id", "_sid", "topic_id"])
    return j.select("cluster_id", "_sid", "_vis", "_ord", F.lit(1).alias("_sub"), "_vtime", "record_offset", "record_type",
                    F.lit(None).cast("long").alias("snapshot_end_offset"), "topic_id", "partition_id", *_raw("T", {}))


def _absent_events(ev: DataFrame, loads: DataFrame) -> DataFrame:
    """Facts §5.6: every partition seen before a loaded snapshot and not in it: a deletion candidate."""
    main = ev.where(F.col("_sid") == MAIN)
    seen = main.groupBy("cluster_id", *KEY).agg(F.min("_vis").alias("_first"))
    ld = loads.select("cluster_id", "snapshot_end_offset", "at", "at_time")
    cand = seen.join(ld, "cluster_id").where(F.col("_first") < F.col("at"))
    in_snap = main.where(F.col("kind") == "S").select("cluster_id", *KEY, "snapshot_end_offset")
    cand = cand.join(in_snap, ["cluster_id", *KEY, "snapshot_end_offset"], "left_anti")
    return cand.select("cluster_id", F.lit(MAIN).cast("long").alias("_sid"), F.col("at").alias("_vis"), F.col("at").alias("_ord"),
                       F.lit(1).alias("_sub"), F.col("at_time").alias("_vtime"), F.lit(None).cast("long").alias("record_offset"),
                       F.lit(None).cast("string").alias("record_type"), F.col("snapshot_end_offset").cast("long"),
                       *KEY, *_raw("SA", {}))


def _with_topic_state(ev: DataFrame, topic_annotated: DataFrame) -> DataFrame:
    """``_t_exists`` / ``_t_name``: the topic's state just before each partition event — the topic
    version whose [(visible offset, offset), next version's) holds the event's (topic versions are
    ordered before partition events of the same record). A broadcast range join: topics are few
    next to partition events, so the events are neither shuffled nor sorted for it."""
    tv = topic_annotated.where(F.col("_keep")).select(
        "cluster_id", "_sid", "topic_id", F.col("_vis").alias("_t_vis"), F.col("_ord").alias("_t_ord"),
        (~F.col("_del")).alias("_t_exists"), F.col("name").alias("_t_name"))
    w = Window.partitionBy("topic_id", *STREAM).orderBy("_t_vis", "_t_ord")
    tv = tv.select(*[F.col(c).alias("_tv" + c) if c in (*STREAM, "topic_id") else F.col(c) for c in tv.columns],
                   F.lead(F.struct("_t_vis", "_t_ord")).over(w).alias("_t_next"))
    at = F.struct(F.col("_vis").alias("_t_vis"), F.col("_ord").alias("_t_ord"))
    cond = ((F.col("cluster_id") == F.col("_tvcluster_id")) & (F.col("_sid") == F.col("_tv_sid"))
            & (F.col("topic_id") == F.col("_tvtopic_id")) & (F.struct("_t_vis", "_t_ord") <= at)
            & (F.col("_t_next").isNull() | (at < F.col("_t_next"))))
    j = ev.join(F.broadcast(tv), cond, "left")
    return j.drop("_tvcluster_id", "_tv_sid", "_tvtopic_id", "_t_vis", "_t_ord", "_t_next")


def _checks(ev: DataFrame) -> DataFrame:
    """Record-local checks, then one window per partition (visible offset, offset order):
    ``_exists_before`` (the last reset before the event set it: an applied PartitionRecord or a
    snapshot's partition, not a tombstone), ``_seg`` (resets so far), ``_pc_pre`` (a change that
    applies unless its directories mismatch)."""
    kind = F.col("kind")
    topic_ok = F.coalesce(F.col("_t_exists"), F.lit(False))
    pr_dirs_ok = ~_real(F.col("r_dirs")) | (F.size("r_dirs") == F.size("r_replicas"))
    pr_applies = (kind == "PR") & topic_ok & F.col("r_lrs").isin(0, 1) & pr_dirs_ok
    ev = ev.select("*", topic_ok.alias("_topic_ok"), pr_applies.alias("_pr_applies"))
    w = Window.partitionBy(*_BY_PARTITION).orderBy(*ORDER)
    marker = (F.when(kind == "PR", F.when(F.col("_pr_applies"), F.lit(True)))
              .when(kind == "S", F.lit(True)).when(kind.isin("T", "SA"), F.lit(False)))
    reset = F.col("_pr_applies") | kind.isin("S", "T", "SA")
    running = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ev = ev.select(
        "*", F.coalesce(F.last(marker, ignorenulls=True).over(w.rowsBetween(Window.unboundedPreceding, -1)),
                        F.lit(False)).alias("_exists_before"),
        F.sum(reset.cast("int")).over(running).alias("_seg"),
        *_change_counts(_pc_local(), running))
    return ev.select("*", (F.col("_pr_applies") | (kind == "S")).alias("_reset_set"),
                     (_pc_local() & F.col("_exists_before")).alias("_pc_pre"))


def _pc_local() -> Column:
    """A change that applies when its partition exists and its directories match: its own checks."""
    return (F.col("kind") == "PC") & F.col("_topic_ok") & F.col("r_lrs").isin(-1, 0, 1)


def _change_counts(counted: Column, running: WindowSpec) -> list[Column]:
    """``_n_le`` / ``_n_pe``: running counts of the ``counted`` changes that move the leader epoch
    (Leader set) and of all of them (the partition epoch)."""
    return [F.sum((counted & F.col("r_leader").isNotNull()).cast("int")).over(running).alias("_n_le"),
            F.sum(counted.cast("int")).over(running).alias("_n_pe")]


def _carry(ev: DataFrame, recount: bool = False) -> DataFrame:
    """The partition's state after each event (``c_*`` columns, ``_applied``, ``_mismatch``), with
    the changes in ``_failed`` not applied. One running window per partition: a reset (applied
    PartitionRecord, snapshot partition) sets every field, so ``last(..., ignorenulls)`` over the
    partition restarts there (values are wrapped in a struct so that a null set at a reset is kept);
    the epochs are the reset's plus the applied changes since it: running counts (``_n_le`` /
    ``_n_pe``, from :func:`_checks`) minus their value at the reset. The counts may take the changes
    by their own checks alone (:func:`_pc_local`): between a set-reset and the next reset every such
    change applies, and elsewhere no epoch is carried. With ``recount`` (some changes ``_failed``)
    they are counted again without the failed ones. Events after a tombstone and before the next
    reset apply nothing."""
    w = (Window.partitionBy(*_BY_PARTITION).orderBy(*ORDER)
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    reset = F.col("_reset_set")
    if recount:
        ev = ev.drop("_n_le", "_n_pe").select("*", *_change_counts(_pc_local() & ~F.col("_failed"), w))
    ev = ev.withColumn("_applied", F.col("_pc_pre") & ~F.col("_failed"))
    applied = F.col("_applied")

    def carried(name: str, on_reset: Column, on_change: Column | None) -> Column:
        v = F.when(reset, F.struct(on_reset.alias("v")))
        if on_change is not None:
            v = v.when(applied & on_change.isNotNull(), F.struct(on_change.alias("v")))
        return F.last(v, ignorenulls=True).over(w).getField("v").alias(name)

    cols = [carried(f"c_{x}", F.col(f"r_{x}"), F.col(f"r_{x}")) for x in LISTS]
    cols += [
        carried("c_leader", F.col("r_leader"), F.col("r_leader")),
        carried("c_lrs", F.col("r_lrs"), F.when(F.col("r_lrs") != -1, F.col("r_lrs"))),
        carried("c_dirs", F.col("r_dirs"), F.col("r_dirs")),
        carried("c_topic_name", F.coalesce(F.col("r_topic_name"), F.col("_t_name")), None),
        # in the same window operator as the fields: the counts are inputs here (a reset counts 0)
        F.last(F.when(reset, F.struct((F.col("r_le") - F.col("_n_le")).alias("le"),
                                      (F.col("r_pe") - F.col("_n_pe")).alias("pe"))), ignorenulls=True).over(w).alias("_base"),
    ]
    ev = ev.select("*", *cols)
    real = _real(F.col("c_dirs"))
    return ev.select(
        *[c for c in ev.columns if c not in ("_base", "_n_le", "_n_pe")],
        (F.col("_base.le") + F.col("_n_le")).alias("c_le"), (F.col("_base.pe") + F.col("_n_pe")).alias("c_pe"),
        F.when(real, F.col("c_dirs")).otherwise(
            F.array_repeat(F.lit(ZERO_UUID), F.size(F.coalesce(F.col("c_replicas"), F.array())))).alias("c_directories"),
        (applied & real & (F.size("c_dirs") != F.size("c_replicas"))).alias("_mismatch"))


def _first_mismatches(carried: DataFrame) -> DataFrame:
    w = Window.partitionBy(*_BY_PARTITION, "_seg").orderBy(*ORDER)
    m = carried.where(F.col("_mismatch")).withColumn("_n", F.row_number().over(w)).where("_n = 1")
    return m.select(*STREAM, *KEY, "_vis", "_ord", F.format_string(
        "%d directories for %d replicas", F.size("c_dirs"), F.size("c_replicas")).alias("_fail_msg"))


_FAILED_SCHEMA = "cluster_id string, _sid long, topic_id string, partition_id int, _vis long, _ord long, _fail_msg string"


def _anomaly_columns(ev: DataFrame) -> DataFrame:
    """``_code`` / ``_msg``: the record-local and existence anomalies of each event (null: none)."""
    kind, topic_ok, exists = F.col("kind"), F.col("_topic_ok"), F.col("_exists_before")
    tid, pid, lrs = F.col("topic_id"), F.col("partition_id"), F.col("r_lrs")
    code = (F.when((kind == "PR") & ~topic_ok, "UNKNOWN_TOPIC")
            .when((kind == "PR") & ~lrs.isin(0, 1), "INVALID_FIELD_VALUE")
            .when((kind == "PR") & ~F.col("_pr_applies"), "DIRECTORIES_MISMATCH")
            .when((kind == "PC") & ~topic_ok, "UNKNOWN_TOPIC")
            .when((kind == "PC") & ~exists, "UNKNOWN_PARTITION")
            .when((kind == "PC") & ~lrs.isin(-1, 0, 1), "INVALID_FIELD_VALUE"))
    msg = (F.when((kind == "PR") & ~topic_ok, F.concat(F.lit("PartitionRecord for unknown topic id "), tid))
           .when((kind == "PR") & ~lrs.isin(0, 1), F.format_string("LeaderRecoveryState %d is neither 0 nor 1", lrs))
           .when(kind == "PR", F.format_string("%d directories for %d replicas", F.size("r_dirs"), F.size("r_replicas")))
           .when(~topic_ok, F.concat(F.lit("PartitionChangeRecord for unknown topic id "), tid))
           .when(~exists, F.format_string("PartitionChangeRecord for partition %d the topic does not have", pid))
           .otherwise(F.format_string("LeaderRecoveryState %d is not -1, 0 or 1", lrs)))
    return ev.select("*", code.alias("_code"), F.when(code.isNotNull(), msg).alias("_msg"))


def _resolve(ev: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The carried state with the directory mismatches resolved, and the failed changes with their
    messages. Optimistic: one pass with no failed change; the partitions where it finds a mismatch
    (real logs: none) are redone by a fixpoint over DataFrame passes, each marking the first
    mismatching change of a segment as failed. The result is computed once (lineage cut)."""
    spark = ev.sparkSession
    first = _carry(ev.withColumn("_failed", F.lit(False)))
    first = lineage_cut(first.drop(*[c for c in ev.columns if c.startswith("r_")]))
    bad = lineage_cut(first.where(F.col("_mismatch")).select(*STREAM, *KEY).distinct())
    if bad.isEmpty():
        return first, spark.createDataFrame([], _FAILED_SCHEMA)
    risky = ev.join(F.broadcast(bad), [*STREAM, *KEY], "left_semi").withColumn("_failed", F.lit(False))
    risky = lineage_cut(risky)
    failed = None
    for _ in range(MAX_FIXPOINT_PASSES):
        carried = lineage_cut(_carry(risky, recount=True))
        new = lineage_cut(_first_mismatches(carried))
        if new.isEmpty():
            break
        failed = new if failed is None else failed.unionByName(new)
        risky = (risky.drop("_failed").join(F.broadcast(failed.select(*STREAM, *KEY, "_vis", "_ord", F.lit(True).alias("_failed"))),
                                            [*STREAM, *KEY, "_vis", "_ord"], "left")
                 .withColumn("_failed", F.coalesce(F.col("_failed"), F.lit(False))))
    else:
        raise RuntimeError(f"partitions: directory mismatches did not settle in {MAX_FIXPOINT_PASSES} passes")
    good = first.join(F.broadcast(bad), [*STREAM, *KEY], "left_anti")
    out = lineage_cut(good.unionByName(carried.select(*good.columns)))
    return out, failed if failed is not None else spark.createDataFrame([], _FAILED_SCHEMA)


def partitions(recs: DataFrame, topic_annotated: DataFrame, topic_drops: DataFrame,
               fresh: DataFrame | None = None, loads: DataFrame | None = None) -> tuple[DataFrame, DataFrame, DataFrame]:
    """Facts §5.2 / §5.6: ``(versions, anomalies, dropped)`` of the ``partitions`` table.
    ``topic_annotated``: the annotated topic events (:func:`kraft_replay.replay.topics.topics`);
    ``topic_drops``: the applied RemoveTopicRecords and re-creating TopicRecords (their partitions
    are closed); ``dropped``: per such record (stream, ``topic_id``, ``record_offset``), how many
    partitions it closed.

    One shuffle (by partition) and one sort: the topic state comes from a broadcast range join, and
    the checks, the carried state and the versions are windows of one partitioning and order."""
    ev = partition_events(recs)
    if fresh is not None and loads is not None:
        ev = ev.unionByName(_fresh_events(fresh, loads))
    keys = ev.where(F.col("kind").isin("PR", "S")).select(*STREAM, *KEY).distinct()
    ev = ev.unionByName(_tombstone_events(topic_drops, keys))
    if fresh is not None and loads is not None:
        ev = ev.unionByName(_absent_events(ev, loads))
    ev = _anomaly_columns(_checks(_with_topic_state(ev, topic_annotated)))
    carried, failed = _resolve(ev)

    kind = F.col("kind")
    anomalies = anomaly(carried.where(F.col("_code").isNotNull()), F.col("_code"), _entity(), F.col("_msg"),
                        offset=F.col("_ord"))
    fails = failed.join(carried.select(*STREAM, *KEY, "_vis", "_ord", "record_type"), [*STREAM, *KEY, "_vis", "_ord"])
    anomalies = anomalies.unionByName(anomaly(fails, "DIRECTORIES_MISMATCH", _entity(), F.col("_fail_msg"), offset=F.col("_ord")))
    # a tombstone closes the partition when it exists just before (the last reset was not one)
    dropped = (carried.where((kind == "T") & F.col("_exists_before"))
               .groupBy(*STREAM, "topic_id", "record_offset").agg(F.count(F.lit(1)).alias("dropped")))

    # versions
    spec = SILVER_TABLES["partitions"]
    types = {f.name: spark_type(f.type) for f in spec.schema}
    keep = (kind == "PR") & F.col("_pr_applies") | kind.isin("S", "T", "SA") | F.col("_applied")
    c = carried.where(keep)
    is_del = kind.isin("T", "SA")
    fields = {"topic_name": F.col("c_topic_name"), **{x: F.col(f"c_{x}") for x in LISTS}, "leader": F.col("c_leader"),
              "leader_recovery_state": F.col("c_lrs"), "leader_epoch": F.col("c_le"), "partition_epoch": F.col("c_pe"),
              "directories": F.col("c_directories")}
    final = c.select(*STREAM, *KEY, *[F.when(~is_del, v).cast(types[n]).alias(n) for n, v in fields.items()],
                     *_META, is_del.alias("_del"), kind.isin("S", "SA").alias("_snap"))
    return versions(annotate(final, "partitions"), "partitions"), anomalies, dropped
