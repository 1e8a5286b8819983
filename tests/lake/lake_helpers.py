"""Helpers shared by the lake tests and their helper jobs (a uniquely named module, so it never
clashes with other test folders' conftest modules)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

ROOT = Path(__file__).resolve().parents[2]

#: the lake's backends, each test taking ``lake`` (or ``backend``) runs on (conftest.py)
BACKENDS = ("deltars", "delta-spark")

EVENTS = StructType([
    StructField("id", LongType(), False),
    StructField("name", StringType()),
    StructField("at", TimestampType()),
    StructField("part", IntegerType()),
])


def events(spark: SparkSession, start: int, stop: int, parts: int = 3, slices: int = 2) -> DataFrame:
    """Rows ``id`` in [start, stop) with a deterministic name, timestamp and partition value."""
    return spark.range(start, stop, 1, slices).select(
        F.col("id"),
        F.concat(F.lit("n"), F.col("id").cast("string")).alias("name"),
        F.timestamp_seconds(F.col("id") + F.lit(1_700_000_000)).alias("at"),
        (F.col("id") % parts).cast("int").alias("part"),
    )


def run_job(script: Path, *args: str, **popen) -> subprocess.Popen:
    """Start a helper job in a separate Python process (its own Spark session)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "lib"), str(ROOT / "tests" / "lake")])
    return subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=str(ROOT), **popen)


class DataFile(NamedTuple):
    path: str
    partition_values: dict
    num_records: int


def data_files(lake, name: str, version: int | None = None) -> list:
    """The data files of a table's snapshot (its latest, or ``version``) as delta-rs reads its log,
    whichever backend wrote it: ``(path, partition_values, num_records)`` for each file."""
    import pyarrow as pa

    table = delta_table(lake, name, version)
    add = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    parts = table.metadata().partition_columns
    return [DataFile(a["path"], {p: (None if a[f"partition.{p}"] is None else str(a[f"partition.{p}"])) for p in parts},
                     a["num_records"]) for a in add]


def delta_table(lake, name: str, version: int | None = None):
    """delta-rs's view of a table (``deltalake.DeltaTable``), whichever backend wrote it."""
    from deltalake import DeltaTable

    return DeltaTable(f"{lake.root}/{name}", version=version)
