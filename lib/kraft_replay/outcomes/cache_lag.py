"""``cache_lag`` (gold): how far behind each broker's metadata cache was, second by second (KIP-500's
model, seed 002: brokers pull the log and hold a cache at their own offset; facts §5.1, §9.1).

Per sample of bronze ``broker_progress`` (:func:`sample_lag`):

* ``log_end_offset``: the end of the replayed log at the sample's time — the largest last offset of
  a log batch appended at or before it (``log_batches``; control batches count, §5.1) —, or, where
  the cluster's quorum was captured (bronze ``quorum_status``, :func:`committed_end`), the
  **committed** end: brokers apply only records below the leader's high watermark (§5.1), so the
  batches a capture showed at or past it are not counted as lag;
* ``offset_lag`` = ``log_end_offset`` − ``applied_offset`` (never below 0: a broker may be ahead of
  the ingested log);
* ``time_lag_ms``: the sample's time minus the append time of the oldest record the broker had not
  applied (the batch holding ``applied_offset + 1``); 0 when it had applied everything appended by then
  (or everything committed: no offset lag);
* ``stalled``: it lags and its applied offset has not moved for ``stall_after_s`` seconds or more;
* ``registered`` / ``fenced``: its registration in the image at ``log_end_offset`` (``brokers``);
* ``image_divergence``: its exposure to stale-leader routing — how many partitions' leader or leader
  epoch in its cache (the image at ``applied_offset``) are not the image's at ``log_end_offset``:
  partitions with a leader-affecting version (created, deleted, leader or leader epoch changed) in
  ``(applied_offset, log_end_offset]`` (leader epochs only grow, so such a partition differs, a
  re-created one included);
  counted exactly as the changes whose previous leader-affecting change of the same partition is at or
  before ``applied_offset`` (one per partition).

:func:`cache_lag` then groups the samples per broker and time bucket (``bucket_s``, 1 s by default):
p50 / p99 (the lower percentile, ``sorted[ceil(p·n) − 1]``, exact) / max of both lags, the last applied
and log-end offsets, and whether any sample stalled.
How it runs: one shuffle of the samples (by broker: duplicates, the window for ``applied_since``);
then each task looks its samples up on numpy (:func:`sample_lookups`) in what was collected once on
the driver — the cluster's batches (by append time and by last offset:
``outcomes.steps.log_steps``: 16 bytes per batch in the usual log), its captures, its leader changes
(76k at 10M records) — where Spark's windows over the union of samples and batches sorted both twice
and the divergence joined the lagging samples with the changes on offset buckets and back by sample.
The buckets are aggregated on Arrow batches in the same tasks (:func:`bucket_lags`: one sort per lag,
where Spark's ``percentile_approx`` kept a quantile sketch per bucket — 7M buckets of one sample at
10M records). The live stream keeps
the same rules in :mod:`kraft_replay.outcomes.live_lag`; tests hold the two equal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from kraft_replay.outcomes.lookups import arrow_longs, changes_in, collect_changes
from kraft_replay.outcomes.steps import NULL, ClusterSteps, arrow_micros, cluster_log_steps, log_steps
from kraft_replay.replay.broker_applied import BY_BROKER
from kraft_replay.spark import sized_by, tasks_holding
from kraft_replay.spark.arrow import codes

__all__ = ["sample_lag", "batch_steps", "read_batch_steps", "cache_lag", "bucket_lags", "percentile_rank", "write_cache_lag",
           "committed_end", "sample_captures", "sample_lookups", "CACHE_LAG",
           "leader_changes", "CACHE_LAG_COLUMNS", "CACHE_LAG_SCHEMA", "TASK_ROWS",
           "STALL_AFTER_S"]

STALL_AFTER_S = 2.0  # metadata normally applies within milliseconds: seconds without progress while lagging is a stall
CACHE_LAG_COLUMNS = [
    "cluster_id", "broker_id", "bucket_start", "samples", "applied_offset", "log_end_offset",
    "offset_lag_p50", "offset_lag_p99", "offset_lag_max", "time_lag_ms_p50", "time_lag_ms_p99", "time_lag_ms_max",
    "registered", "fenced", "stalled", "image_divergence",
]
_KEY = ["cluster_id", "broker_id"]
#: the ``cache_lag`` table's columns and types (the batch job's and the live stream's)
CACHE_LAG_SCHEMA = pa.schema([
    ("cluster_id", pa.string()), ("broker_id", pa.int32()), ("bucket_start", pa.timestamp("us", tz="UTC")),
    ("samples", pa.int64()), ("applied_offset", pa.int64()), ("log_end_offset", pa.int64()),
    ("offset_lag_p50", pa.int64()), ("offset_lag_p99", pa.int64()), ("offset_lag_max", pa.int64()),
    ("time_lag_ms_p50", pa.int64()), ("time_lag_ms_p99", pa.int64()), ("time_lag_ms_max", pa.int64()),
    ("registered", pa.bool_()), ("fenced", pa.bool_()), ("stalled", pa.bool_()), ("image_divergence", pa.int64()),
])
assert CACHE_LAG_SCHEMA.names == CACHE_LAG_COLUMNS
#: about this many samples per task of :func:`cache_lag` (a task's samples are in Python memory at once)
TASK_ROWS = 1_000_000


def _us(c: Column) -> Column:
    return F.unix_micros(c)


def leader_candidates(partitions: DataFrame) -> DataFrame:
    """The versions of ``partitions`` that can affect the leader, read off ``changed_fields`` (the
    fields a version changed against the partition's version before it; null for a deletion, every
    field for a creation): those naming ``leader`` or ``leader_epoch`` or null, and every version of a
    partition with a never-visible version (``valid_to_offset == valid_from_offset``: the visible
    version after it is compared with the visible one before, which ``changed_fields`` does not
    see). The versions left out change neither leader, epoch nor deletion, so the leader-affecting
    versions among the candidates are those among all versions (at 10M records, 76k candidates of
    9.5M versions)."""
    cf = F.col("changed_fields")
    flagged = cf.isNull() | F.array_contains(cf, "leader") | F.array_contains(cf, "leader_epoch")
    key = ["cluster_id", "topic_id", "partition_id"]
    hidden = (partitions.where(F.col("valid_to_offset") == F.col("valid_from_offset")).select(*key).distinct()
              .withColumn("_hidden", F.lit(True)))
    j = partitions.join(F.broadcast(hidden), key, "left")
    return j.where(flagged | F.col("_hidden").isNotNull()).drop("_hidden")


def leader_changes(partitions: DataFrame) -> DataFrame:
    """The leader-affecting versions of ``partitions`` (visible ones: created, deleted, or leader /
    leader epoch changed): ``cluster_id``, ``topic_id``, ``partition_id``, ``_v`` (offset) and ``_p``
    (the previous leader-affecting version's offset of the partition; -2 for the first). The window
    runs over :func:`leader_candidates` only (at 10M records 2.3-3.3 s against 6.2-7.1 s over every
    version, docs/benchmarks.md)."""
    return leader_changes_of(leader_candidates(partitions))


def leader_changes_of(partitions: DataFrame) -> DataFrame:
    """:func:`leader_changes` over the versions given, each compared with the visible one before it."""
    v = partitions.where(F.col("valid_to_offset").isNull() | (F.col("valid_to_offset") > F.col("valid_from_offset")))
    w = Window.partitionBy("topic_id", "partition_id", "cluster_id").orderBy("valid_from_offset", "record_offset")
    v = v.select("cluster_id", "topic_id", "partition_id", "valid_from_offset", "record_offset", "deleted", "leader",
                 "leader_epoch", F.lag("deleted").over(w).alias("_pd"), F.lag("leader").over(w).alias("_pl"),
                 F.lag("leader_epoch").over(w).alias("_pe"), F.lag("valid_from_offset").over(w).alias("_pv"))
    affects = (F.col("_pv").isNull() | (F.col("deleted") != F.col("_pd"))
               | ~F.col("leader").eqNullSafe(F.col("_pl")) | ~F.col("leader_epoch").eqNullSafe(F.col("_pe")))
    c = v.where(affects)
    return c.select("cluster_id", "topic_id", "partition_id", F.col("valid_from_offset").alias("_v"),
                    F.coalesce(F.lag("valid_from_offset").over(w), F.lit(-2)).alias("_p"))


def _registration(samples: DataFrame, brokers: DataFrame) -> DataFrame:
    """``samples`` with ``registered`` / ``fenced``: its broker's registration in the image at its
    ``log_end_offset`` (brokers have few versions: a broadcast range join, each sample matching one
    version at most)."""
    v = brokers.select(F.col("cluster_id").alias("_c"), F.col("broker_id").alias("_b"), "valid_from_offset",
                       "valid_to_offset", "deleted", "fenced")
    at = F.col("log_end_offset")
    cond = ((F.col("cluster_id") == F.col("_c")) & (F.col("broker_id") == F.col("_b"))
            & (F.col("valid_from_offset") <= at) & (F.col("valid_to_offset").isNull() | (at < F.col("valid_to_offset"))))
    j = samples.join(F.broadcast(v.withColumnRenamed("fenced", "_f")), cond, "left")
    return j.select(*samples.columns, F.coalesce(~F.col("deleted"), F.lit(False)).alias("registered"),
                    F.when(~F.col("deleted"), F.col("_f")).alias("fenced"))


def committed_end(end: np.ndarray, t: np.ndarray, captures: tuple[np.ndarray, np.ndarray, np.ndarray] | None
                  ) -> np.ndarray:
    """Facts §5.1 (only records below the high watermark are replayed): the log's ends ``end`` at
    sample times ``t`` (µs) made the committed end where a ``quorum_status`` capture of the cluster with
    a known ``high_watermark`` H is at or before the sample (the latest such, at ``t_q``): H - 1 — the
    capture's committed end, also where the ingested log is behind it —, raised to the log's end at the
    sample if batches appended after the capture moved it past the log's end at ``t_q`` (no capture
    says yet whether they are committed). Without such a capture the log's end stays. ``captures``:
    the cluster's ``t_q`` (ascending), H and the log's end at ``t_q`` (:func:`sample_captures`)."""
    if captures is None or not len(captures[0]):
        return end
    tq, h, e = captures
    i = np.searchsorted(tq, t, "right") - 1
    j = np.maximum(i, 0)
    committed = np.where(end > e[j], np.maximum(h[j] - 1, end), h[j] - 1)
    return np.where(i >= 0, committed, end)


def sample_captures(status: DataFrame, steps: dict[str, ClusterSteps]
                    ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per cluster, its ``quorum_status`` captures with a known high watermark (few), collected: their
    times (µs, ascending), high watermarks and the log's end at each (:meth:`ClusterSteps.log_end_at`),
    what :func:`committed_end` reads."""
    t = status.where(F.col("high_watermark").isNotNull()).select(
        "cluster_id", _us(F.col("observed_at")).alias("t"), F.col("high_watermark").cast("long").alias("h")).toArrow()
    out = {}
    for c in set(t.column("cluster_id").to_pylist()):
        mine = t.filter(pc.equal(t.column("cluster_id"), c)).sort_by([("t", "ascending"), ("h", "ascending")])
        tq = mine.column("t").fill_null(NULL).to_numpy().astype(np.int64)
        cs = steps.get(c)
        e = cs.log_end_at(tq) if cs is not None else np.full(len(tq), -1, np.int64)
        out[c] = (tq, mine.column("h").to_numpy().astype(np.int64), e)
    return out


def sample_lookups(steps: dict[str, ClusterSteps], captures: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                   changes: dict[str, tuple[np.ndarray, np.ndarray]]
                   ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Seed 002 / facts §5.1, §9.1: sample rows (``cluster_id``, ``observed_at``, ``applied_offset``)
    with what each looks up in its cluster's log, in the samples' own tasks on numpy (the cluster's
    batches as :class:`~kraft_replay.outcomes.steps.ClusterSteps`, its captures and leader changes,
    collected once and shipped with the function):

    * ``log_end_offset``: the log's end at ``observed_at`` (:meth:`ClusterSteps.log_end_at`; -1 before
      any batch), made the committed end by the captures (:func:`committed_end`);
    * ``_next_us``: the append time of the batch holding ``applied_offset + 1`` — the first batch whose
      last offset is at or above it (:meth:`ClusterSteps.next_batch_time`; null past the last batch);
    * ``image_divergence``: the partitions whose leader-affecting change in ``(applied_offset,
      log_end_offset]`` is the first after ``applied_offset`` (``changes``: :func:`leader_changes`,
      :func:`~kraft_replay.outcomes.lookups.collect_changes`), counted by
      :func:`~kraft_replay.outcomes.lookups.changes_in`; 0 without a range."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            t = _ints(b, "observed_at")
            applied, has_applied = arrow_longs(b.column("applied_offset"))
            end = np.full(b.num_rows, -1, np.int64)
            nxt = np.full(b.num_rows, NULL, np.int64)
            div = np.zeros(b.num_rows, np.int64)
            cluster, names = codes(b.column("cluster_id"))
            for i, c in enumerate(names):
                mine = np.flatnonzero(cluster == i)
                cs = steps.get(c)
                if cs is not None:
                    end[mine] = cs.log_end_at(t[mine])
                    nxt[mine] = cs.next_batch_time(applied[mine] + 1)
                end[mine] = committed_end(end[mine], t[mine], captures.get(c))
                if c in changes:
                    ok = mine[has_applied[mine]]
                    div[ok] = changes_in(*changes[c], applied[ok], end[ok])
            nxt[~has_applied] = NULL
            yield (b.append_column("log_end_offset", pa.array(end))
                   .append_column("_next_us", pa.array(nxt, mask=nxt == NULL))
                   .append_column("image_divergence", pa.array(div)))
    return run


def batch_steps(batches: DataFrame) -> dict[str, ClusterSteps]:
    """:func:`~kraft_replay.outcomes.steps.log_steps` of ``log_batches`` rows collected by Spark (one
    collect: the rows pass through the driver JVM's heap at once)."""
    return log_steps(batches.select("cluster_id", F.col("batch_last_offset").alias("last"),
                                    _us(F.col("append_time")).alias("time")).toArrow())


def read_batch_steps(lake, clusters: list[str]) -> dict[str, ClusterSteps]:  # noqa: ANN001 - a Lake
    """:func:`batch_steps` of the lake's ``log_batches``, read on the driver cluster by cluster
    (``Lake.read_arrow``: the embedded backend reads the files with delta-rs — no Spark job, no row
    through the driver JVM, whose 4 GiB heap a collect of 18M batches at 100M records exhausted)."""
    out: dict[str, ClusterSteps] = {}
    for c in clusters:
        t = lake.read_arrow("log_batches", ["batch_last_offset", "append_time"], partitions=[("cluster_id", "=", c)])
        if t.num_rows:
            out[c] = cluster_log_steps(t.column("batch_last_offset").to_numpy().astype(np.int64),
                                       arrow_micros(t.column("append_time")).to_numpy().astype(np.int64))
    return out


def sample_lag(progress: DataFrame, batches: DataFrame, brokers: DataFrame, partitions: DataFrame,
               stall_after_s: float = STALL_AFTER_S,
               status: DataFrame | None = None, rows: int | None = None,
               steps: dict[str, ClusterSteps] | None = None) -> DataFrame:
    """Seed 002 / facts §9.1: per ``broker_progress`` sample, its lag behind the replayed log (see
    the module docstring). ``batches``: ``log_batches``; ``brokers`` / ``partitions``: the versions;
    ``status``: bronze ``quorum_status`` (its high watermarks make the end the committed end:
    :func:`committed_end`). Collects what the samples look up when called (:func:`sample_lookups`: the
    batches, the captures, the leader changes of ``partitions``). ``rows``: the samples, when known: the
    shuffle by broker makes tasks of about :data:`TASK_ROWS` samples (what :func:`cache_lag` holds per
    task with ``by_broker``); else Spark's adaptive partitions. ``steps``: the batches' steps, read
    already (:func:`read_batch_steps`); None: collected from ``batches`` (:func:`batch_steps`)."""
    # one shuffle: the duplicates' grouping and the window are both per broker (a hash of the broker satisfies both)
    s = progress.select(*_KEY, "observed_at", "applied_offset")
    s = (s.repartition(*BY_BROKER) if rows is None else
         s.repartition(tasks_holding(progress.sparkSession, rows, TASK_ROWS), *BY_BROKER))
    s = s.dropDuplicates([*_KEY, "observed_at"])
    w = Window.partitionBy(*BY_BROKER).orderBy("observed_at")
    moved = F.lag("applied_offset").over(w).isNull() | (F.lag("applied_offset").over(w) != F.col("applied_offset"))
    s = s.select("*", F.when(moved, F.col("observed_at")).alias("_moved"))
    s = s.select(*_KEY, "observed_at", "applied_offset",
                 F.last("_moved", ignorenulls=True).over(w.rowsBetween(Window.unboundedPreceding, 0)).alias("applied_since"))
    steps = batch_steps(batches) if steps is None else steps
    found = StructType([*s.schema.fields, StructField("log_end_offset", LongType()), StructField("_next_us", LongType()),
                        StructField("image_divergence", LongType())])
    s = s.mapInArrow(sample_lookups(steps, sample_captures(status, steps) if status is not None else {},
                                    collect_changes(leader_changes(partitions))), found)
    offset_lag = F.greatest(F.col("log_end_offset") - F.col("applied_offset"), F.lit(0))
    obs = _us(F.col("observed_at"))
    time_lag = F.when((offset_lag > 0) & F.col("_next_us").isNotNull() & (F.col("_next_us") <= obs),
                      F.floor((obs - F.col("_next_us")) / 1000)).otherwise(F.lit(0)).cast("long")
    stalled = (offset_lag > 0) & ((obs - _us(F.col("applied_since"))) >= F.lit(int(stall_after_s * 1_000_000)))
    s = s.select(*_KEY, "observed_at", "applied_offset", "applied_since", "log_end_offset",
                 offset_lag.alias("offset_lag"), time_lag.alias("time_lag_ms"), stalled.alias("stalled"), "image_divergence")
    return _registration(s, brokers).select(*_KEY, "observed_at", "applied_offset", "applied_since", "log_end_offset",
                                            "offset_lag", "time_lag_ms", "stalled", "registered", "fenced",
                                            "image_divergence")


def percentile_rank(n, p: float):  # noqa: ANN001, ANN201 - an int or a numpy array of them
    """The 1-based rank of the lower ``p`` percentile among ``n`` sorted values, ``ceil(p·n)`` (at least
    1): the smallest value with at least ``p`` of the values at or below it (what ``percentile_approx``
    gives while it is exact, below its accuracy in values; this is exact at any size)."""
    return np.maximum(np.ceil(p * np.asarray(n, np.float64)), 1).astype(np.int64)


def _ints(t: pa.Table, name: str) -> np.ndarray:
    """Column ``name`` as int64 (times: µs; null: the smallest value, so nulls group and sort together)."""
    c = pc.cast(t.column(name), pa.int64())
    return c.fill_null(np.iinfo(np.int64).min).to_numpy(zero_copy_only=False)


def bucket_lags(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Seed 002: one task's sample lags (:func:`sample_lag` rows with ``bucket_start``; every sample of
    a bucket in this task) -> one :data:`CACHE_LAG_COLUMNS` row per broker and bucket: the sample count,
    the last sample's offsets and registration, the p50 / p99 (:func:`percentile_rank`) and max of both
    lags, any stall, the largest image divergence. Whole columns: a sort by (bucket, time) for the
    last sample, one by (bucket, value) per lag."""
    got = list(batches)
    if not got:
        return
    t = pa.Table.from_batches(got).combine_chunks()
    cluster = codes(t.column("cluster_id"))[0]
    broker, bucket, observed = (_ints(t, c) for c in ("broker_id", "bucket_start", "observed_at"))
    order = np.lexsort((observed, bucket, broker, cluster))
    new = np.zeros(len(order), bool)
    new[:1] = True
    for k in (cluster, broker, bucket):
        k = k[order]
        new[1:] |= k[1:] != k[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:], len(order)] - 1
    n = last - first + 1
    group = np.cumsum(new) - 1
    at_last = pa.array(order[last])
    out = {c: t.column(c).take(at_last) for c in ("cluster_id", "broker_id", "bucket_start", "applied_offset",
                                                   "log_end_offset", "registered", "fenced")}
    out["samples"] = pa.array(n.astype(np.int64))
    for lag in ("offset_lag", "time_lag_ms"):
        v = _ints(t, lag)[order]
        v = v[np.lexsort((v, group))]  # each bucket's values in order, the buckets where they were
        out[f"{lag}_p50"] = pa.array(v[first + percentile_rank(n, 0.5) - 1])
        out[f"{lag}_p99"] = pa.array(v[first + percentile_rank(n, 0.99) - 1])
        out[f"{lag}_max"] = pa.array(v[last])
    out["stalled"] = pa.array(np.maximum.reduceat(_ints(t, "stalled")[order], first).astype(bool))
    out["image_divergence"] = pa.array(np.maximum.reduceat(_ints(t, "image_divergence")[order], first))
    yield from pa.table([out[f.name].cast(f.type) for f in CACHE_LAG_SCHEMA], schema=CACHE_LAG_SCHEMA).to_batches(1 << 16)


def cache_lag(samples: DataFrame, bucket_s: float = 1.0, rows: int | None = None, by_broker: bool = False) -> DataFrame:
    """Seed 002: the per-sample lags (:func:`sample_lag`) per broker and time bucket of ``bucket_s``
    seconds (:func:`bucket_lags`, on Arrow batches: one shuffle by broker and bucket). ``rows``: how
    many samples, when known (it sizes the tasks, :data:`TASK_ROWS` samples each; else counted).
    ``by_broker``: every sample of a broker is in one task already — :func:`sample_lag`'s frame itself,
    not a checkpoint of it (its shuffle is by broker, and nothing after it moves a row) —: the buckets
    are aggregated in those tasks, with no shuffle (``rows`` is not needed)."""
    us = int(bucket_s * 1_000_000)
    b = F.timestamp_micros((F.floor(_us(F.col("observed_at")) / us) * us).cast("long")).alias("bucket_start")
    s = samples.select(*_KEY, b, "observed_at", "applied_offset", "log_end_offset", "offset_lag", "time_lag_ms",
                       "registered", "fenced", "stalled", "image_divergence")
    if not by_broker:
        n = samples.count() if rows is None else rows
        s = s.repartition(tasks_holding(samples.sparkSession, n, TASK_ROWS), *BY_BROKER, "bucket_start")
    return s.mapInArrow(bucket_lags, from_arrow_schema(CACHE_LAG_SCHEMA))


CACHE_LAG = "cache_lag"


def write_cache_lag(lake, clusters: list[str], say=lambda s: None, bucket_s: float = 1.0) -> int:  # noqa: ANN001
    """Compute ``cache_lag`` for ``clusters`` from the lake's ``broker_progress`` and silver tables and
    replace those clusters' rows in one published run. Returns the rows written (0, and nothing
    written, when the lake has no ``broker_progress``, or no sample of these clusters while
    ``cache_lag`` has no row of them either: the run would replace nothing with nothing — what
    every stream micro-batch of a cluster without metrics would otherwise pay for)."""
    import uuid

    from kraft_replay.replay.run import cluster_where

    needed = ("broker_progress", "log_batches", "brokers", "partitions")
    if not all(lake.exists(t) for t in needed):
        return 0
    where = cluster_where(clusters)
    progress, batches, brokers, partitions = (lake.read(t, where=where) for t in needed)
    samples = progress.count()
    if lake.exists(CACHE_LAG) and not samples and lake.read(CACHE_LAG, where=where).isEmpty():
        say(f"  {CACHE_LAG}: no metric samples of {', '.join(clusters)}: nothing to write")
        return 0
    status = lake.read("quorum_status", where=where) if lake.exists("quorum_status") else None
    steps = read_batch_steps(lake, clusters)
    batch_rows = sum(len(s.end_time) for s in steps.values())
    with sized_by(progress.sparkSession, (samples, batch_rows)):  # a few thousand samples: no generated code
        lags = sample_lag(progress, batches, brokers, partitions, status=status, rows=samples, steps=steps)
        out = cache_lag(lags, bucket_s, by_broker=True)  # computed by the write itself, read once
    r = lake.replace_published(CACHE_LAG, out, where, "cache-lag-" + uuid.uuid4().hex[:12], partition_by=["cluster_id"])
    say(f"  {CACHE_LAG}: {r.rows} rows (v{r.version}; {bucket_s:g} s buckets)")
    return r.rows
