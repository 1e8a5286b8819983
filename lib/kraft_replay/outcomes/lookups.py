"""As-of lookups the outcome tables share (docs/design.md, "Shared lookups of the outcome tables").

Each lookup adds columns to a frame of request rows by a window over the union of the request rows
and the looked-up rows, ordered per key (by time or by offset): a sort per key, never a cross join and
no fan-out. Looked-up rows sort before request rows at the same position, so a version starting at an
offset (or an interval starting at a time) counts for a request at exactly that offset (time).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kraft_replay.outcomes.steps import _groups
from kraft_replay.spark.arrow import codes
from kraft_replay.spark.arrow import longs as arrow_longs

__all__ = ["applied_at", "log_end_at", "known_brokers", "log_span", "with_known_and_span", "outside_log",
           "batch_time_at", "entity_changes", "count_changes", "collect_changes", "changes_by_cluster", "changes_in", "arrow_longs", "PAIRS"]

_K = "_lk_kind"  # 0: looked-up row, 1: request row
_POS = "_lk_pos"
_VAL = "_lk_val"
_B = "_lk_bucket"
#: position buckets of the cluster-wide lookups: an hour of append time (µs), 2^16 offsets
HOUR_US = 3_600_000_000
OFFSETS = 1 << 16


def _as_of(rows: DataFrame, found: DataFrame, keys: list[str], pos: Column, found_pos: str,
           tie: list[str] | None = None, bucket: int | None = None) -> DataFrame:
    """``rows`` with ``_lk_val``: the ``_lk_val`` struct of the last ``found`` row at or before each
    row's position ``pos`` in ``keys`` (``found`` has ``keys``, ``found_pos`` and ``_lk_val``;
    ``tie`` orders found rows at one position).

    ``bucket`` (a width in position units), for keys too coarse for a window (one cluster is one
    window partition: one task sorts every row): the window runs per key and bucket of positions
    instead, and each bucket starts from the last found row of the buckets before it — found per
    bucket by an aggregate and carried over a window of one row per key and bucket of the found rows'
    range (small, broadcast). Same answer."""
    r = rows.select("*", pos.alias(_POS), F.lit(1).alias(_K))
    f = found.select(*keys, F.col(found_pos).alias(_POS), F.lit(0).alias(_K), _VAL, *(tie or []))
    order = [_POS, _K, *(tie or [])]
    part = list(keys)
    if bucket is not None:
        r = r.select("*", F.floor(F.col(_POS) / bucket).alias(_B))
        f = f.select("*", F.floor(F.col(_POS) / bucket).alias(_B))
        part.insert(0, _B)  # first: the sort's prefix tells rows apart by it (not by the cluster id)
    w = Window.partitionBy(*part).orderBy(*order).rowsBetween(Window.unboundedPreceding, 0)
    u = r.unionByName(f.withColumnRenamed(_VAL, "_lk_found"), allowMissingColumns=True) \
        .select("*", F.last("_lk_found", ignorenulls=True).over(w).alias(_VAL))
    drop = [c for c in ("_lk_found", *(tie or [])) if c not in rows.columns]
    out = u.where(F.col(_K) == 1).drop(_K, *drop)
    if bucket is None:
        return out
    # each found bucket's last row (by position, then tie); seed(b), for every bucket b from the first
    # found one up to one past the last, is the last row of the buckets before b (a window over one row
    # per bucket: grid rows sort before found rows at one bucket, found rows at a null position before
    # all); a row's bucket outside that range takes the seed at its nearer end
    last = f.groupBy(*keys, _B).agg(F.max_by(_VAL, F.struct(_POS, *(tie or []))).alias("_lk_found"))
    span = last.groupBy(*keys).agg(F.min(_B).alias("_lk_lo"), (F.max(_B) + 1).alias("_lk_hi"))
    grid = span.select(*keys, F.explode(F.sequence("_lk_lo", "_lk_hi")).alias(_B), F.lit(0).alias(_K))
    wb = Window.partitionBy(*keys).orderBy(_B, _K).rowsBetween(Window.unboundedPreceding, 0)
    seeds = grid.unionByName(last.select("*", F.lit(1).alias(_K)), allowMissingColumns=True) \
        .select(*keys, F.col(_B).alias("_lk_sb"), _K, F.last("_lk_found", ignorenulls=True).over(wb).alias("_lk_seed")) \
        .where(F.col(_K) == 0).drop(_K)
    sb = F.greatest(F.least(F.col(_B), F.col("_lk_hi")), F.col("_lk_lo"))
    return out.join(F.broadcast(span), keys, "left") \
        .withColumn("_lk_sb", F.when(F.col(_B).isNotNull(), sb)) \
        .join(F.broadcast(seeds), [*keys, "_lk_sb"], "left") \
        .withColumn(_VAL, F.coalesce(F.col(_VAL), F.col("_lk_seed"))).drop(_B, "_lk_lo", "_lk_hi", "_lk_sb", "_lk_seed")


def applied_at(rows: DataFrame, broker_applied: DataFrame, time: str, broker: str, out: str = "applied_offset") -> DataFrame:
    """Facts §9.1: column ``out`` = the applied offset of broker ``rows[broker]`` at ``rows[time]``: the
    ``broker_applied`` interval with ``from_time <= t < to_time`` (open when ``to_time`` is null);
    null in a ``NO_SAMPLES`` interval or before the broker's first sample."""
    f = broker_applied.select(
        "cluster_id", F.col("broker_id").alias(broker), F.unix_micros("from_time").alias("_from"),
        F.struct(F.when(F.col("state") == "APPLIED", F.col("applied_offset")).alias("o"),
                 F.unix_micros("to_time").alias("to")).alias(_VAL))
    j = _as_of(rows, f, ["cluster_id", broker], F.unix_micros(F.col(time)), "_from")
    v = F.col(_VAL)
    ok = v.isNotNull() & (v.to.isNull() | (F.col(_POS) < v.to))
    return j.select(*rows.columns, F.when(ok, v.o).cast("long").alias(out))


def log_end_at(rows: DataFrame, log_batches: DataFrame, time: str, out: str = "log_end_offset") -> DataFrame:
    """Column ``out``: the end of the replayed log at ``rows[time]`` — the largest ``batch_last_offset``
    of the batches appended at or before it (-1 before any; append times need not grow with offsets)."""
    wb = Window.partitionBy("cluster_id").orderBy("_t", "batch_last_offset").rowsBetween(Window.unboundedPreceding, 0)
    ends = log_batches.select("cluster_id", F.unix_micros("append_time").alias("_t"), "batch_last_offset") \
        .select("cluster_id", "_t", "batch_last_offset", F.max("batch_last_offset").over(wb).alias("_end"))
    f = ends.select("cluster_id", "_t", "batch_last_offset", F.struct(F.col("_end").alias("e")).alias(_VAL))
    j = _as_of(rows, f, ["cluster_id"], F.unix_micros(F.col(time)), "_t", tie=["batch_last_offset"], bucket=HOUR_US)
    return j.select(*rows.columns, F.coalesce(F.col(_VAL).e, F.lit(-1)).cast("long").alias(out))


def known_brokers(brokers: DataFrame) -> DataFrame:
    """The cluster's known brokers: ``cluster_id``, ``broker_id`` of every broker with a version."""
    return brokers.select("cluster_id", "broker_id").distinct()


def log_span(log_batches: DataFrame, broker_applied: DataFrame) -> DataFrame:
    """Per cluster, ``span_start`` (first batch append time) and ``span_end`` (the later of the last
    batch append time and the last ``broker_applied.from_time``)."""
    b = log_batches.groupBy("cluster_id").agg(F.min("append_time").alias("span_start"), F.max("append_time").alias("_lb"))
    a = broker_applied.groupBy("cluster_id").agg(F.max("from_time").alias("_la"))
    return b.join(a, "cluster_id", "left").select(
        "cluster_id", "span_start", F.greatest("_lb", F.coalesce("_la", "_lb")).alias("span_end"))


def with_known_and_span(rows: DataFrame, known: DataFrame, span: DataFrame, broker: str = "target_broker") -> DataFrame:
    """``rows`` with ``_known`` (true when ``rows[broker]`` is one of ``known`` — :func:`known_brokers` —,
    null otherwise) and their cluster's ``span_start`` / ``span_end`` (:func:`log_span`); both small,
    broadcast."""
    k = known.select("cluster_id", F.col("broker_id").alias(broker), F.lit(True).alias("_known"))
    return rows.join(F.broadcast(k), ["cluster_id", broker], "left").join(F.broadcast(span), ["cluster_id"], "left")


def outside_log(t: Column) -> Column:
    """Time ``t`` is outside the log span joined by :func:`with_known_and_span` (no span: outside)."""
    return F.col("span_start").isNull() | (t < F.col("span_start")) | (t > F.col("span_end"))


def batch_time_at(rows: DataFrame, log_batches: DataFrame, offset: str, out: str) -> DataFrame:
    """Column ``out``: the append time of the batch holding ``rows[offset]`` (the batch with the largest
    ``batch_base_offset <= offset``); null for a negative or null offset."""
    f = log_batches.select("cluster_id", "batch_base_offset", F.struct(F.col("append_time").alias("t")).alias(_VAL))
    j = _as_of(rows, f, ["cluster_id"], F.col(offset), "batch_base_offset", bucket=OFFSETS)
    return j.select(*rows.columns, F.when(F.col(offset) >= 0, F.col(_VAL).t).alias(out))


def entity_changes(versions: DataFrame, keys: list[str]) -> DataFrame:
    """The visible versions of a versioned table as changes: ``cluster_id``, ``_v`` (the version's
    offset) and ``_p`` (the entity's previous visible version's offset; -2 for its first), for
    :func:`count_changes`."""
    vis = versions.where(F.col("valid_to_offset").isNull() | (F.col("valid_to_offset") > F.col("valid_from_offset")))
    w = Window.partitionBy(*keys, "cluster_id").orderBy("valid_from_offset", "record_offset")
    return vis.select("cluster_id", F.col("valid_from_offset").alias("_v"),
                      F.coalesce(F.lag("valid_from_offset").over(w), F.lit(-2)).alias("_p"))


def count_changes(rows: DataFrame, changes: DataFrame, lo: str, hi: str, row_id: str, out: str,
                  on: list[str] | None = None, bucket: int = 4096) -> DataFrame:
    """Per row with ``lo < hi``: column ``out`` = how many entities changed in (``lo``, ``hi``] — the
    changes (:func:`entity_changes`, ``cluster_id``, ``_v``, ``_p`` and the ``on`` columns) with
    ``lo < _v <= hi`` and ``_p <= lo``: the first change of each entity after ``lo``, so each entity
    once. An equi-join on offset buckets of ``bucket`` offsets (each row exploded over the buckets
    its range covers), never a cross join. Returns ``cluster_id``, ``row_id``, ``out`` for the rows
    with at least one change."""
    keys = ["cluster_id", *(on or [])]
    r = rows.where(F.col(hi) > F.col(lo)).select(
        *keys, row_id, lo, hi,
        F.explode(F.sequence(F.floor((F.col(lo) + 1) / bucket).cast("long"), F.floor(F.col(hi) / bucket).cast("long"))).alias("_b"))
    ch = changes.select(*keys, "_v", "_p", F.floor(F.col("_v") / bucket).cast("long").alias("_b"))
    j = r.join(ch, [*keys, "_b"]).where((F.col("_v") > F.col(lo)) & (F.col("_v") <= F.col(hi)) & (F.col("_p") <= F.col(lo)))
    return j.groupBy("cluster_id", row_id).agg(F.count(F.lit(1)).alias(out))


#: at most about this many (row, change) pairs held at once by :func:`changes_in`
PAIRS = 1 << 22


def collect_changes(changes: DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``changes`` (``cluster_id``, ``_v``, ``_p``: :func:`entity_changes` or the like, few next to the
    rows counting them) on the driver, per cluster: ``_v`` sorted and ``_p`` in the same order, what
    :func:`changes_in` counts in."""
    return changes_by_cluster(changes.select("cluster_id", "_v", "_p").toArrow())


def changes_by_cluster(t: pa.Table) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """:func:`collect_changes` of changes on the driver already (an Arrow table with ``cluster_id``,
    ``_v``, ``_p``)."""
    code, names = codes(t.column("cluster_id"))
    v = t.column("_v").to_numpy().astype(np.int64)
    p = t.column("_p").to_numpy().astype(np.int64)
    return {names[code[k[0]]]: (v[k], p[k]) for k in _groups(code, v, p)}


def changes_in(v: np.ndarray, p: np.ndarray, lo: np.ndarray, hi: np.ndarray, pairs: int = PAIRS) -> np.ndarray:
    """:func:`count_changes`' rule on numpy arrays: per row ``i``, how many changes ``j`` have
    ``lo[i] < v[j] <= hi[i]`` and ``p[j] <= lo[i]`` (``v`` sorted; 0 when ``hi[i] <= lo[i]``). Each
    row's changes in range are a slice of ``v`` (two binary searches); their ``p`` are compared in
    runs of rows holding at most ``pairs`` (row, change) pairs together — as many pairs as the
    bucketed join of :func:`count_changes` keeps after its range filter."""
    lo = np.asarray(lo, np.int64)
    hi = np.asarray(hi, np.int64)
    first = np.searchsorted(v, lo, "right")
    n = np.maximum(np.searchsorted(v, hi, "right") - first, 0)
    out = np.zeros(len(lo), np.int64)
    rows = np.flatnonzero(n)
    ends = np.cumsum(n[rows])
    done = 0
    while done < len(rows):
        base = ends[done - 1] if done else 0
        stop = max(int(np.searchsorted(ends, base + pairs, "right")), done + 1)
        r, k = rows[done:stop], n[rows[done:stop]]
        starts = np.cumsum(k) - k
        at = np.repeat(first[r] - starts, k) + np.arange(int(k.sum()))
        ok = p[at] <= np.repeat(lo[r], k)
        out[r] = np.add.reduceat(ok.astype(np.int64), starts)
        done = stop
    return out
