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
How it runs: one shuffle of the samples (by broker), then one hand-off to Python: each task takes
its samples at once (:func:`lag_kernel`) — their order by broker and time, ``applied_since``, the
lookups on numpy (:func:`sample_lookups`) in what was collected once on the driver (the cluster's
batches by append time and by last offset, ``outcomes.steps.log_steps``: 16 bytes per batch in the
usual log; its captures; its leader changes, 76k at 10M records; its brokers' registrations) — and
aggregates the buckets (:func:`bucket_table`: one sort per lag, where Spark's ``percentile_approx``
kept a quantile sketch per bucket — 7M buckets of one sample at 10M records): :func:`lag_tasks`. The
live stream keeps
the same rules in :mod:`kraft_replay.outcomes.live_lag`; tests hold the two equal.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from kraft_replay.outcomes.lookups import arrow_longs, changes_by_cluster, changes_in, collect_changes
from kraft_replay.outcomes.steps import NULL, ClusterSteps, arrow_micros, cluster_log_steps, log_steps
from kraft_replay.replay.broker_applied import BY_BROKER, previous, sample_order
from kraft_replay.replay.schemas import TIMESTAMP
from kraft_replay.spark import sized_by, tasks_holding
from kraft_replay.spark.arrow import codes, per_task

__all__ = ["sample_lag", "lag_tasks", "broker_cache_lag", "batch_steps", "read_batch_steps", "cache_lag", "bucket_table", "with_bucket",
           "percentile_rank", "write_cache_lag", "committed_end", "sample_captures", "sample_lookups", "lag_kernel",
           "broker_registrations", "registration_at", "CACHE_LAG", "leader_changes", "CACHE_LAG_COLUMNS",
           "CACHE_LAG_SCHEMA", "SAMPLE_SCHEMA", "TASK_ROWS", "STALL_AFTER_S"]

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
#: :func:`sample_lag`'s rows: one per sample (a broker's samples at one time count once)
SAMPLE_SCHEMA = pa.schema([
    ("cluster_id", pa.string()), ("broker_id", pa.int32()), ("observed_at", TIMESTAMP), ("applied_offset", pa.int64()),
    ("applied_since", TIMESTAMP), ("log_end_offset", pa.int64()), ("offset_lag", pa.int64()), ("time_lag_ms", pa.int64()),
    ("stalled", pa.bool_()), ("registered", pa.bool_()), ("fenced", pa.bool_()), ("image_divergence", pa.int64()),
])
#: about this many samples per task of :func:`cache_lag` (a task's samples are in Python memory at once)
TASK_ROWS = 250_000


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


def broker_registrations(brokers: DataFrame) -> dict[tuple[str, int], tuple[np.ndarray, ...]]:
    """Per (cluster, broker), its visible ``brokers`` versions (few), collected: ``valid_from_offset``
    (ascending), ``valid_to_offset`` (open: the largest long), ``deleted``, ``fenced`` and whether
    ``fenced`` is known — what :func:`registration_at` looks up."""
    vis = F.col("valid_to_offset").isNull() | (F.col("valid_to_offset") > F.col("valid_from_offset"))
    t = brokers.where(vis).select("cluster_id", "broker_id", "valid_from_offset", "valid_to_offset", "deleted",
                                  "fenced").toArrow()
    code, names = codes(t.column("cluster_id"))
    broker = arrow_longs(t.column("broker_id"))[0]
    start = arrow_longs(t.column("valid_from_offset"))[0]
    end = t.column("valid_to_offset").fill_null(np.iinfo(np.int64).max).to_numpy().astype(np.int64)
    deleted = t.column("deleted").fill_null(True).to_numpy(zero_copy_only=False).astype(bool)
    fenced, known = arrow_longs(t.column("fenced"))
    o = np.lexsort((start, broker, code))
    cut = np.flatnonzero((np.diff(code[o]) != 0) | (np.diff(broker[o]) != 0)) + 1
    return {(names[code[k[0]]], int(broker[k[0]])): (start[k], end[k], deleted[k], fenced[k].astype(bool), known[k])
            for k in np.split(o, cut) if len(k) and code[k[0]] >= 0}


def registration_at(versions: tuple[np.ndarray, ...] | None, end: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Facts §9.1: a broker's ``registered``, ``fenced`` and whether ``fenced`` is known in the image
    at each offset of ``end``: its visible version with ``valid_from_offset <= end <
    valid_to_offset`` (one at most), registered unless deleted (nothing known where there is none)."""
    if versions is None:
        none = np.zeros(len(end), bool)
        return none, none, none
    start, stop, deleted, fenced, known = versions
    i = np.searchsorted(start, end, "right") - 1
    j = np.maximum(i, 0)
    alive = (i >= 0) & (end < stop[j]) & ~deleted[j]
    return alive, alive & fenced[j], alive & known[j]


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
                   changes: dict[str, tuple[np.ndarray, np.ndarray]], cluster: np.ndarray, names: list,
                   t: np.ndarray, applied: np.ndarray, has_applied: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seed 002 / facts §5.1, §9.1: what samples (cluster codes ``cluster`` of ``names``, times ``t``
    in µs, ``applied`` offsets) look up in their cluster's log (its batches as
    :class:`~kraft_replay.outcomes.steps.ClusterSteps`, its captures and leader changes, collected
    once and shipped to the tasks):

    * ``log_end_offset``: the log's end at ``observed_at`` (:meth:`ClusterSteps.log_end_at`; -1 before
      any batch), made the committed end by the captures (:func:`committed_end`);
    * ``_next_us``: the append time of the batch holding ``applied_offset + 1`` — the first batch whose
      last offset is at or above it (:meth:`ClusterSteps.next_batch_time`; :data:`NULL` past the last
      batch or without an applied offset);
    * ``image_divergence``: the partitions whose leader-affecting change in ``(applied_offset,
      log_end_offset]`` is the first after ``applied_offset`` (``changes``: :func:`leader_changes`,
      :func:`~kraft_replay.outcomes.lookups.collect_changes`), counted by
      :func:`~kraft_replay.outcomes.lookups.changes_in`; 0 without a range."""
    n = len(t)
    end = np.full(n, -1, np.int64)
    nxt = np.full(n, NULL, np.int64)
    div = np.zeros(n, np.int64)
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
    return end, nxt, div


def lag_kernel(steps: dict[str, ClusterSteps], captures: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
               changes: dict[str, tuple[np.ndarray, np.ndarray]], registrations: dict[tuple[str, int], tuple],
               stall_after_s: float = STALL_AFTER_S) -> Callable[[pa.Table], pa.Table]:
    """Seed 002 / facts §9.1, the module docstring's rules: a function of one task's
    ``broker_progress`` samples (every sample of each of its brokers) to their :data:`SAMPLE_SCHEMA`
    rows, on whole columns: the samples in order of broker and time, one per time
    (:func:`~kraft_replay.replay.broker_applied.sample_order`); ``applied_since``, the time of the
    latest sample whose applied offset differs from the one before it (or is the broker's first);
    :func:`sample_lookups`; the lags; ``stalled``; :func:`registration_at` at the log's end."""
    stall_us = int(stall_after_s * 1_000_000)

    def rows(t: pa.Table) -> pa.Table:
        keep, first = sample_order(t)
        t = t.take(pa.array(keep))
        cluster, names = codes(t.column("cluster_id"))
        broker = arrow_longs(t.column("broker_id"))[0]
        us, has_us = arrow_longs(t.column("observed_at"))
        applied, has_applied = arrow_longs(t.column("applied_offset"))
        n = t.num_rows
        starts = np.flatnonzero(first)
        prev, has_prev = previous(applied, has_applied, first)
        moved = (~has_prev | (has_applied & (applied != prev))) & has_us
        last_moved = np.maximum.accumulate(np.where(moved, np.arange(n), -1))
        has_since = last_moved >= starts[np.cumsum(first) - 1]
        since = us[np.maximum(last_moved, 0)]
        end, nxt, div = sample_lookups(steps, captures, changes, cluster, names, np.where(has_us, us, NULL),
                                       applied, has_applied)
        offset_lag = np.where(has_applied, np.maximum(end - applied, 0), 0)
        lagging = offset_lag > 0
        timed = lagging & has_us & (nxt != NULL) & (nxt <= us)
        time_lag = np.where(timed, np.floor((us - np.where(timed, nxt, 0)) / 1000), 0).astype(np.int64)
        stalled = lagging & has_us & has_since & (us - since >= stall_us)
        registered = np.zeros(n, bool)
        fenced = np.zeros(n, bool)
        known = np.zeros(n, bool)
        for lo, hi in zip(starts, np.r_[starts[1:], n]):
            v = registrations.get((names[cluster[lo]], int(broker[lo])))
            registered[lo:hi], fenced[lo:hi], known[lo:hi] = registration_at(v, end[lo:hi])
        cols = {"cluster_id": t.column("cluster_id"), "broker_id": t.column("broker_id"),
                "observed_at": t.column("observed_at"), "applied_offset": t.column("applied_offset"),
                "applied_since": pa.array(since, pa.int64(), mask=~has_since), "log_end_offset": pa.array(end),
                "offset_lag": pa.array(offset_lag), "time_lag_ms": pa.array(time_lag), "stalled": pa.array(stalled),
                "registered": pa.array(registered), "fenced": pa.array(fenced, mask=~known),
                "image_divergence": pa.array(div)}
        return pa.table([cols[f.name].cast(f.type) for f in SAMPLE_SCHEMA], schema=SAMPLE_SCHEMA)
    return rows


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


def _by_broker(progress: DataFrame, rows: int | None) -> DataFrame:
    """The samples shuffled by broker: every sample of a broker in one task (``rows``: the samples,
    when known: tasks of about :data:`TASK_ROWS` samples; else Spark's adaptive partitions)."""
    s = progress.select(*_KEY, "observed_at", "applied_offset")
    return (s.repartition(*BY_BROKER) if rows is None else
            s.repartition(tasks_holding(progress.sparkSession, rows, TASK_ROWS), *BY_BROKER))


def _kernel(batches: DataFrame | None, brokers: DataFrame, partitions: DataFrame, status: DataFrame | None,
            steps: dict[str, ClusterSteps] | None, stall_after_s: float, changes: pa.Table | None = None
            ) -> Callable[[pa.Table], pa.Table]:
    """:func:`lag_kernel` with what it looks up collected (``steps``: read already, or None: from
    ``batches``; ``changes``: the clusters' leader changes found already, or None: from ``partitions``)."""
    steps = batch_steps(batches) if steps is None else steps
    found = collect_changes(leader_changes(partitions)) if changes is None else changes_by_cluster(changes)
    return lag_kernel(steps, sample_captures(status, steps) if status is not None else {}, found,
                      broker_registrations(brokers), stall_after_s)


def sample_lag(progress: DataFrame, batches: DataFrame | None, brokers: DataFrame, partitions: DataFrame,
               stall_after_s: float = STALL_AFTER_S,
               status: DataFrame | None = None, rows: int | None = None,
               steps: dict[str, ClusterSteps] | None = None) -> DataFrame:
    """Seed 002 / facts §9.1: per ``broker_progress`` sample, its lag behind the replayed log
    (:data:`SAMPLE_SCHEMA`; the module docstring's rules, :func:`lag_kernel`). ``batches``:
    ``log_batches``; ``brokers`` / ``partitions``: the versions; ``status``: bronze ``quorum_status``
    (its high watermarks make the end the committed end: :func:`committed_end`). Collects what the
    samples look up when called (the batches' steps, the captures, the leader changes of
    ``partitions``, the brokers' registrations). ``rows``: the samples, when known (it sizes the
    tasks). ``steps``: the batches' steps, read already (:func:`read_batch_steps`); None: collected from
    ``batches`` (:func:`batch_steps`). One shuffle (by broker), one hand-off to Python."""
    kernel = _kernel(batches, brokers, partitions, status, steps, stall_after_s)
    return _by_broker(progress, rows).mapInArrow(per_task(kernel), from_arrow_schema(SAMPLE_SCHEMA))


def lag_tasks(progress: DataFrame, batches: DataFrame | None, brokers: DataFrame, partitions: DataFrame,
              bucket_s: float = 1.0, stall_after_s: float = STALL_AFTER_S, status: DataFrame | None = None,
              rows: int | None = None, steps: dict[str, ClusterSteps] | None = None, changes: pa.Table | None = None
              ) -> tuple[DataFrame, Callable[[pa.Table], pa.Table]]:
    """Seed 002: ``cache_lag(sample_lag(...), bucket_s)`` as the samples shuffled by broker and the
    function of a task's samples to its ``cache_lag`` rows — every sample of a broker is in one task,
    so are its buckets —: one shuffle and one hand-off to Python in all, the per-sample rows never
    leave the task (:func:`sample_lag`'s arguments; ``changes``: the clusters' :func:`leader_changes`,
    found already — by the replay's tasks, ``ReplaySummary.leader_changes`` —, or None)."""
    kernel = _kernel(batches, brokers, partitions, status, steps, stall_after_s, changes)
    bucket_us = _bucket_us(bucket_s)
    return _by_broker(progress, rows), lambda t: bucket_table(with_bucket(kernel(t), bucket_us))


def broker_cache_lag(*args, **kwargs) -> DataFrame:  # noqa: ANN002, ANN003 - lag_tasks' arguments
    """:func:`lag_tasks` as one frame of ``cache_lag`` rows."""
    frame, rows_of = lag_tasks(*args, **kwargs)
    return frame.mapInArrow(per_task(rows_of), from_arrow_schema(CACHE_LAG_SCHEMA))


def percentile_rank(n, p: float):  # noqa: ANN001, ANN201 - an int or a numpy array of them
    """The 1-based rank of the lower ``p`` percentile among ``n`` sorted values, ``ceil(p·n)`` (at least
    1): the smallest value with at least ``p`` of the values at or below it (what ``percentile_approx``
    gives while it is exact, below its accuracy in values; this is exact at any size)."""
    return np.maximum(np.ceil(p * np.asarray(n, np.float64)), 1).astype(np.int64)


def _ints(t: pa.Table, name: str) -> np.ndarray:
    """Column ``name`` as int64 (times: µs; null: the smallest value, so nulls group and sort together)."""
    c = pc.cast(t.column(name), pa.int64())
    return c.fill_null(np.iinfo(np.int64).min).to_numpy(zero_copy_only=False)


def bucket_table(t: pa.Table) -> pa.Table:
    """Seed 002: one task's sample lags (:func:`sample_lag` rows with ``bucket_start``; every sample of
    a bucket in this task) -> one :data:`CACHE_LAG_COLUMNS` row per broker and bucket: the sample count,
    the last sample's offsets and registration, the p50 / p99 (:func:`percentile_rank`) and max of both
    lags, any stall, the largest image divergence. Whole columns: a sort by (bucket, time) for the
    last sample, one by (bucket, value) per lag."""
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
    return pa.table([out[f.name].cast(f.type) for f in CACHE_LAG_SCHEMA], schema=CACHE_LAG_SCHEMA)


def _bucket_us(bucket_s: float) -> int:
    return int(bucket_s * 1_000_000)


def with_bucket(t: pa.Table, bucket_us: int) -> pa.Table:
    """``t`` with ``bucket_start``: ``observed_at`` floored to a multiple of ``bucket_us`` µs (the
    division in floating point, as Spark's ``floor`` of a long over an int computes it)."""
    us, ok = arrow_longs(t.column("observed_at"))
    b = (np.floor(us / bucket_us) * bucket_us).astype(np.int64)
    return t.append_column("bucket_start", pa.array(b, pa.int64(), mask=~ok).cast(TIMESTAMP))


def cache_lag(samples: DataFrame, bucket_s: float = 1.0, rows: int | None = None) -> DataFrame:
    """Seed 002: the per-sample lags (:func:`sample_lag`) per broker and time bucket of ``bucket_s``
    seconds (:func:`bucket_table`, on Arrow batches: one shuffle by broker and bucket). ``rows``: how
    many samples, when known (it sizes the tasks, :data:`TASK_ROWS` samples each; else counted).
    :func:`broker_cache_lag` computes the same from the samples, in their own tasks."""
    us = _bucket_us(bucket_s)
    b = F.timestamp_micros((F.floor(_us(F.col("observed_at")) / us) * us).cast("long")).alias("bucket_start")
    s = samples.select(*_KEY, b, "observed_at", "applied_offset", "log_end_offset", "offset_lag", "time_lag_ms",
                       "registered", "fenced", "stalled", "image_divergence")
    n = samples.count() if rows is None else rows
    s = s.repartition(tasks_holding(samples.sparkSession, n, TASK_ROWS), *BY_BROKER, "bucket_start")
    return s.mapInArrow(per_task(bucket_table), from_arrow_schema(CACHE_LAG_SCHEMA))


CACHE_LAG = "cache_lag"


def write_cache_lag(lake, clusters: list[str], say=lambda s: None, bucket_s: float = 1.0,  # noqa: ANN001
                    changes: pa.Table | None = None) -> int:
    """Compute ``cache_lag`` for ``clusters`` from the lake's ``broker_progress`` and silver tables and
    replace those clusters' rows in one published run. Returns the rows written (0, and nothing
    written, when the lake has no ``broker_progress``, or no sample of these clusters while
    ``cache_lag`` has no row of them either: the run would replace nothing with nothing — what
    every stream micro-batch of a cluster without metrics would otherwise pay for). ``changes``: the
    leader changes of every one of ``clusters``, found by the replay that wrote their partitions
    (``ReplaySummary.leader_changes``); None: found in the ``partitions`` table."""
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
        frame, rows_of = lag_tasks(progress, batches, brokers, partitions, bucket_s, status=status, rows=samples, steps=steps,
                                   changes=changes)
        r = lake.replace_published(CACHE_LAG, frame, where, "cache-lag-" + uuid.uuid4().hex[:12],
                                   schema=from_arrow_schema(CACHE_LAG_SCHEMA), partition_by=["cluster_id"], rows_of=rows_of)
    say(f"  {CACHE_LAG}: {r.rows} rows (v{r.version}; {bucket_s:g} s buckets)")
    return r.rows
