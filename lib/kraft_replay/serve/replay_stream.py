"""``kraft-replay replay --mode stream``: the live replay (docs/design.md, "Stream mode";
:mod:`kraft_replay.replay.live_stream`): one Structured Streaming query whose stateful operator keeps
each cluster's replay in Spark's state store and advances it with each micro-batch's new bronze
rows; the driver writes each micro-batch's steps (the images at metadata.version changes among them)
with delta-rs commits and one publish. The derived tables (``broker_applied``, the outcome tables,
and with ``image_at`` the images at those offsets) are batch jobs run for the touched clusters every
``derive_every`` seconds, in a thread beside the stream (0: after each micro-batch, in it), and when
the query stops. Checkpoints
(the query's offsets and the state store) live under the lake (``_streams/replay`` by default), so a
restart resumes where the last run stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from kraft_replay.replay.live_stream import LiveReport
from kraft_replay.replay.run import PROGRESS
from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA, REQUESTED, VERSIONED_TABLES
from kraft_replay.spark import session_conf, sized_by

__all__ = ["LiveReport", "default_checkpoint", "run_stream", "derive"]

STREAMS_DIR = "_streams"


def default_checkpoint(lake_root: str, cluster_id: str | None) -> str:
    """``<lake>/_streams/replay`` (``replay-<cluster>`` for one cluster): one query per scope."""
    return f"{lake_root.rstrip('/')}/{STREAMS_DIR}/replay" + ("" if cluster_id is None else f"-{cluster_id}")


def derive(spark: SparkSession, lake, clusters: Sequence[str], *,  # noqa: ANN001 - a Lake
           image_at: Sequence[int] = (), say: Callable[[str], None] = print) -> pa.Table | None:
    """The derived tables of ``clusters`` from the lake's silver tables, as the batch jobs write them:
    ``broker_applied`` (with broker metrics) and the outcome tables (with client requests). Returns
    the ``image_snapshots`` rows of the images at the offsets of ``image_at`` (trigger ``REQUESTED``;
    None without), for the stream's sink to write (:func:`write_requested_images`): the sink is the
    one writer of that table, whose images at metadata.version changes come with the operator's steps.
    ``cache_lag`` is not among them: the operator keeps it current (:mod:`kraft_replay.outcomes.live_lag`)."""
    from kraft_replay.outcomes.run import write_outcomes
    from kraft_replay.replay.images import image_snapshots
    from kraft_replay.replay.run import cluster_where, run_broker_applied

    clusters = sorted(set(clusters))
    where = cluster_where(clusters)
    metrics = [lake.read(PROGRESS, where=where)] if lake.exists(PROGRESS) else []
    versions = {t: lake.read(t, where=where) for t in VERSIONED_TABLES} if image_at else {}
    images = None
    with sized_by(spark, ([versions["partitions"]] if image_at else []) + metrics):  # what the batch replay's sized run does
        if image_at:
            pairs = [(c, o) for c in clusters for o in sorted(set(image_at))]
            requested = spark.createDataFrame(pairs, "cluster_id string, image_offset long")
            images = image_snapshots(versions, requested, changes=False).toArrow().cast(IMAGE_SNAPSHOTS_SCHEMA)
        run_broker_applied(spark, lake, clusters, say=say)
    write_outcomes(spark, lake, clusters, say=say)
    return images


def write_requested_images(lake, clusters: Sequence[str], rows: pa.Table,  # noqa: ANN001 - a Lake
                           say: Callable[[str], None] = print) -> None:
    """Replace the ``REQUESTED`` rows of ``image_snapshots`` of ``clusters`` with ``rows`` (their images
    at the offsets asked for, :func:`derive`), the other rows kept, in one published run (delta-rs)."""
    import uuid

    run_id = "images-" + uuid.uuid4().hex[:12]
    lake.start_run(run_id, [IMAGE_SNAPSHOTS])
    try:
        for c in sorted(set(clusters)):
            mine = rows.filter(pc.equal(rows.column("cluster_id"), c))
            lake.rewrite_arrow(IMAGE_SNAPSHOTS, {"cluster_id": c},
                               lambda old, mine=mine: [old.filter(pc.not_equal(old.column("trigger"), REQUESTED)), mine])
        lake.publish([IMAGE_SNAPSHOTS], run_id)
    except BaseException:
        lake.end_run()
        raise
    say(f"  {IMAGE_SNAPSHOTS}: {rows.num_rows} rows at the offsets asked for")


#: a cluster with at least this many bronze log records not in a stored batch replay, when a stream
#: starts on a new checkpoint, is caught up by the batch replay first (:func:`catch_up`). Measured on the
#: medium cluster (docs/benchmarks.md, "Stream catch-up"): the stream's own replay in its first
#: micro-batch is 1.37x sooner at 300k records, the catch-up 1.37x sooner at 1M (the two cross near
#: 570k); the stream's own replay's memory grows with the records (peak RSS 4.3 -> 7.6 GiB) and at 3M
#: its micro-batch ran the driver out of heap
CATCH_UP_RECORDS = 500_000


def backlogs(lake, cluster_id: str | None = None) -> dict[str, int]:  # noqa: ANN001 - a Lake
    """Per cluster (``cluster_id``: that one), how many of its published bronze log records a stream
    starting now would replay by the sequential rules: those past its stored batch replay's last offset
    (what :meth:`~kraft_replay.replay.live_stream.LiveReplay._resumed` takes up), or all of them when
    no batch replay is stored (none, or the live path's own). Read with delta-rs on the driver, one
    cluster's offsets at a time (files ruled out by their statistics are not read)."""
    import pyarrow.compute as pc

    from kraft_replay.replay.incremental import REPLAY_PROGRESS, REPLAY_PROGRESS_SCHEMA

    clusters = sorted({p["cluster_id"] for p in lake.partitions("metadata_log") if p.get("cluster_id") is not None})
    if cluster_id is not None:
        clusters = [c for c in clusters if c == cluster_id]
    stored: dict[str, int] = {}
    if lake.exists(REPLAY_PROGRESS):
        for r in lake.read_arrow(REPLAY_PROGRESS, REPLAY_PROGRESS_SCHEMA.names).to_pylist():
            if r["log_rows"] is not None and r["through_offset"] is not None:  # a batch replay's row
                stored[r["cluster_id"]] = r["through_offset"]
    out: dict[str, int] = {}
    for cid in clusters:
        end = stored.get(cid)
        out[cid] = lake.read_arrow("metadata_log", ["offset"], partitions=[("cluster_id", "=", cid)],
                                   filter=None if end is None else pc.field("offset") > end).num_rows
    return out


def catch_up(spark: SparkSession, lake, *, cluster_id: str | None = None,  # noqa: ANN001 - a Lake
             min_records: int = CATCH_UP_RECORDS, say: Callable[[str], None] = print) -> list[str]:
    """Issue 47 §4, where a stream starting on a lake switches to the batch replay: the clusters with at
    least ``min_records`` records to replay (:func:`backlogs`) are replayed by the batch replay
    (incremental where the stored replay allows it) before the query starts; the stream's first
    micro-batch then takes their stored replay up instead of replaying them record by record. Returns
    the clusters caught up."""
    from kraft_replay.replay.run import run_replay

    due = {c: n for c, n in backlogs(lake, cluster_id).items() if n >= min_records}
    if not due:
        return []
    t0 = time.time()
    say("replay stream: " + ", ".join(f"{c} has {n:,} records to replay" for c, n in due.items())
        + f" (>= {min_records:,}): the batch replay catches up first, then the stream takes it up")
    run_replay(spark, lake, clusters=list(due), incremental=True, say=lambda s: say("  " + s.strip()))
    say(f"replay stream: batch catch-up of {', '.join(due)} in {time.time() - t0:.1f} s")
    return list(due)


def _checkpoint_is_new(ckpt: str) -> bool:
    """No micro-batch committed in the query checkpoint ``ckpt`` yet (the stream's state holds nothing)."""
    import pyarrow.fs as pafs

    from kraft_replay.lake.stream import _fs_for

    fs, path = _fs_for(ckpt)
    info = fs.get_file_info(pafs.FileSelector(path + "/commits", allow_not_found=True))
    return not any(i.type == pafs.FileType.File for i in info)


def run_stream(spark: SparkSession, lake, *, cluster_id: str | None = None,  # noqa: ANN001 - a Lake
               trigger_seconds: float | None = 1.0, available_now: bool = False, checkpoint: str | None = None,
               run_for: float | None = None, lag_bucket: float = 1.0, lag_window: float = 600.0, image_at: Sequence[int] = (),
               max_files_per_trigger: int | None = None, derive_every: float = 60.0,
               catch_up_records: int | None = CATCH_UP_RECORDS, say: Callable[[str], None] = print) -> LiveReport:
    """Run the live replay until it is idle (``available_now``), ``run_for`` seconds have passed, or
    it is interrupted; returns what it did. A continuous stream on a lake without bronze tables yet
    waits for them (:func:`wait_for_bronze`); ``available_now`` on such a lake is a one-line
    :class:`~kraft_replay.replay.run.ReplayError`. On a new checkpoint, clusters with at least
    ``catch_up_records`` records to replay are caught up by the batch replay first (:func:`catch_up`;
    None: never). A failing micro-batch stops the query and raises :class:`StreamFailed`."""
    from kraft_replay.config import DERIVE_POOL
    from kraft_replay.ingest.tables import METRICS_BRONZE_TABLES, ensure_bronze_tables
    from kraft_replay.lake.stream import sink_app_id
    from kraft_replay.replay.live_stream import OUTPUT, LiveReplay, changes, ensure_silver_tables, micro_batch
    from kraft_replay.replay.run import check_bronze
    from kraft_replay.spark.beside import Beside

    started = time.monotonic()
    report = LiveReport()
    if not available_now and not wait_for_bronze(lake, say, None if run_for is None else started + run_for):
        return report  # --run-for passed (or Ctrl-C) before an ingest made the bronze tables
    check_bronze(lake)
    if run_for is not None:
        run_for = max(0.1, run_for - (time.monotonic() - started))
    # broker_progress is watched from the start, so that metrics ingested later reach the stream
    ensure_bronze_tables(lake, [METRICS_BRONZE_TABLES[t] for t in (PROGRESS, "quorum_status")])
    ensure_silver_tables(lake)
    ckpt = checkpoint or default_checkpoint(lake.root, cluster_id)
    if catch_up_records is not None and _checkpoint_is_new(ckpt):
        report.caught_up = catch_up(spark, lake, cluster_id=cluster_id, min_records=catch_up_records, say=say)
    trig = {"availableNow": True} if available_now else {"processingTime": f"{trigger_seconds:g} seconds"}
    pending: set[str] = set()
    last_derive = [time.monotonic()]
    query_id: list[str] = []
    # the derived tables are Spark batch jobs: beside the stream (a thread of their own, on a Lake object
    # of their own: its runs are its own), so that a derive never holds up the micro-batches
    from kraft_replay.lake import Lake

    derive_lake = Lake(lake.root, spark, backend=lake.backend, target_file_rows=lake.target_file_rows,
                       storage_options=getattr(lake._impl, "storage_options", None))
    # the sink's commits are delta-rs only: a driver-only Lake keeps each table's log loaded between
    # micro-batches (a Lake with Spark reloads _published's whole log at every publish: ~0.3 s once the
    # two writers had made 500 versions, growing)
    sink_lake = Lake(lake.root, None, backend="deltars", target_file_rows=lake.target_file_rows,
                     storage_options=getattr(lake._impl, "storage_options", None))
    derive_job: list[Beside] = []  # the derive running beside the stream, if any
    requested: list[tuple[list[str], pa.Table]] = []  # images at the offsets asked for, derived, not yet written

    def write_requested() -> None:
        while requested:
            clusters, rows = requested.pop(0)
            write_requested_images(sink_lake, clusters, rows, say=lambda s: say("  " + s.strip()))

    def run_derive(clusters: list[str]) -> None:
        t0 = time.time()
        images = derive(spark, derive_lake, clusters, image_at=image_at, say=lambda s: say("  " + s.strip()))
        if images is not None:
            requested.append((clusters, images))  # written by the sink (:func:`write_requested_images`)
        report.derived += 1
        say(f"derived tables of {', '.join(clusters)} in {time.time() - t0:.1f} s")

    def due(force: bool = False) -> None:
        """Start the derive when it is due (``force``: now, and wait for it); a failed one raises here."""
        if derive_job:
            if not (force or derive_job[0].done()):
                return
            derive_job.pop().result()  # its error, if it failed, stops the stream here
        if pending and (force or time.monotonic() - last_derive[0] >= derive_every):
            clusters = sorted(pending)
            pending.clear()
            last_derive[0] = time.monotonic()
            if force or derive_every == 0:
                run_derive(clusters)
            else:  # its jobs in a pool of their own, beside the stream's (STREAM_CONF)
                derive_job.append(Beside(spark, lambda: run_derive(clusters), pool=DERIVE_POOL,
                                         name="kraft-replay-derive"))

    def sink(batch, batch_id: int) -> None:  # noqa: ANN001 - a DataFrame
        if not query_id:
            query_id.append(sink_app_id(ckpt, "live").rsplit("-", 1)[-1])
        micro_batch(sink_lake, batch, batch_id, query_id[0], report, pending, say)
        write_requested()
        due()

    # one task reads a micro-batch's new files, one holds the state: each micro-batch is a few hundred
    # rows, and every further task is a Python worker and a state store commit more (measured: the
    # operator's job 1.0 -> 0.45 s per tiny micro-batch). The query runs on a copy of the session taken
    # when it starts, and a new checkpoint keeps the state partitions it was started with.
    live = (changes(lake, cluster_id, max_files_per_trigger, tasks=1).groupBy("cluster_id")
            .transformWithStateInPandas(LiveReplay(lake.root, lag_bucket=lag_bucket, lag_window=lag_window), OUTPUT,
                                        "Append", "None"))
    with session_conf(spark, {"spark.sql.shuffle.partitions": "1"}):  # the derive's jobs keep the profile's
        query = (live.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).trigger(**trig)
                 .queryName("kraft_replay_live").start())
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
    due(force=True)
    write_requested()
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
