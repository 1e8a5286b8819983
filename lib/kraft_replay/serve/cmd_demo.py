"""``kraft-replay demo``: a short end-to-end run on the embedded default.

Lake part (:func:`lake_demo`): write a small table through the lake, append to it, read the first
version back by time travel (version and timestamp), stream the table into a copy through the
exactly-once sink, and print a summary. Later pipeline steps extend :func:`run_demo`.
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


def run_demo(spark: SparkSession, lake, out: Callable[[str], None] = print) -> int:
    """The whole demo; returns the process exit code (0 when every check held)."""
    out(f"kraft-replay demo: lake {lake.root} (backend {lake.backend})")
    summary = lake_demo(spark, lake, out)
    out("summary:")
    for name, version, rows in summary.tables:
        out(f"  {name:<28} version {version:>4}  rows {rows:>10}")
    out("demo " + ("OK" if summary.ok else "FAILED: read-back counts disagree"))
    return 0 if summary.ok else 1


def _run(args: argparse.Namespace) -> int:
    from kraft_replay.serve.common import open_lake

    spark, lake = open_lake(args)
    return run_demo(spark, lake)


def register(sub) -> None:
    p = sub.add_parser("demo", help="write, time-travel and stream a small table through the lake")
    p.set_defaults(func=_run)
