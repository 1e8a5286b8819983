"""``broker_applied``: each broker's applied offset as a step function of time (facts §5.1, §9.1).

A broker's ``last-applied-record-offset`` is the lastContainedOffset of the newest image it
published; between two samples it is known only at the samples, so the table is the step function
the samples draw: per (cluster, broker), intervals ``[from_time, to_time)`` over which the sampled
offset stayed the same (consecutive samples with one offset merged, ``samples`` of them).

* **Down time**: a gap between two samples longer than ``gap_factor`` × the broker's median sample
  interval means no samples (a broker down, an exporter not scraped): the interval before it ends one
  median interval after its last sample and a ``NO_SAMPLES`` interval (offset null) covers the rest.
* **Restarts**: an interval whose offset is below the previous interval's (a restarted broker loads
  the latest snapshot, facts §5.1) or that follows a ``NO_SAMPLES`` gap is ``restarted``.
* **Stuck**: a broker that applies nothing (network-partitioned from the controllers) draws one
  long ``APPLIED`` interval with many samples; ``cache_lag`` says whether the log moved meanwhile.
* The last interval of a broker is open (``to_time`` null): its offset is the latest known.

Window functions over (cluster, broker) ordered by ``observed_at``, one sort: each run's figures are
carried from its first row to its last, which is kept (no aggregate of the runs, no second ordering);
no Python per row.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from kraft_replay.replay.schemas import BROKER_APPLIED_SCHEMA

__all__ = ["broker_applied", "BROKER_APPLIED_COLUMNS", "BY_BROKER", "GAP_FACTOR"]

GAP_FACTOR = 3.0
BROKER_APPLIED_COLUMNS = BROKER_APPLIED_SCHEMA.names
_KEY = ["cluster_id", "broker_id"]
#: the windows' partition columns: the broker first, so that the sort's prefix tells rows apart
#: (docs/design.md, "Versioned tables")
BY_BROKER = ["broker_id", "cluster_id"]


def broker_applied(progress: DataFrame, gap_factor: float = GAP_FACTOR) -> DataFrame:
    """Facts §9.1 / §5.1: the ``broker_applied`` intervals of bronze ``broker_progress`` samples."""
    # one shuffle: every later step is per broker (a hash of the broker satisfies each grouping and window)
    p = (progress.select(*_KEY, "observed_at", "applied_offset", "applied_record_time").repartition(*BY_BROKER)
         .dropDuplicates([*_KEY, "observed_at"]))
    w = Window.partitionBy(*BY_BROKER).orderBy("observed_at")
    ms = F.unix_micros("observed_at")
    p = p.select("*", ms.alias("_us"), (ms - F.lag(ms).over(w)).alias("_gap_us"),
                 F.lag("applied_offset").over(w).alias("_prev_off"))
    # the broker's median interval over its whole window: the rows are read once, not joined back
    p = p.select("*", F.percentile_approx("_gap_us", 0.5, 10000).over(Window.partitionBy(*BY_BROKER)).alias("_med_us"))
    gap = F.col("_gap_us").isNotNull() & F.col("_med_us").isNotNull() & (F.col("_gap_us") > F.col("_med_us") * gap_factor)
    new_run = F.coalesce(F.col("_prev_off").isNull() | (F.col("applied_offset") != F.col("_prev_off")) | gap, F.lit(False))
    p = p.select("*", gap.alias("_gap_before"), new_run.alias("_new"), F.row_number().over(w).alias("_n"))
    # each run's figures in the same ordering (no aggregate, no second sort): its first row's carried
    # down to every row of the run, and its last row kept, with the next row (the next run's first)
    run = w.rowsBetween(Window.unboundedPreceding, 0)
    first = F.last(F.when(F.col("_new"), F.struct(F.col("_us").alias("us"), F.col("applied_offset").alias("off"),
                                                 F.col("_gap_before").alias("gap"), F.col("_prev_off").alias("prev"),
                                                 F.col("_n").alias("n"))), ignorenulls=True).over(run)
    p = p.select("*", first.alias("_first"),
                 F.coalesce(F.lead("_new").over(w), F.lit(True)).alias("_last"),
                 F.lead("_us").over(w).alias("_next_us"), F.lead("_gap_before").over(w).alias("_gap_after"))
    runs = p.where(F.col("_last")).select(
        *_KEY, F.col("_first.us").alias("_first_us"), F.col("_us").alias("_last_us"),
        F.col("_first.off").alias("applied_offset"), "applied_record_time",
        (F.col("_n") - F.col("_first.n") + 1).alias("samples"), F.col("_first.gap").alias("_gap_before"), "_med_us",
        "_next_us", "_gap_after", F.col("_first.prev").alias("_prev_run_off"))
    end_us = F.when(F.col("_gap_after"), F.col("_last_us") + F.col("_med_us")).otherwise(F.col("_next_us"))
    ts = lambda c: F.timestamp_micros(c.cast("long"))  # noqa: E731
    applied = F.struct(
        ts(F.col("_first_us")).alias("from_time"), ts(end_us).alias("to_time"), F.lit("APPLIED").alias("state"),
        F.col("applied_offset"), F.col("applied_record_time"), F.col("samples").cast("long").alias("samples"),
        (F.coalesce(F.col("_gap_before"), F.lit(False))
         | F.coalesce(F.col("applied_offset") < F.col("_prev_run_off"), F.lit(False))).alias("restarted"))
    gap = F.struct(
        ts(F.col("_last_us") + F.col("_med_us")).alias("from_time"), ts(F.col("_next_us")).alias("to_time"),
        F.lit("NO_SAMPLES").alias("state"), F.lit(None).cast("long").alias("applied_offset"),
        F.lit(None).cast("timestamp").alias("applied_record_time"), F.lit(0).cast("long").alias("samples"),
        F.lit(False).alias("restarted"))
    # each run gives its interval and, before a gap, the NO_SAMPLES one (one pass, not a union of two)
    rows = F.when(F.col("_gap_after"), F.array(applied, gap)).otherwise(F.array(applied))
    out = runs.select(*_KEY, F.explode(rows).alias("_i"))
    return out.select(*_KEY, "_i.*").select(*BROKER_APPLIED_COLUMNS)
