"""Bad input and faults: one-line LakeErrors naming table/path and fix; nothing committed."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from lake_helpers import EVENTS, events
from kraft_replay.lake import (
    CorruptTableError,
    InvalidArgumentError,
    Lake,
    LakeError,
    LakeNotWritableError,
    SchemaMismatchError,
    UnknownTableError,
)


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and msg
    assert isinstance(exc.value, LakeError)
    return msg


def table_files(lake: Lake, name: str) -> list[str]:
    root = Path(lake.root) / name
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts)


def test_unknown_table(lake, events_table):
    with pytest.raises(UnknownTableError) as exc:
        lake.read("nope")
    msg = one_line(exc)
    assert "'nope'" in msg and str(Path(lake.root) / "nope") in msg and "events" in msg


@pytest.mark.parametrize(
    ("mutate", "column"),
    [
        (lambda df: df.drop("name"), "name"),
        (lambda df: df.withColumn("part", F.col("part").cast("string")), "part"),
        (lambda df: df.withColumn("extra", F.lit(1)), "extra"),
    ],
)
def test_schema_mismatch_names_table_and_column(spark, lake, events_table, mutate, column):
    lake.append(events_table, events(spark, 0, 10))
    with pytest.raises(SchemaMismatchError) as exc:
        lake.append(events_table, mutate(events(spark, 10, 20)))
    msg = one_line(exc)
    assert "'events'" in msg and f"'{column}'" in msg
    assert lake.version(events_table) == 1 and lake.read(events_table).count() == 10


def test_columns_in_other_order_are_accepted(spark, lake, events_table):
    df = events(spark, 0, 10)
    lake.append(events_table, df.select(*reversed(df.columns)))
    assert lake.read(events_table).columns == EVENTS.fieldNames()
    assert lake.read(events_table).where("name = concat('n', cast(id as string))").count() == 10


def test_not_null_violation_commits_nothing_and_cleans_up(spark, lake, events_table):
    bad = events(spark, 0, 10).withColumn("id", F.when(F.col("id") == 3, None).otherwise(F.col("id")))
    with pytest.raises(SchemaMismatchError) as exc:
        lake.append(events_table, bad)
    assert "'id'" in one_line(exc) and "NOT NULL" in str(exc.value)
    assert lake.version(events_table) == 0
    if lake.backend == "delta-spark":  # Spark's aborted tasks may leave files no commit names: VACUUM's to delete
        lake.vacuum(events_table, retain_hours=0)
    assert table_files(lake, events_table) == []


def test_missing_delta_log(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 10))
    shutil.rmtree(Path(lake.root) / events_table / "_delta_log")
    with pytest.raises(CorruptTableError) as exc:
        lake.read(events_table)
    msg = one_line(exc)
    assert "_delta_log" in msg and str(Path(lake.root) / events_table) in msg


def test_corrupt_delta_log(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 10))
    (Path(lake.root) / events_table / "_delta_log" / "00000000000000000001.json").write_text("{not json\n")
    if lake.backend == "delta-spark":  # as a new process finds it: Delta keeps a table's log state in memory
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    with pytest.raises(CorruptTableError) as exc:
        lake.read(events_table)
    assert "'events'" in one_line(exc)
    if lake.backend == "deltars":  # Delta's blind append (delta-spark) reads no commit before its own
        with pytest.raises(CorruptTableError):
            lake.append(events_table, events(spark, 0, 10))


def test_lake_root_not_writable(spark, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    lake = Lake(str(blocker / "lake"), spark, backend="deltars")
    with pytest.raises(LakeNotWritableError) as exc:
        lake.create_table("t", EVENTS)
    assert str(blocker / "lake") in one_line(exc)


@contextlib.contextmanager
def read_only_dir(path: Path):
    """Make ``path`` unwritable for this process: mode 0555, plus the immutable attribute when running
    as root (root ignores permission bits)."""
    mode = path.stat().st_mode
    path.chmod(0o555)
    immutable = os.geteuid() == 0
    if immutable:
        subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(mode)


def test_existing_table_on_a_read_only_lake(spark, lake, events_table):
    """An append or a staged write to a table whose directory cannot be written fails on the driver
    with one line naming the table, and the table is unchanged."""
    lake.append(events_table, events(spark, 0, 10))
    before = lake.version(events_table)
    table_dir = Path(lake.root) / events_table
    with read_only_dir(table_dir):
        with pytest.raises(LakeNotWritableError) as exc:
            lake.append(events_table, events(spark, 10, 20))
        msg = one_line(exc)
        assert f"'{events_table}'" in msg and str(table_dir) in msg
        with pytest.raises(LakeNotWritableError):
            lake.new_staging(events_table)
    assert lake.version(events_table) == before
    assert lake.read(events_table).count() == 10


def test_bad_arguments(spark, lake, events_table):
    cases = [
        lambda: lake.create_table("bad-name", EVENTS),
        lambda: lake.create_table("t2", EVENTS, partition_by=["nope"]),
        lambda: lake.create_table("t3", StructType([StructField("kr_write", LongType())])),
        lambda: lake.append(events_table, events(spark, 0, 1), txn=("", 1)),
        lambda: lake.append(events_table, events(spark, 0, 1), txn=("app", -1)),
        lambda: lake.overwrite(events_table, events(spark, 0, 1), replace_where="id > 3"),
        lambda: lake.read(events_table, version=0, timestamp="2020-01-01T00:00:00Z"),
        lambda: lake.merge(events_table, events(spark, 0, 1), keys=["nope"]),
        lambda: lake.read_stream(events_table, max_files_per_trigger=0),
        lambda: Lake(lake.root, spark, backend="bogus"),  # type: ignore[arg-type]
    ]
    for case in cases:
        with pytest.raises(InvalidArgumentError) as exc:
            case()
        one_line(exc)


def test_time_travel_out_of_range(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 10))
    with pytest.raises(LakeError) as exc:
        lake.read(events_table, version=9)
    assert "version 9" in one_line(exc)
    with pytest.raises(LakeError) as exc:
        lake.read(events_table, timestamp="1999-01-01T00:00:00Z")
    one_line(exc)


def test_lake_root_that_is_a_file_or_bad_uri(spark, tmp_path):
    blocker = tmp_path / "plain_file"
    blocker.write_text("x")
    with pytest.raises(LakeError) as exc:
        Lake(str(blocker), spark, backend="deltars").tables()
    assert str(blocker) in one_line(exc)
    with pytest.raises(InvalidArgumentError) as exc:
        Lake("nosuchscheme://bucket/lake", spark, backend="deltars")
    assert "nosuchscheme://bucket/lake" in one_line(exc)
