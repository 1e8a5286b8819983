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

The events (records, a loaded snapshot's partitions, tombstone and deletion candidates) are built
with DataFrame operations, each with its topic just before it (a broadcast range join with the topic
versions); one shuffle hashes them by partition and each task turns its partitions' events into
versions on Arrow batches (:mod:`kraft_replay.replay.partition_state`: the carried state as running
indexes and counts over whole columns, no row looked at alone). Spark's windows did the same in
one sort and two window passes at three times the cost (docs/design.md, "``partitions`` on Arrow
batches").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kraft_replay.lake.staged import StagedWrite, read_staged, task_part_id, write_staged_arrow
from kraft_replay.replay.partition_state import (
    ANOMALY, CLOSED, IMAGE, KIND_RECORD_TYPES, LEADER, LISTS, OUTPUT_SCHEMA, STATE_INPUT, STATE_OUTPUT, VERSION,
    partition_state,
)
from kraft_replay.replay.records import API
from kraft_replay.replay.versioning import MAIN, STREAM, anomaly, current, spark_type
from kraft_replay.replay.schemas import SILVER_TABLES
from kraft_replay.spark import lineage_cut, tasks_holding
from kraft_replay.spark.arrow import codes, ddl_fields, longs

__all__ = ["partition_events", "partitions", "live_at", "leader_change_rows", "LEADER_INPUT"]

KEY = ["topic_id", "partition_id"]
#: about this many events per task (a task's events are in Python memory at once: ~1 KiB each at the peak)
TASK_ROWS = 500_000
_INPUT = ddl_fields(STATE_INPUT)
#: the table's time columns and the µs columns of :data:`STATE_OUTPUT` they come from
_TIMES = {"valid_from_time": "_from_us", "valid_to_time": "_to_us"}
_RAW = ["r_" + x for x in (*LISTS, "leader", "lrs", "le", "pe", "dirs", "topic_name")]


def _entity() -> Column:
    return F.format_string("partition %s-%d", F.col("topic_id"), F.col("partition_id"))


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


def _rows(df: DataFrame) -> int:
    """How many rows ``df`` has, to size the tasks (Spark's size estimate of the joined events is
    unusable): counted on its RDD of internal rows, one stage, no aggregate. (With ``DataFrame.count``,
    one 10M run in three and the 100M run logged "attempted to access non-existent accumulator" ERROR
    lines for the final aggregate's one task: harmless metrics, alarming in a job's log.)"""
    return int(df._jdf.queryExecution().toRdd().count())


def _contract(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Version rows of :data:`STATE_OUTPUT` as rows of the ``partitions`` table (its columns and types)."""
    spec = SILVER_TABLES["partitions"]
    return pa.RecordBatch.from_arrays([batch.column(_TIMES.get(f.name, f.name)).cast(f.type) for f in spec.schema],
                                      schema=spec.schema)


def live_at(versions: pa.RecordBatch, at: Sequence[tuple[str, int]]) -> pa.RecordBatch | None:
    """The rows of ``versions`` (:data:`STATE_OUTPUT` version rows) visible at each ``(cluster_id,
    offset)`` of ``at`` — ``valid_from_offset <= offset < valid_to_offset`` (open: current) and not
    deleted, the rule of :func:`kraft_replay.replay.images.as_of` — as ``_row`` :data:`IMAGE` rows
    with the offset in ``_ord``; None when there are none."""
    if not at or not versions.num_rows:
        return None
    cluster = versions.column("cluster_id")
    start = versions.column("valid_from_offset").to_numpy(zero_copy_only=False)
    end = versions.column("valid_to_offset")
    open_ = end.is_null().to_numpy(zero_copy_only=False)
    end = end.fill_null(0).to_numpy(zero_copy_only=False)
    alive = ~versions.column("deleted").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    parts = []
    for c in sorted({c for c, _ in at}):
        mine = alive & pc.equal(cluster, c).fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
        for o in sorted({o for cc, o in at if cc == c}):
            rows = np.flatnonzero(mine & (start <= o) & (open_ | (o < end)))
            if rows.size:
                sub = versions.take(pa.array(rows))
                sub = sub.set_column(sub.schema.get_field_index("_row"), "_row", pa.array(np.full(rows.size, IMAGE, np.int32)))
                parts.append(sub.set_column(sub.schema.get_field_index("_ord"), "_ord", pa.array(np.full(rows.size, o, np.int64))))
    if not parts:
        return None
    return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]


#: the columns of a task's main-stream versions :func:`leader_change_rows` reads
LEADER_INPUT = ["cluster_id", "topic_id", "partition_id", "valid_from_offset", "valid_to_offset", "record_offset",
                "deleted", "leader", "leader_epoch"]


def _changed(a: pa.ChunkedArray, prev_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Whether column ``a`` at ``rows`` differs, null-safe, from itself at ``prev_rows``."""
    v, ok = longs(a)
    return (ok[rows] != ok[prev_rows]) | (ok[rows] & (v[rows] != v[prev_rows]))


def leader_change_rows(versions: pa.Table) -> pa.RecordBatch | None:
    """Seed 002's image divergence: among a task's versions of the main stream (:data:`LEADER_INPUT`;
    every version of each of its partitions), the leader-affecting ones — visible versions that are
    their partition's first, or whose deletion, leader or leader epoch differ (null-safe) from the
    visible version before them, by (``valid_from_offset``, ``record_offset``, nulls first) — as
    :data:`LEADER` rows: ``cluster_id``, ``topic_id``, ``partition_id``, ``valid_from_offset`` (the
    change) and ``_ord`` (the partition's previous change, -2 for its first); None when there are
    none. What ``outcomes.cache_lag.leader_changes`` finds in the written table."""
    start = versions.column("valid_from_offset").to_numpy()
    stop, has_stop = longs(versions.column("valid_to_offset"))
    vis = np.flatnonzero(~has_stop | (stop > start))
    if not len(vis):
        return None
    t = versions.take(pa.array(vis))
    cluster, topic = codes(t.column("cluster_id"))[0], codes(t.column("topic_id"))[0]
    part = t.column("partition_id").to_numpy().astype(np.int64)
    start = start[vis]
    rec, has_rec = longs(t.column("record_offset"))
    o = np.lexsort((rec, has_rec, start, part, topic, cluster))
    first = np.ones(len(o), bool)
    first[1:] = (cluster[o][1:] != cluster[o][:-1]) | (topic[o][1:] != topic[o][:-1]) | (part[o][1:] != part[o][:-1])
    prev = np.r_[o[:1], o[:-1]]
    affects = first | _changed(t.column("deleted"), prev, o) | _changed(t.column("leader"), prev, o) \
        | _changed(t.column("leader_epoch"), prev, o)
    rows, first = o[affects], first[affects]
    before = np.r_[-2, start[rows][:-1]]
    before[first] = -2
    n = len(rows)
    cols = {"cluster_id": t.column("cluster_id").take(pa.array(rows)), "topic_id": t.column("topic_id").take(pa.array(rows)),
            "partition_id": t.column("partition_id").take(pa.array(rows)),
            "_row": pa.array(np.full(n, LEADER, np.int32)), "valid_from_offset": pa.array(start[rows]),
            "_ord": pa.array(before)}
    return pa.Table.from_arrays([(cols[f.name] if f.name in cols else pa.nulls(n, f.type)).cast(f.type)
                                 for f in OUTPUT_SCHEMA], schema=OUTPUT_SCHEMA).combine_chunks().to_batches()[0]


def _writing_versions(sink: StagedWrite, images: Sequence[tuple[str, int]] = ()
                      ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """:func:`partition_state` whose versions of the main stream go into ``sink``'s files (written by
    this worker with pyarrow, named after the task's partition: a retried task rewrites its own
    files) instead of back to the JVM; the other rows (anomalies, tombstones, versions of other
    streams) come out as usual, and so do the main versions visible at each ``(cluster_id, offset)``
    of ``images`` (:func:`live_at`: the partitions of those images, so that ``image_snapshots`` does
    not read every version back) and the leader-affecting changes among the main versions
    (:func:`leader_change_rows`, what ``cache_lag`` would otherwise find in every version written)."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rest: list[pa.RecordBatch] = []
        leader_input: list[pa.RecordBatch] = []

        def versions() -> Iterator[pa.RecordBatch]:
            for b in partition_state(batches):
                main = pc.and_(pc.equal(b.column("_row"), VERSION), pc.equal(b.column("_sid"), MAIN))
                other = b.filter(pc.invert(main))
                if other.num_rows:
                    rest.append(other)
                if other.num_rows < b.num_rows:
                    mine = b.filter(main)
                    live = live_at(mine, images)
                    if live is not None:
                        rest.append(live)
                    leader_input.append(mine.select(LEADER_INPUT))
                    yield _contract(mine)

        write_staged_arrow(sink, versions(), part_id=task_part_id())
        if leader_input:
            changes = leader_change_rows(pa.Table.from_batches(leader_input).combine_chunks())
            if changes is not None:
                rest.append(changes)
        yield from rest
    return run


def partitions(recs: DataFrame, topic_annotated: DataFrame, topic_drops: DataFrame,
               fresh: DataFrame | None = None, loads: DataFrame | None = None,
               sink: StagedWrite | None = None, images: Sequence[tuple[str, int]] | None = None,
               rows: int | None = None) -> tuple[DataFrame, DataFrame, DataFrame, dict[str, DataFrame]]:
    """Facts §5.2 / §5.6: ``(versions, anomalies, dropped, side)`` of the ``partitions`` table.
    ``topic_annotated``: the annotated topic events (:func:`kraft_replay.replay.topics.topics`);
    ``topic_drops``: the applied RemoveTopicRecords and re-creating TopicRecords (their partitions
    are closed); ``dropped``: per such record (stream, ``topic_id``, ``record_offset``), how many
    partitions it closed. With ``sink``, ``side`` holds what the tasks that write the versions pick
    among them: ``leader_changes``, the leader-affecting changes of the main stream
    (:func:`leader_change_rows`: ``cluster_id``, ``topic_id``, ``partition_id``, ``_v``, ``_p``, the
    rows of ``outcomes.cache_lag.leader_changes`` of the table), and with ``images`` too
    ``partition_images``, the versions of the main stream visible at each ``(cluster_id, offset)`` of
    it — the table's columns and ``image_offset`` (without: ``image_snapshots`` joins the versions).
    ``rows``: at least as many as the records in ``recs`` (e.g. the log's rows), to size the tasks
    (:data:`TASK_ROWS` events each) without counting them; None: counted (one scan of the records).

    One shuffle (by partition), no sort: the topic state comes from a broadcast range join, the state,
    the versions and the anomalies from :func:`~kraft_replay.replay.partition_state.partition_state`
    on each task's Arrow batches, computed once (the three frames read it: ``versions`` needs no
    checkpoint of its own)."""
    ev = partition_events(recs)
    if fresh is not None and loads is not None:
        ev = ev.unionByName(_fresh_events(fresh, loads))
    keys = ev.where(F.col("kind").isin("PR", "S")).select(*STREAM, *KEY).distinct()
    ev = ev.unionByName(_tombstone_events(topic_drops, keys))
    if fresh is not None and loads is not None:
        ev = ev.unionByName(_absent_events(ev, loads))
    ev = _with_topic_state(ev, topic_annotated)
    # the topic's name is read on resets alone (a PartitionRecord, a snapshot's partition): null on the
    # other events, it does not cross the shuffle and the hand-off to Python (~8 of 106 MB a task at 10M)
    ev = ev.withColumn("_t_name", F.when(F.col("kind").isin("PR", "S"), F.col("_t_name")))
    inp = ev.select(*[F.unix_micros("_vtime").alias(c) if c == "_vtime" else F.col(c).cast(t).alias(c)
                      for c, t in _INPUT])
    n = rows if rows is not None else _rows(recs.select("offset"))
    tasks = tasks_holding(recs.sparkSession, n, TASK_ROWS)
    # a PR / PC event's record type is not handed to Python either (~13 MB a task): the state restores
    # the one its kind names. Nulled after the shuffle: before it, the shuffle's compressed rows grew
    # (652 -> 717 MB at 10M)
    named = F.coalesce(*[F.when(F.col("kind") == k, F.lit(v)) for k, v in KIND_RECORD_TYPES.items()])
    shuffled = inp.repartition(tasks, *STREAM, *KEY)
    shuffled = shuffled.withColumn("record_type", F.when(~F.col("record_type").eqNullSafe(named), F.col("record_type")))
    state = shuffled.mapInArrow(partition_state if sink is None else _writing_versions(sink, images or ()), STATE_OUTPUT)
    # with a sink: computed now, so that its files are there to be read
    out = lineage_cut(state, eager=sink is not None)

    row = F.col("_row")
    spec = SILVER_TABLES["partitions"]
    cols = {name: F.timestamp_micros(us) for name, us in _TIMES.items()}
    typed = [cols.get(f.name, F.col(f.name)).cast(spark_type(f.type)).alias(f.name) for f in spec.schema]
    versions = out.where(row == VERSION).select("_sid", *typed)
    if sink is not None:
        written = read_staged(recs.sparkSession, sink)
        versions = versions.unionByName(written.select(F.lit(MAIN).cast("long").alias("_sid"), *[f.name for f in spec.schema]))
    few = lineage_cut(out.where(row != VERSION))  # anomalies, closing tombstones, image rows: one scan for all
    anomalies = anomaly(few.where(row == ANOMALY), F.col("_code"), _entity(), F.col("_msg"), offset=F.col("_ord"))
    dropped = (few.where(row == CLOSED).groupBy(*STREAM, "topic_id", "record_offset")
               .agg(F.count(F.lit(1)).alias("dropped")))
    side = {}
    if sink is not None:
        side["leader_changes"] = few.where(row == LEADER).select(
            "cluster_id", "topic_id", "partition_id", F.col("valid_from_offset").alias("_v"), F.col("_ord").alias("_p"))
        if images is not None:
            side["partition_images"] = few.where(row == IMAGE).select(F.col("_ord").alias("image_offset"), *typed)
    return versions, anomalies, dropped, side
