"""Helpers shared by the lake tests and their helper jobs (a uniquely named module, so it never
clashes with other test folders' conftest modules)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

ROOT = Path(__file__).resolve().parents[2]

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
