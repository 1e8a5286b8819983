"""Benchmark: the embedded lake backend vs Spark's plain Parquet, same DataFrame, one run.

Writes ``--rows`` rows x 8 columns (partitioned by one of them) through ``Lake.append`` and through
``df.write.partitionBy(...).parquet``, then reads each back in full (every column materialised
through Spark's ``noop`` sink). Prints both timings and the ratio lake / plain for write and read
(target: <= 1.25 both ways). ``--stream`` also times the lake's streaming source over the same
table, and the per-row shape it avoids (one partition per file, one Python tuple per row).

Run it alone: ``flock /tmp/kraft-heavy.lock .venv/bin/python bench/lake.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kraft_replay.lake import Lake
from kraft_replay.spark import get_spark


def source(spark: SparkSession, rows: int, parts: int) -> DataFrame:
    """8 columns of mixed types, deterministic in ``id``."""
    return spark.range(0, rows, 1, max(2, spark.sparkContext.defaultParallelism)).select(
        F.col("id"),
        (F.col("id") % 1000).cast("int").alias("small"),
        (F.col("id") * 7919 % 1_000_003).alias("big"),
        (F.col("id") / 3.0).alias("ratio"),
        F.concat(F.lit("broker-"), (F.col("id") % 97).cast("string")).alias("label"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id") % 86_400).alias("at"),
        (F.col("id") % 2 == 0).alias("even"),
        (F.col("id") % parts).cast("int").alias("part"),
    )


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def materialise(df: DataFrame) -> None:
    df.write.format("noop").mode("overwrite").save()


def _per_row_source(spark: SparkSession):
    """The shape to avoid, for comparison: one partition per file, Python tuples row by row."""
    import pyarrow.parquet as pq
    from pyspark.sql.datasource import DataSourceStreamReader

    from kraft_replay.lake.stream import FileBin, LakeStreamReader, LakeStreamSource

    class PerRowReader(LakeStreamReader):
        def partitions(self, start, end):
            return [FileBin([(f"{self._path}/{f.path}", f.partition_values)]) for f in self._between(start, end)]

        def read(self, partition):
            names = self.schema.fieldNames()
            for path, pv in partition.files:
                table = pq.read_table(path)
                cols = [table.column(n).to_pylist() if n in table.column_names else
                        [int(pv[n])] * table.num_rows for n in names]
                yield from zip(*cols)

    class PerRowSource(LakeStreamSource):
        @classmethod
        def name(cls) -> str:
            return "kraft_replay_lake_per_row"

        def streamReader(self, schema) -> DataSourceStreamReader:
            return PerRowReader(schema, dict(self.options))

    spark.dataSource.register(PerRowSource)
    return PerRowSource.name()


def stream_once(lake: Lake, name: str, fmt: str | None, work: Path) -> float:
    spark = lake.spark
    df = lake.read_stream(name)
    if fmt is not None:  # same options, other source implementation
        snap = lake._impl.snapshot(name)
        df = (spark.readStream.format(fmt).option("uri", f"{lake.root}/{name}").option("schema", snap.schema.json())
              .option("partition_by", json.dumps(snap.partition_by)).load())
    ck = tempfile.mkdtemp(dir=work)
    q = df.writeStream.format("noop").option("checkpointLocation", ck).trigger(availableNow=True).start()
    t0 = time.perf_counter()
    q.awaitTermination()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--parts", type=int, default=8, help="distinct values of the partition column")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", default="local")
    ap.add_argument("--stream", action="store_true", help="also time the streaming source")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()

    spark = get_spark(args.profile)
    work = Path(args.work or tempfile.mkdtemp(prefix="kraft-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    from kraft_replay.config import load_profile

    target = load_profile(args.profile).lake.target_file_rows
    df = source(spark, args.rows, args.parts)
    print(f"bench/lake.py: {args.rows:,} rows x {len(df.columns)} columns, partitioned by part ({args.parts} values), "
          f"target_file_rows={target:,}, {spark.sparkContext.defaultParallelism} cores, repeat={args.repeat}")
    materialise(df)  # warm up the JVM and the code paths, including both Parquet write paths
    warm = Lake(str(work / "warm"), spark, backend="deltars", target_file_rows=target)
    warm.create_table("w", df.schema, partition_by=["part"])
    warm.append("w", df.limit(100_000))
    df.limit(100_000).write.mode("overwrite").partitionBy("part").parquet(str(work / "warm_plain"))
    materialise(warm.read("w"))
    materialise(spark.read.parquet(str(work / "warm_plain")))

    results: dict[str, list[float]] = {"lake_write": [], "plain_write": [], "lake_read": [], "plain_read": []}
    lake = None
    for i in range(args.repeat):
        shutil.rmtree(work / "lake", ignore_errors=True)
        shutil.rmtree(work / "plain", ignore_errors=True)
        lake = Lake(str(work / "lake"), spark, backend="deltars", target_file_rows=target)
        lake.create_table("bench", df.schema, partition_by=["part"])
        plain_path = str(work / "plain")

        def lake_write() -> None:
            lake.append("bench", df)

        def plain_write() -> None:
            (df.write.mode("overwrite").option("maxRecordsPerFile", target).partitionBy("part").parquet(plain_path))

        order = [("lake_write", lake_write), ("plain_write", plain_write)]
        for key, fn in (order if i % 2 == 0 else order[::-1]):
            results[key].append(timed(fn))
        reads = [("lake_read", lambda: materialise(lake.read("bench"))),
                 ("plain_read", lambda: materialise(spark.read.parquet(plain_path)))]
        for key, fn in (reads if i % 2 == 0 else reads[::-1]):
            results[key].append(timed(fn))
        assert lake.read("bench").count() == args.rows == spark.read.parquet(plain_path).count()
        print(f"  run {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in results.items()), flush=True)

    med = {k: statistics.median(v) for k, v in results.items()}
    files = len(lake._impl.snapshot("bench").files) if lake else 0
    print(f"write: lake {med['lake_write']:.2f}s  plain parquet {med['plain_write']:.2f}s  "
          f"ratio {med['lake_write'] / med['plain_write']:.3f}  ({files} files)")
    print(f"read:  lake {med['lake_read']:.2f}s  plain parquet {med['plain_read']:.2f}s  "
          f"ratio {med['lake_read'] / med['plain_read']:.3f}")
    summary = {"rows": args.rows, **{k: round(v, 3) for k, v in med.items()},
               "write_ratio": round(med["lake_write"] / med["plain_write"], 3),
               "read_ratio": round(med["lake_read"] / med["plain_read"], 3)}
    if args.stream and lake is not None:
        summary["stream_arrow_bins"] = round(stream_once(lake, "bench", None, work), 3)
        print(f"stream (arrow batches, file bins): {summary['stream_arrow_bins']:.2f}s for {args.rows:,} rows")
        per_row = _per_row_source(spark)
        summary["stream_per_row"] = round(stream_once(lake, "bench", per_row, work), 3)
        print(f"stream (one partition per file, row tuples): {summary['stream_per_row']:.2f}s")
    print(json.dumps(summary))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
