"""Bronze ``broker_progress``: per-broker samples of the ``last-applied-record-offset`` /
``last-applied-record-timestamp`` metrics (facts §9.1).

Rules: each broker is sampled every ``sample_interval_ms`` (with a per-broker phase). Its cache
trails the log by a fetch lag drawn from a Pareto distribution (median and tail index from the
scenario) plus occasional stalls; what it has applied never moves backwards within one process
life. While network-partitioned from the controller its cache is frozen (constant offset) until the
partition heals; while restarting there are no samples; after a restart it first loads the latest
snapshot (offset = snapshot end offset - 1) and then catches up. Randomness is a hash of
(seed, broker, sample), so the table is the same for a seed whatever the partitioning.

Columns: ``cluster_id`` string, ``broker_id`` int, ``observed_at`` timestamp, ``applied_offset``
long (-1 before anything is applied), ``applied_record_time`` timestamp (append time of the batch
holding ``applied_offset``; null when -1).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from kraft_replay.generate.ddl import schema

from kraft_replay.generate.locate import locate
from kraft_replay.generate.plan import Plan

BROKER_PROGRESS_SCHEMA = schema(
    "cluster_id string, broker_id int, observed_at timestamp, applied_offset long, applied_record_time timestamp")


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
    windows = spark.createDataFrame(
        [(w.broker_id, w.kind, w.start_ms, w.end_ms, w.value) for w in plan.windows] or [(-1, "none", 0, 0, -1)],
        "w_broker int, w_kind string, w_start long, w_end long, w_value long")
    win_arrays = windows.groupBy("w_broker").agg(
        F.collect_list(F.struct("w_kind", "w_start", "w_end", "w_value")).alias("wins"))
    snaps = {s.end_offset: s.last_contained_ms for s in plan.snapshots}
    snap_time = F.create_map(*[x for k, v in snaps.items() for x in (F.lit(k), F.lit(v))]) if snaps else None

    ids = F.array(*[F.lit(b) for b in brokers])
    base = (
        spark.range(0, len(brokers) * n_samples, numPartitions=max(1, min(64, len(brokers) * n_samples // 500_000 + 1)))
        .withColumn("broker_id", F.get(ids, (F.col("id") % len(brokers)).cast("int")))
        .withColumn("i", F.floor(F.col("id") / len(brokers)).cast("long"))
        .withColumn("observed_ms", F.lit(start) + F.col("i") * interval
                    + (F.abs(F.xxhash64(F.lit(sc.seed), F.lit("phase"), F.col("broker_id"))) % interval))
        .join(F.broadcast(win_arrays), F.col("broker_id") == F.col("w_broker"), "left")
    )
    inside = lambda kind: F.filter(  # noqa: E731 - small local helper
        F.coalesce(F.col("wins"), F.array().cast("array<struct<w_kind:string,w_start:long,w_end:long,w_value:long>>")),
        lambda w: (w["w_kind"] == kind) & (w["w_start"] <= F.col("observed_ms")) & (F.col("observed_ms") < w["w_end"]))
    lag_median = cfg.lag.median_ms
    alpha = cfg.lag.tail_alpha
    xm = lag_median / (2 ** (1 / alpha))
    u = unit_hash(sc.seed, "lag", F.col("broker_id"), F.col("i"))
    stall = unit_hash(sc.seed, "stall", F.col("broker_id"), F.col("i")) < F.lit(cfg.lag.stall_probability)
    lag = F.least(F.lit(xm) * F.pow(u, F.lit(-1.0 / alpha)), F.lit(600_000.0)) + F.when(stall, F.lit(cfg.lag.stall_ms)).otherwise(0.0)
    frozen = inside("frozen")
    downs = inside("down")
    loading = inside("snapshot_load")
    freeze_at = F.get(frozen, 0)["w_start"]
    freeze_lag = F.lit(xm) * F.pow(unit_hash(sc.seed, "freeze", F.col("broker_id"), freeze_at), F.lit(-1.0 / alpha))
    target = F.when(F.size(frozen) > 0, freeze_at - 1 - F.least(freeze_lag, F.lit(5000.0)).cast("long")) \
        .otherwise(F.col("observed_ms") - lag.cast("long"))
    # one process life per restart: the number of down windows that ended before the sample
    life = F.size(F.filter(
        F.coalesce(F.col("wins"), F.array().cast("array<struct<w_kind:string,w_start:long,w_end:long,w_value:long>>")),
        lambda w: (w["w_kind"] == "down") & (w["w_end"] <= F.col("observed_ms"))))
    samples = (
        base.where((F.col("observed_ms") < F.lit(end)) & (F.size(downs) == 0))
        .withColumn("target_ms", target)
        .withColumn("life", life)
        .withColumn("load_offset", F.when(F.size(loading) > 0, F.get(loading, 0)["w_value"] - 1))
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
