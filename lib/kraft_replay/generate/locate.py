"""Time -> log position, in closed form: which offset was the last one appended at or before a time.

Rule: a broker that has applied everything appended up to time ``A`` has applied offset
``max{offset : append_time <= A}``. The plan's segments (bulk batches then a structural group) cover
the run in time order; a time bucket join finds the segment containing ``A`` and the bulk layout's
prefix sums give the offset inside it. Used by the apply timelines and the client request tables.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kraft_replay.generate.bulk import CYCLE
from kraft_replay.generate.plan import Plan

FAR_FUTURE_MS = 1 << 50


def segments_by_time(spark: SparkSession, plan: Plan) -> tuple[DataFrame, int]:
    """One row per (segment, time bucket) the segment overlaps; columns prefixed ``seg_``."""
    segs = plan.segments
    bucket = max(1, plan.scenario.duration_ms // 4000)
    rows = []
    for i, s in enumerate(segs):
        end = segs[i + 1].seg_start_ms if i + 1 < len(segs) else FAR_FUTURE_MS
        if end <= s.seg_start_ms:
            continue
        last_bucket = min(end - 1, plan.scenario.start_ms + plan.scenario.duration_ms + 1) // bucket
        for b in range(s.seg_start_ms // bucket, last_bucket + 1):
            rows.append((b, s.seg_id, s.seg_start_ms, end, s.j_start, s.j_end, s.offset_start, s.noop_allowed,
                         s.group_time_ms, s.group_last_offset, s.down, s.mv_level))
    schema = ("seg_bucket long, seg_id long, seg_start_ms long, seg_end_ms long, seg_j_start long, seg_j_end long, "
              "seg_offset_start long, seg_noop_allowed boolean, seg_group_time_ms long, seg_group_last_offset long, "
              "seg_down array<int>, seg_mv_level int")
    return F.broadcast(spark.createDataFrame(rows, schema)), bucket


def locate(spark: SparkSession, plan: Plan, df: DataFrame, time_ms: str) -> DataFrame:
    """Add ``seg_*`` columns of the segment containing ``time_ms``, plus ``located_offset`` and ``located_time_ms``.

    Rows whose time precedes the log get ``located_offset = -1`` and the first segment's state.
    """
    lay = plan.layout
    segs, bucket = segments_by_time(spark, plan)
    first_start = plan.segments[0].seg_start_ms
    t = F.greatest(F.col(time_ms), F.lit(first_start))
    keyed = df.withColumn("_t", t).withColumn("_bucket", F.floor(F.col("_t") / bucket).cast("long"))
    joined = keyed.join(segs, (F.col("_bucket") == F.col("seg_bucket"))
                        & (F.col("seg_start_ms") <= F.col("_t")) & (F.col("_t") < F.col("seg_end_ms")), "left")
    n = max(lay.n_batches, 1)
    partial_all = F.array(*[F.lit(v) for v in lay.partial_all[:CYCLE]]).cast("array<long>")
    partial_churn = F.array(*[F.lit(v) for v in lay.partial_churn[:CYCLE]]).cast("array<long>")

    def prefix(j: Column, churn: Column) -> Column:
        total_all, total_churn = lay.partial_all[CYCLE], lay.partial_churn[CYCLE]
        c = (j % CYCLE).cast("int")
        base = F.floor(j / CYCLE).cast("long")
        return F.when(churn, base * total_churn + F.get(partial_churn, c)).otherwise(base * total_all + F.get(partial_all, c))

    jmax = F.floor(((F.col("_t") - F.lit(lay.start_ms) + 1) * F.lit(n) - 1) / F.lit(lay.span_ms)).cast("long")
    jj = F.least(jmax, F.col("seg_j_end") - 1)
    churn_only = ~F.col("seg_noop_allowed")
    in_group = F.col("seg_group_time_ms").isNotNull() & (F.col("_t") >= F.col("seg_group_time_ms"))
    bulk_off = F.col("seg_offset_start") + prefix(jj + 1, churn_only) - prefix(F.col("seg_j_start"), churn_only) - 1
    has_bulk = (jj >= F.col("seg_j_start")) & (F.col("_t") >= F.lit(lay.start_ms))
    offset = (F.when(F.col(time_ms) < F.lit(first_start), F.lit(-1).cast("long"))
              .when(in_group, F.col("seg_group_last_offset"))
              .when(has_bulk, bulk_off)
              .otherwise(F.col("seg_offset_start") - 1))
    when_ms = (F.when(F.col(time_ms) < F.lit(first_start), F.lit(None).cast("long"))
               .when(in_group, F.col("seg_group_time_ms"))
               .when(has_bulk, F.lit(lay.start_ms) + F.floor(jj * F.lit(lay.span_ms) / F.lit(n)).cast("long"))
               .otherwise(F.col("seg_start_ms")))
    return (joined.withColumn("located_offset", offset)
            .withColumn("located_time_ms", F.when(offset >= 0, when_ms))
            .drop("_t", "_bucket", "seg_bucket"))
