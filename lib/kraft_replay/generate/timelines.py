"""Bronze ``broker_progress``: per-broker samples of the ``last-applied-record-offset`` /
``last-applied-record-timestamp`` metrics (facts §9.1).

Rules: each broker is sampled every ``sample_interval_ms`` (with a per-broker phase). Its cache
trails the log by a fetch lag drawn from a Pareto distribution (median and tail index from the
scenario: a heavy tail); a sample starts a stall with ``stall_probability``, and for ``stall_ms`` from
there the broker applies nothing (its target stays at the stall start's), so the lag grows to
``stall_ms``; what it has applied never moves backwards within one process life. While network-partitioned from the controller its cache is frozen (constant offset) until the
partition heals; while restarting there are no samples; after a restart it first loads the latest
snapshot (offset = snapshot end offset - 1) and then catches up. Randomness is a hash of
(seed, broker, sample), so the table is the same for a seed whatever the partitioning.

Columns: ``cluster_id`` string, ``broker_id`` int, ``observed_at`` timestamp, ``applied_offset``
long (-1 before anything is applied), ``applied_record_time`` timestamp (append time of the batch
holding ``applied_offset``; null when -1).
"""

from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from kraft_replay.ingest.schemas import BROKER_PROGRESS_SCHEMA as _BROKER_PROGRESS_ARROW
from kraft_replay.ingest.tables import spark_schema

from kraft_replay.generate.locate import locate
from kraft_replay.generate.plan import Plan

#: The bronze contract (owned by ingest, which also fills the table from real metrics).
BROKER_PROGRESS_SCHEMA = spark_schema(_BROKER_PROGRESS_ARROW)


def unit_hash(seed: int, *cols: Column | str) -> Column:
    """A deterministic uniform number in (0, 1] from the seed and some columns."""
    h = F.xxhash64(F.lit(seed), *[F.lit(c) if isinstance(c, str) else c for c in cols])
    return (h.bitwiseAND(F.lit(0xFFFFFFFFFFFF)) + 1).cast("double") / F.lit(float(1 << 48))


def broker_progress(spark: SparkSession, plan: Plan) -> DataFrame:
    """The apply timeline of every broker (schema :data:`BROKER_PROGRESS_SCHEMA`)."""
    sc = plan.scenario
    cfg = sc.broker_progress
    interval = cfg.sample_interval_ms
    start = plan.layout.start_ms
    end = sc.start_ms + sc.duration_ms
    n_samples = max(1, (end - start) // interval)
    brokers = sc.broker_ids
    snaps = {s.end_offset: s.last_contained_ms for s in plan.snapshots}
    snap_time = F.create_map(*[x for k, v in snaps.items() for x in (F.lit(k), F.lit(v))]) if snaps else None

    ids = F.array(*[F.lit(b) for b in brokers])
    base = (
        spark.range(0, len(brokers) * n_samples, numPartitions=max(1, min(64, len(brokers) * n_samples // 500_000 + 1)))
        .withColumn("broker_id", F.get(ids, (F.col("id") % len(brokers)).cast("int")))
        .withColumn("i", F.floor(F.col("id") / len(brokers)).cast("long"))
        .withColumn("observed_ms", F.lit(start) + F.col("i") * interval
                    + (F.abs(F.xxhash64(F.lit(sc.seed), F.lit("phase"), F.col("broker_id"))) % interval))
    )
    lag_median = cfg.lag.median_ms
    alpha = cfg.lag.tail_alpha
    xm = lag_median / (2 ** (1 / alpha))

    def lag_at(i: Column) -> Column:
        u = unit_hash(sc.seed, "lag", F.col("broker_id"), i)
        return F.least(F.lit(xm) * F.pow(u, F.lit(-1.0 / alpha)), F.lit(600_000.0))

    def normal_target(d: int) -> Column:     # the target of sample i - d without stalls
        return F.col("observed_ms") - F.lit(d * interval) - lag_at(F.col("i") - d).cast("long")

    # a stall started d samples ago (d * interval < stall_ms) holds the target at that sample's
    stalled = [F.when(unit_hash(sc.seed, "stall", F.col("broker_id"), F.col("i") - d) < F.lit(cfg.lag.stall_probability),
                      normal_target(d))
               for d in range(0, math.ceil(cfg.lag.stall_ms / interval)) if cfg.lag.stall_probability > 0]
    normal = F.least(normal_target(0), *stalled) if stalled else normal_target(0)
    # The windows are few and known here: literal CASE / boolean expressions per window (codegen'd),
    # the first matching window of a kind in plan order, as before.
    obs, bid = F.col("observed_ms"), F.col("broker_id")

    def first_inside(kind: str, value) -> Column:  # noqa: ANN001 - picks a long from a plan Window
        out: Column | None = None
        for w in plan.windows:
            if w.kind != kind:
                continue
            cond = (bid == F.lit(w.broker_id)) & (F.lit(w.start_ms) <= obs) & (obs < F.lit(w.end_ms))
            out = F.when(cond, F.lit(value(w)).cast("long")) if out is None else out.when(cond, F.lit(value(w)).cast("long"))
        return out if out is not None else F.lit(None).cast("long")

    freeze_at = first_inside("frozen", lambda w: w.start_ms)
    is_down = first_inside("down", lambda w: 1).isNotNull()
    load_value = first_inside("snapshot_load", lambda w: w.value)
    freeze_lag = F.lit(xm) * F.pow(unit_hash(sc.seed, "freeze", F.col("broker_id"), freeze_at), F.lit(-1.0 / alpha))
    target = F.when(freeze_at.isNotNull(), freeze_at - 1 - F.least(freeze_lag, F.lit(5000.0)).cast("long")) \
        .otherwise(normal)
    # one process life per restart: the number of down windows that ended before the sample
    life = F.lit(0)
    for w in plan.windows:
        if w.kind == "down":
            life = life + F.when((bid == F.lit(w.broker_id)) & (F.lit(w.end_ms) <= obs), F.lit(1)).otherwise(F.lit(0))
    samples = (
        base.where((F.col("observed_ms") < F.lit(end)) & ~is_down)
        .withColumn("target_ms", target)
        .withColumn("life", life)
        .withColumn("load_offset", load_value - 1)
        .select("broker_id", "i", "observed_ms", "target_ms", "life", "load_offset")
    )
    w = Window.partitionBy("broker_id", "life").orderBy("i").rowsBetween(Window.unboundedPreceding, 0)
    samples = samples.withColumn("applied_ms", F.max("target_ms").over(w))
    located = locate(spark, plan, samples, "applied_ms")
    offset = F.coalesce(F.col("load_offset"), F.col("located_offset"))
    rec_ms = F.col("located_time_ms")
    if snap_time is not None:
        rec_ms = F.when(F.col("load_offset").isNotNull(), snap_time[F.col("load_offset") + 1]).otherwise(rec_ms)
    out = located.select(
        F.lit(sc.cluster_id).alias("cluster_id"),
        F.col("broker_id").cast("int").alias("broker_id"),
        F.timestamp_millis(F.col("observed_ms")).alias("observed_at"),
        offset.cast("long").alias("applied_offset"),
        F.timestamp_millis(rec_ms).alias("applied_record_time"),
    )
    return out
