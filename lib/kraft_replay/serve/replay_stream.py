"""``kraft-replay replay --mode stream``: the replay kept current by Structured Streaming (docs/design.md,
"Stream mode").

One streaming query reads the lake's bronze tables (``metadata_log``, ``metadata_control``,
``snapshot_records``, ``broker_progress``) through the lake's streaming source, which only ever
delivers published ingest runs, and hands every micro-batch to ``foreachBatch``:

* clusters with new log rows (any of the three log tables): the silver tables of those clusters are
  brought up to date (:func:`kraft_replay.replay.run.run_replay` with ``incremental``: the stored
  replay resumed with the records published since, or replayed whole from the bronze rows when it
  cannot be), then ``cache_lag`` (:func:`kraft_replay.outcomes.cache_lag.write_cache_lag`);
* clusters with only new metric samples: ``broker_applied`` and ``cache_lag`` of those clusters
  (the versioned tables do not read metrics), for clusters the replay already knows;
* then, when the lake holds client request tables and ``broker_applied``, the outcome tables of every
  touched cluster (:func:`kraft_replay.outcomes.run.write_outcomes`: consistency tokens, fencing).

Every write is a published run (replacing the clusters' rows, or appending a resumed replay's new
ones), so the tables always equal a batch replay of the bronze tables as published at some moment: a micro-batch replayed after a crash (Spark
re-runs the batch whose offsets it logged but did not commit) writes the same rows again, a killed
run is rolled back by the next one, nothing is duplicated and nothing is skipped. Checkpoints live
under the lake (``_streams/replay`` by default) so a restart resumes where the last run stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kraft_replay.replay.run import BRONZE_INPUTS, PROGRESS

__all__ = ["StreamReport", "changes", "default_checkpoint", "run_stream"]

STREAMS_DIR = "_streams"


@dataclass
class StreamReport:
    """What a stream run did: micro-batches, clusters replayed, seconds per batch."""

    batches: int = 0
    replays: int = 0
    incremental: int = 0
    metric_updates: int = 0
    outcome_updates: int = 0
    batch_seconds: list[float] = field(default_factory=list)

    def line(self) -> str:
        if not self.batches:
            return "replay stream: no new bronze rows"
        s = sorted(self.batch_seconds)
        return (f"replay stream: {self.batches} micro-batch(es), {self.replays} cluster replay(s) "
                f"({self.incremental} resumed, {self.replays - self.incremental} whole), "
                f"{self.metric_updates} metrics-only update(s), {self.outcome_updates} outcome update(s); seconds per batch p50 {s[len(s) // 2]:.1f}, "
                f"max {s[-1]:.1f}")


def default_checkpoint(lake_root: str, cluster_id: str | None) -> str:
    """``<lake>/_streams/replay`` (``replay-<cluster>`` for one cluster): one query per scope."""
    return f"{lake_root.rstrip('/')}/{STREAMS_DIR}/replay" + ("" if cluster_id is None else f"-{cluster_id}")


def changes(lake, cluster_id: str | None = None, max_files_per_trigger: int | None = None) -> DataFrame:  # noqa: ANN001
    """A streaming DataFrame ``(cluster_id, source)`` of every row published into the bronze log and
    metric tables from now on (the query's first batch: every row already there); at most
    ``max_files_per_trigger`` data files of each table per micro-batch."""
    parts = [lake.read_stream(t, max_files_per_trigger=max_files_per_trigger).select("cluster_id", F.lit(t).alias("source")) for t in (*BRONZE_INPUTS, PROGRESS)]
    df = reduce(DataFrame.unionByName, parts)
    return df if cluster_id is None else df.where(F.col("cluster_id") == F.lit(cluster_id))


def _micro_batch(spark: SparkSession, lake, batch: DataFrame, batch_id: int, report: StreamReport,  # noqa: ANN001
                 say: Callable[[str], None], lag_bucket: float, image_at: Sequence[int], incremental: bool) -> None:
    from kraft_replay.outcomes.cache_lag import write_cache_lag
    from kraft_replay.outcomes.run import write_outcomes
    from kraft_replay.replay.run import run_broker_applied, run_replay

    t0 = time.time()
    counts = batch.groupBy("cluster_id", "source").count().collect()
    if not counts:
        return
    log_clusters = sorted({r["cluster_id"] for r in counts if r["source"] != PROGRESS})
    metric_only = sorted({r["cluster_id"] for r in counts if r["source"] == PROGRESS} - set(log_clusters))
    if metric_only and lake.exists("log_commit"):  # clusters the replay knows (as batch mode writes them)
        known = {r["cluster_id"] for r in lake.read("log_commit").select("cluster_id").distinct().collect()}
        metric_only = [c for c in metric_only if c in known]
    else:
        metric_only = []
    rows = sum(r["count"] for r in counts)
    sub = lambda line: say("  " + line.strip())  # noqa: E731 - the steps' lines, indented under the batch's
    say(f"batch {batch_id}: {rows} new bronze row(s); replaying {', '.join(log_clusters) or 'nothing'}"
        + (f"; metrics of {', '.join(metric_only)}" if metric_only else ""))
    if log_clusters:
        summary = run_replay(spark, lake, clusters=log_clusters, say=sub, image_at=image_at, incremental=incremental)
        report.replays += len(summary.clusters)
        report.incremental += sum(m.startswith("INCREMENTAL") for m in summary.modes.values())
        write_cache_lag(lake, summary.clusters, say=sub, bucket_s=lag_bucket)
    if metric_only:
        run_broker_applied(spark, lake, metric_only, say=sub)
        write_cache_lag(lake, metric_only, say=sub, bucket_s=lag_bucket)
        report.metric_updates += len(metric_only)
    touched = sorted({*log_clusters, *metric_only})
    if touched and write_outcomes(spark, lake, touched, say=sub) is not None:
        report.outcome_updates += len(touched)
    report.batches += 1
    report.batch_seconds.append(time.time() - t0)
    say(f"batch {batch_id}: published in {time.time() - t0:.1f} s")


def run_stream(spark: SparkSession, lake, *, cluster_id: str | None = None,  # noqa: ANN001 - a Lake
               trigger_seconds: float | None = 1.0, available_now: bool = False, checkpoint: str | None = None,
               run_for: float | None = None, lag_bucket: float = 1.0, image_at: Sequence[int] = (),
               max_files_per_trigger: int | None = None, incremental: bool = True,
               say: Callable[[str], None] = print) -> StreamReport:
    """Run the replay stream until it is idle (``available_now``), ``run_for`` seconds have passed,
    or it is interrupted; returns what it did. A continuous stream on a lake without bronze tables yet
    waits for them (:func:`wait_for_bronze`); ``available_now`` on such a lake is a one-line
    :class:`~kraft_replay.replay.run.ReplayError`. A failing micro-batch stops the query and raises.
    ``incremental``: each touched cluster's stored replay is resumed with the records published since
    (``run_replay(incremental=True)``); False: replayed whole."""
    from kraft_replay.ingest.tables import METRICS_BRONZE_TABLES, ensure_bronze_tables
    from kraft_replay.replay.run import check_bronze

    started = time.monotonic()
    report = StreamReport()
    if not available_now and not wait_for_bronze(lake, say, None if run_for is None else started + run_for):
        return report  # --run-for passed (or Ctrl-C) before an ingest made the bronze tables
    check_bronze(lake)
    if run_for is not None:
        run_for = max(0.1, run_for - (time.monotonic() - started))
    # broker_progress is watched from the start, so that metrics ingested later reach the stream
    ensure_bronze_tables(lake, [METRICS_BRONZE_TABLES[PROGRESS]])
    ckpt = checkpoint or default_checkpoint(lake.root, cluster_id)
    trig = {"availableNow": True} if available_now else {"processingTime": f"{trigger_seconds:g} seconds"}
    query = (changes(lake, cluster_id, max_files_per_trigger).writeStream
             .foreachBatch(lambda df, bid: _micro_batch(spark, lake, df, bid, report, say, lag_bucket, image_at, incremental))
             .option("checkpointLocation", ckpt).trigger(**trig).queryName("kraft_replay_replay").start())
    say(f"replay stream: checkpoint {ckpt}; " + ("processing what is new, then stopping" if available_now else
                                                 f"trigger every {trigger_seconds:g} s"
                                                 + (f" for {run_for:g} s" if run_for else " until interrupted")))
    try:
        timeout = None if available_now else run_for  # --available-now stops by itself
        if timeout:
            query.awaitTermination(timeout)
        else:
            query.awaitTermination()
    except KeyboardInterrupt:
        say("replay stream: interrupted; stopping after the batch in progress")
    finally:
        if query.isActive:
            query.stop()
    exc = query.exception()
    if exc is not None:
        raise StreamFailed(_first_line(str(exc))) from None
    return report


def wait_for_bronze(lake, say: Callable[[str], None], deadline: float | None = None,  # noqa: ANN001 - a Lake
                    poll: float = 1.0) -> bool:
    """Wait until the lake has every bronze input table (a stream started beside ``ingest --follow`` on
    an empty lake: the follower's first poll makes them), saying once what it waits for. False when
    ``deadline`` (``time.monotonic()``) passes first or on Ctrl-C; True at once when they exist."""
    from kraft_replay.replay.run import missing_bronze

    missing = missing_bronze(lake)
    if not missing:
        return True
    say(f"replay stream: waiting for {', '.join(missing)} in lake {lake.root} (made by the first `kraft-replay ingest` "
        "run on it, e.g. `ingest NODE_DIR --follow`); Ctrl-C stops")
    try:
        while missing:
            if deadline is not None and time.monotonic() >= deadline:
                say("replay stream: --run-for ended before the bronze tables appeared")
                return False
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))
            missing = missing_bronze(lake)
    except KeyboardInterrupt:
        say("replay stream: interrupted while waiting for the bronze tables")
        return False
    say("replay stream: the bronze tables are there; starting")
    return True


class StreamFailed(Exception):
    """The streaming query stopped on an error (one line)."""


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:  # the Python error raised in foreachBatch, when there is one
        if ln.startswith(("kraft_replay.", "ReplayError", "LakeError")) or "Error:" in ln:
            return ln
    return lines[0] if lines else "the streaming query failed"
