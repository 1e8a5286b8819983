"""``kraft-replay demo``: a short end-to-end run on the embedded default.

Pipeline part (:func:`ingest_demo`): ingest the sample node in ``data/samples/node1`` (log segments,
a snapshot and ``bootstrap.checkpoint``, written by our own encoder) and the sample
``kafka-dump-log`` text into the bronze tables, re-ingest to show idempotency, and query the
bronze tables in SQL.

Replay part (:func:`replay_demo`): replay the bronze rows into the silver tables and print the
binary sample's metadata image at its last offset.

Lake part (:func:`lake_demo`): write a small table through the lake, append to it, read the first
version back by time travel (version and timestamp), stream the table into a copy through the
exactly-once sink, and print a summary.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from kraft_replay.resources import samples_dir

DEMO_TABLE = "demo_events"
DEMO_COPY = "demo_events_copy"
DEMO_SCHEMA = StructType([
    StructField("id", LongType(), False),
    StructField("kind", StringType()),
    StructField("value", DoubleType()),
    StructField("at", TimestampType()),
    StructField("bucket", IntegerType()),
])


@dataclass
class DemoSummary:
    """What the demo checked; every count is read back from the lake."""

    first_version: int = -1
    latest_version: int = -1
    rows_first_version: int = 0
    rows_at_timestamp: int = 0
    rows_latest: int = 0
    rows_streamed: int = 0
    tables: list[tuple[str, int, int]] = field(default_factory=list)  # (name, version, rows)

    @property
    def ok(self) -> bool:
        return (self.rows_first_version == self.rows_at_timestamp > 0
                and self.rows_latest > self.rows_first_version
                and self.rows_streamed == self.rows_latest)


def _events(spark: SparkSession, start: int, count: int):
    return spark.range(start, start + count).select(
        F.col("id"),
        F.element_at(F.array(F.lit("register"), F.lit("fence"), F.lit("unfence")), (F.col("id") % 3 + 1).cast("int")).alias("kind"),
        (F.col("id") * 0.5).alias("value"),
        (F.lit("2026-01-01 00:00:00").cast("timestamp") + F.make_interval(secs=F.col("id").cast("int"))).alias("at"),
        (F.col("id") % 4).cast("int").alias("bucket"),
    )


def lake_demo(spark: SparkSession, lake, out: Callable[[str], None] = print,
              first_rows: int = 1000, more_rows: int = 500) -> DemoSummary:
    """Write, append, time-travel, stream and summarise through ``lake``; returns what it read back."""
    s = DemoSummary()
    lake.create_table(DEMO_TABLE, DEMO_SCHEMA, partition_by=["bucket"])
    first = lake.overwrite(DEMO_TABLE, _events(spark, 0, first_rows))
    s.first_version = first.version
    out(f"[lake] wrote {first.rows} rows in {first.files} files -> {DEMO_TABLE} v{first.version}")
    between = _dt.datetime.now(_dt.timezone.utc)  # after the first commit, before the second
    time.sleep(0.05)
    second = lake.append(DEMO_TABLE, _events(spark, first_rows, more_rows))
    s.latest_version = second.version
    out(f"[lake] appended {second.rows} rows -> {DEMO_TABLE} v{second.version}")

    s.rows_first_version = lake.read(DEMO_TABLE, version=first.version).count()
    at = between
    s.rows_at_timestamp = lake.read(DEMO_TABLE, timestamp=at).count()
    s.rows_latest = lake.read(DEMO_TABLE).count()
    out(f"[lake] time travel: v{first.version} has {s.rows_first_version} rows, "
        f"as of {at.isoformat()} {s.rows_at_timestamp}, latest v{second.version} {s.rows_latest}")

    lake.create_table(DEMO_COPY, DEMO_SCHEMA, partition_by=["bucket"])
    lake.overwrite(DEMO_COPY, spark.createDataFrame([], DEMO_SCHEMA))
    checkpoint = tempfile.mkdtemp(prefix="kraft-replay-demo-ckpt-")
    try:
        stream = lake.read_stream(DEMO_TABLE, max_files_per_trigger=4)
        query = lake.write_stream(stream, DEMO_COPY, checkpoint=checkpoint, trigger={"availableNow": True})
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"demo stream failed: {query.exception()}")
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    s.rows_streamed = lake.read(DEMO_COPY).count()
    out(f"[lake] streamed {DEMO_TABLE} -> {DEMO_COPY}: {s.rows_streamed} rows (exactly-once sink)")

    s.tables = [(t.name, t.version, t.num_rows) for t in lake.tables()]
    return s


SAMPLES = samples_dir()
SAMPLE_CLUSTER = "demo-node1"
SAMPLE_TEXT_CLUSTER = "demo-dumptext"


def ingest_demo(spark: SparkSession, lake, out: Callable[[str], None] = print) -> bool:
    """Ingest the samples (binary and dump text), re-ingest them, and query bronze with SQL.

    Returns True when the second ingest wrote nothing (idempotent) and bronze holds what the
    first one reported.
    """
    from kraft_replay.ingest.pipeline import run_ingest

    node = SAMPLES / "node1"
    text = SAMPLES / "dumplog" / "cluster-metadata-decoder.txt"
    if not node.is_dir() or not text.is_file():
        raise FileNotFoundError(f"sample data missing under {SAMPLES}; regenerate with tools/make_samples.py")
    first = run_ingest(spark, lake, [str(node)], cluster_id=SAMPLE_CLUSTER, say=out)
    for line in first.lines():
        out(f"[ingest] {line}")
    text_run = run_ingest(spark, lake, [str(text)], cluster_id=SAMPLE_TEXT_CLUSTER, say=out)
    for line in text_run.lines():
        out(f"[ingest] {line}")
    again = run_ingest(spark, lake, [str(node)], cluster_id=SAMPLE_CLUSTER, say=lambda _m: None)
    rewritten = sum(again.rows.values())
    out(f"[ingest] re-ingest of the same files: {len(again.skipped)} skipped, {rewritten} rows written")

    lake.register_views()
    out("[sql] records per type in metadata_log, per cluster:")
    by_type = spark.sql(
        "SELECT cluster_id, record_type, count(*) AS records FROM metadata_log "
        "GROUP BY cluster_id, record_type ORDER BY cluster_id, records DESC"
    ).collect()
    for row in by_type:
        out(f"  {row.cluster_id:<14} {row.record_type:<36} {row.records:>6}")
    out("[sql] leader elections (PartitionChangeRecord with a leader) in the binary sample:")
    elections = spark.sql(
        "SELECT l.offset, t.topic.name AS topic, l.partition_change.partition_id AS partition, "
        "l.partition_change.leader AS new_leader, l.batch_leader_epoch AS raft_epoch "
        "FROM metadata_log l JOIN (SELECT cluster_id, topic FROM metadata_log WHERE topic IS NOT NULL) t "
        "ON l.cluster_id = t.cluster_id AND l.partition_change.topic_id = t.topic.topic_id "
        f"WHERE l.cluster_id = '{SAMPLE_CLUSTER}' AND l.partition_change.leader <> -2 ORDER BY l.offset"
    ).collect()
    for row in elections:
        out(f"  offset {row.offset:>4}: {row.topic}-{row.partition} leader -> {row.new_leader} (raft epoch {row.raft_epoch})")
    log_rows = spark.sql(f"SELECT count(*) AS n FROM metadata_log WHERE cluster_id = '{SAMPLE_CLUSTER}'").first().n
    written_first = first.rows.get("metadata_log", 0)
    # On a fresh lake the first run wrote every row; on a rerun it skipped the files and wrote none.
    return rewritten == 0 and log_rows > 0 and written_first in (0, log_rows)


def replay_demo(spark: SparkSession, lake, out: Callable[[str], None] = print) -> bool:
    """Replay the samples' bronze rows into the silver tables and print the binary sample's image at
    its last offset. Returns True when the image holds the sample's topics, partitions and brokers."""
    from kraft_replay.replay.images import image, image_json, resolve_offset
    from kraft_replay.replay.run import run_replay

    summary = run_replay(spark, lake, say=lambda line: out(f"[replay] {line.strip()}"))
    for line in summary.lines():
        out(f"[replay] {line}")
    at = resolve_offset(lake, SAMPLE_CLUSTER)
    doc = image_json(image(lake, SAMPLE_CLUSTER, offset=at), SAMPLE_CLUSTER, at)
    counts = ", ".join(f"{len(v)} {k}" for k, v in doc.items() if isinstance(v, list) and v)
    out(f"[image] {SAMPLE_CLUSTER} as of offset {at}: metadata.version {doc.get('metadata_version')}; {counts}")
    for p in doc["partitions"][:5]:
        out(f"  {p['topic_name']}-{p['partition_id']}: leader {p['leader']} epoch {p['leader_epoch']}, isr {p['isr']}")
    return bool(doc["topics"] and doc["partitions"] and doc["brokers"])


def run_demo(spark: SparkSession, lake, out: Callable[[str], None] = print) -> int:
    """The whole demo; returns the process exit code (0 when every check held)."""
    out(f"kraft-replay demo: lake {lake.root} (backend {lake.backend})")
    if lake.exists("metadata_log"):
        out("[ingest] lake already holds bronze tables: this run shows re-ingest as a no-op")
    ingest_ok = ingest_demo(spark, lake, out)
    replay_ok = replay_demo(spark, lake, out)
    summary = lake_demo(spark, lake, out)
    out("summary:")
    for name, version, rows in summary.tables:
        out(f"  {name:<28} version {version:>4}  rows {rows:>10}")
    ok = summary.ok and ingest_ok and replay_ok
    out("demo " + ("OK" if ok else "FAILED: read-back counts disagree" if not summary.ok or not ingest_ok
                   else "FAILED: the replayed image is empty"))
    return 0 if ok else 1


def _run(args: argparse.Namespace) -> int:
    from kraft_replay.serve.common import open_lake

    spark, lake = open_lake(args)
    return run_demo(spark, lake)


def register(sub) -> None:
    p = sub.add_parser("demo", help="ingest the sample node and dump text, query bronze, replay it into the silver "
                                    "tables and print its image, and exercise the lake",
                       description="A short end-to-end run on the embedded default: the samples shipped with "
                                   "kraft-replay ingested, queried in SQL, replayed, and the lake exercised.",
                       epilog="example:\n  kraft-replay demo --lake ./lake\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=_run)
