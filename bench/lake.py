"""Benchmark: the lake's two backends (embedded ``deltars``, native ``delta-spark``) and Spark's plain
Parquet side by side, same DataFrame, one run.

Writes ``--rows`` rows x 8 columns (partitioned by one of them) through ``Lake.append`` on each backend
and through ``df.write.partitionBy(...).parquet``, then reads each back in full (every column
materialised through Spark's ``noop`` sink), the order alternating between repetitions. Prints each
backend's timings, its ratio to plain Parquet (target: <= 1.25 both ways) and native / embedded.
``--stream`` also times each backend's streaming source over the same table (the lake's own on the
embedded backend, Delta's on delta-spark), and the per-row shape the lake's avoids (one partition per
file, one Python tuple per row).

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

from deltalake import DeltaTable
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
            return [FileBin([(f"{self._path}/{f.path}", f.partition_values, v)]) for f, v in self._between(start, end)]

        def read(self, partition):
            names = self.schema.fieldNames()
            for path, pv, _version in partition.files:
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
    from kraft_replay.spark.delta_jars import installed_jars

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--parts", type=int, default=8, help="distinct values of the partition column")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", default="local")
    ap.add_argument("--backends", default="deltars,delta-spark" if installed_jars() else "deltars",
                    help="lake backends to time side by side (default: both when set-up fetched Delta's jars)")
    ap.add_argument("--stream", action="store_true", help="also time the streaming source")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or any(b not in ("deltars", "delta-spark") for b in backends):
        ap.error(f"--backends: a comma-separated list of deltars and delta-spark, got {args.backends!r}")

    spark = get_spark(args.profile, delta="delta-spark" in backends)
    work = Path(args.work or tempfile.mkdtemp(prefix="kraft-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    from kraft_replay.config import load_profile

    target = load_profile(args.profile).lake.target_file_rows
    df = source(spark, args.rows, args.parts)
    print(f"bench/lake.py: {args.rows:,} rows x {len(df.columns)} columns, partitioned by part ({args.parts} values), "
          f"target_file_rows={target:,}, {spark.sparkContext.defaultParallelism} cores, repeat={args.repeat}, "
          f"backends {', '.join(backends)}")
    materialise(df)  # warm up the JVM and the code paths, including every write path
    df.limit(100_000).write.mode("overwrite").partitionBy("part").parquet(str(work / "warm_plain"))
    materialise(spark.read.parquet(str(work / "warm_plain")))
    for b in backends:
        warm = Lake(str(work / f"warm-{b}"), spark, backend=b, target_file_rows=target)
        warm.create_table("w", df.schema, partition_by=["part"])
        warm.append("w", df.limit(100_000))
        materialise(warm.read("w"))

    results: dict[str, list[float]] = {f"{k}_{op}": [] for k in ["plain", *backends] for op in ("write", "read")}
    lakes: dict[str, Lake] = {}
    plain_path = str(work / "plain")
    for i in range(args.repeat):
        shutil.rmtree(work / "plain", ignore_errors=True)
        for b in backends:
            shutil.rmtree(work / b, ignore_errors=True)
            lakes[b] = Lake(str(work / b), spark, backend=b, target_file_rows=target)
            lakes[b].create_table("bench", df.schema, partition_by=["part"])
        writes = [("plain_write", lambda: df.write.mode("overwrite").option("maxRecordsPerFile", target)
                   .partitionBy("part").parquet(plain_path))]
        reads = [("plain_read", lambda: materialise(spark.read.parquet(plain_path)))]
        for b in backends:
            writes.append((f"{b}_write", lambda lk=lakes[b]: lk.append("bench", df)))
            reads.append((f"{b}_read", lambda lk=lakes[b]: materialise(lk.read("bench"))))
        for key, fn in (writes if i % 2 == 0 else writes[::-1]):  # alternate the order between runs
            results[key].append(timed(fn))
        for key, fn in (reads if i % 2 == 0 else reads[::-1]):
            results[key].append(timed(fn))
        assert all(lk.read("bench").count() == args.rows for lk in lakes.values())
        assert spark.read.parquet(plain_path).count() == args.rows
        print(f"  run {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in results.items()), flush=True)

    med = {k: statistics.median(v) for k, v in results.items()}
    summary: dict[str, float | int] = {"rows": args.rows, **{k: round(v, 3) for k, v in med.items()}}
    for b in backends:
        files = len(DeltaTable(f"{lakes[b].root}/bench").file_uris())
        for op in ("write", "read"):
            summary[f"{b}_{op}_ratio"] = round(med[f"{b}_{op}"] / med[f"plain_{op}"], 3)
        print(f"{b:12s} write {med[f'{b}_write']:.2f}s (x{summary[f'{b}_write_ratio']:.3f} plain parquet), "
              f"read {med[f'{b}_read']:.2f}s (x{summary[f'{b}_read_ratio']:.3f}), {files} files")
    print(f"{'plain':12s} write {med['plain_write']:.2f}s, read {med['plain_read']:.2f}s")
    if len(backends) == 2:
        for op in ("write", "read"):
            summary[f"native_vs_embedded_{op}"] = round(med[f"delta-spark_{op}"] / med[f"deltars_{op}"], 3)
        print(f"delta-spark / deltars: write x{summary['native_vs_embedded_write']:.3f}, "
              f"read x{summary['native_vs_embedded_read']:.3f}")
    if args.stream:
        for b in backends:
            summary[f"{b}_stream"] = round(stream_once(lakes[b], "bench", None, work), 3)
            print(f"stream ({b}: {'the lake' if b == 'deltars' else 'Delta'}'s source): "
                  f"{summary[f'{b}_stream']:.2f}s for {args.rows:,} rows")
        if "deltars" in lakes:
            per_row = _per_row_source(spark)
            summary["stream_per_row"] = round(stream_once(lakes["deltars"], "bench", per_row, work), 3)
            print(f"stream (one partition per file, row tuples): {summary['stream_per_row']:.2f}s")
    print(json.dumps(summary))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
