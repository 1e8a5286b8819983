"""Staged writes: pyarrow-written files committed through the lake (``Lake.new_staging`` / ``commit_staged``)."""

from __future__ import annotations

import datetime as dt
import pickle
import threading

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from lake_helpers import EVENTS, events

from kraft_replay.lake import SchemaMismatchError
from kraft_replay.lake.staged import write_staged_arrow

pytestmark = pytest.mark.embedded  # the embedded backend's own machinery (tests/lake/conftest.py)


def arrow_events(start: int, stop: int, parts: int = 3) -> pa.Table:
    ids = list(range(start, stop))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"n{i}" for i in ids]),
        "at": pa.array([dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i)
                        for i in ids], pa.timestamp("us", tz="UTC")),
        "part": pa.array([i % parts for i in ids], pa.int32()),
    })


def test_round_trip_through_lake_and_independent_reader(spark, lake, events_table):
    staged = lake.new_staging(events_table)
    info = pickle.loads(pickle.dumps(staged))  # what a mapInArrow closure would carry
    paths = write_staged_arrow(info, arrow_events(0, 700), part_id=0)
    paths += write_staged_arrow(info, iter(arrow_events(700, 1200).to_batches(max_chunksize=100)), part_id=1)
    # 3 partitions; target_file_rows=500 splits part 0 of task 0 (234 rows) not at all, so every file <= 500 rows
    assert all("/part=" in p for p in paths)
    assert lake.read(events_table).count() == 0  # nothing visible before the commit
    res = lake.commit_staged(staged)
    assert res.rows == 1200 and res.files == len(paths) and not res.skipped
    assert_df_equality(lake.read(events_table), events(spark, 0, 1200), ignore_row_order=True,
                       ignore_nullable=True)
    other = DeltaTable(f"{lake.root}/{events_table}").to_pyarrow_table()
    assert other.num_rows == 1200
    assert sorted(other.column("id").to_pylist()) == list(range(1200))
    assert set(other.filter(pa.compute.equal(other.column("part"), 2)).column("id").to_pylist()) == \
        {i for i in range(1200) if i % 3 == 2}
    # footer statistics reached the log: partition pruning on read works
    assert lake.read(events_table, where="part = 1").count() == 400


def test_files_respect_target_rows(lake, events_table):
    staged = lake.new_staging(events_table)
    paths = write_staged_arrow(staged, arrow_events(0, 3000, parts=1), part_id=7)
    assert len(paths) == 6  # 3000 rows, target_file_rows=500
    res = lake.commit_staged(staged)
    assert res.files == 6 and res.rows == 3000


def test_schema_mismatch_rejected_nothing_committed(lake, events_table):
    import pyarrow.parquet as pq

    version = lake.version(events_table)
    staged = lake.new_staging(events_table)
    write_staged_arrow(staged, arrow_events(0, 10), part_id=0)
    bad = pa.table({"id": pa.array(["x"]), "name": pa.array(["n"]),
                    "at": pa.array([None], pa.timestamp("us", tz="UTC"))})
    fs = staged.filesystem()
    fs.create_dir(f"{staged.path}/part=0", recursive=True)
    pq.write_table(bad, f"{staged.path}/part=0/rogue.parquet", filesystem=fs)
    with pytest.raises(SchemaMismatchError, match=r"table 'events'.*column 'id'.*rogue\.parquet"):
        lake.commit_staged(staged)
    assert lake.version(events_table) == version
    assert lake.read(events_table).count() == 0
    assert fs.get_file_info(staged.path).type == pa.fs.FileType.NotFound  # staging removed on failure


def test_worker_side_type_check(lake, events_table):
    staged = lake.new_staging(events_table)
    with pytest.raises(SchemaMismatchError, match="column 'part'"):
        write_staged_arrow(staged, arrow_events(0, 5).drop(["part"]), part_id=0)


def test_txn_idempotent(lake, events_table):
    first = lake.new_staging(events_table)
    write_staged_arrow(first, arrow_events(0, 100), part_id=0)
    assert lake.commit_staged(first, txn=("app", 3)).rows == 100
    again = lake.new_staging(events_table)
    write_staged_arrow(again, arrow_events(0, 100), part_id=0)
    res = lake.commit_staged(again, txn=("app", 3))
    assert res.skipped and res.version is None
    assert again.filesystem().get_file_info(again.path).type == pa.fs.FileType.NotFound
    assert lake.read(events_table).count() == 100


def test_commit_staged_replace_where_swaps_partitions_in_one_commit(spark, lake, events_table):
    first = lake.new_staging(events_table)
    write_staged_arrow(first, arrow_events(0, 300), part_id=0)          # parts 0, 1, 2
    lake.commit_staged(first)
    before = lake.version(events_table)
    again = lake.new_staging(events_table)
    new_rows = arrow_events(1000, 1090).filter(pa.compute.equal(arrow_events(1000, 1090).column("part"), 1))
    write_staged_arrow(again, new_rows, part_id=0)
    res = lake.commit_staged(again, replace_where="part = 1")
    assert lake.version(events_table) == before + 1 and res.removed_files >= 1 and res.rows == 30
    ids = sorted(r["id"] for r in lake.read(events_table).select("id").collect())
    assert ids == sorted([i for i in range(300) if i % 3 != 1] + [i for i in range(1000, 1090) if i % 3 == 1])
    # the previous version is still there for time travel
    assert lake.read(events_table, version=before).count() == 300


def test_commit_staged_replace_where_rejects_rows_outside_predicate(lake, events_table):
    from kraft_replay.lake import InvalidArgumentError

    staged = lake.new_staging(events_table)
    write_staged_arrow(staged, arrow_events(0, 30), part_id=0)          # parts 0, 1, 2
    version = lake.version(events_table)
    with pytest.raises(InvalidArgumentError, match="does not match"):
        lake.commit_staged(staged, replace_where="part = 1")
    assert lake.version(events_table) == version
    assert staged.filesystem().get_file_info(staged.path).type == pa.fs.FileType.NotFound


def test_abort_leaves_nothing(lake, events_table):
    version = lake.version(events_table)
    staged = lake.new_staging(events_table)
    write_staged_arrow(staged, arrow_events(0, 50), part_id=0)
    lake.abort_staged(staged)
    assert lake.version(events_table) == version
    assert lake.read(events_table).count() == 0
    assert staged.filesystem().get_file_info(staged.path).type == pa.fs.FileType.NotFound


def test_uncommitted_staging_invisible_and_vacuumed(lake, events_table):
    staged = lake.new_staging(events_table)
    write_staged_arrow(staged, arrow_events(0, 50), part_id=0)  # then "crash": no commit
    assert lake.read(events_table).count() == 0
    assert DeltaTable(f"{lake.root}/{events_table}").to_pyarrow_table().num_rows == 0
    lake.vacuum(events_table, retain_hours=0)
    assert staged.filesystem().get_file_info(staged.path).type == pa.fs.FileType.NotFound


def test_concurrent_commit_staged_and_append_both_land(spark, lake, events_table):
    staged = lake.new_staging(events_table)
    write_staged_arrow(staged, arrow_events(0, 1000), part_id=0)
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            lake.commit_staged(staged, txn=("staged-job", 1))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=commit)
    t.start()
    lake.append(events_table, events(spark, 1000, 1600))
    t.join()
    assert not errors
    ids = sorted(r["id"] for r in lake.read(events_table).select("id").collect())
    assert ids == list(range(1600))


def test_null_and_escaped_partition_values(spark, lake):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("k", StringType()), StructField("v", LongType())])
    lake.create_table("odd", schema, partition_by=["k"])
    staged = lake.new_staging("odd")
    write_staged_arrow(staged, pa.table({"k": pa.array(["a/b", None, "x=y%", "a/b"]),
                                         "v": pa.array([1, 2, 3, 4], pa.int64())}), part_id=0)
    lake.commit_staged(staged)
    got = {(r["k"], r["v"]) for r in lake.read("odd").collect()}
    assert got == {("a/b", 1), (None, 2), ("x=y%", 3), ("a/b", 4)}
    other = DeltaTable(f"{lake.root}/odd").to_pyarrow_table()
    assert set(zip(other.column("k").to_pylist(), other.column("v").to_pylist())) == got


def test_copy_commit_used_by_delta_spark_backend(spark, lake, events_table):
    """The delta-spark route (read staged files with Spark, append with the txn, delete the staging
    dir) exercised through the embedded backend's own append, the only Delta writer available here."""
    from kraft_replay.lake import staged as staged_mod

    staged = lake.new_staging(events_table)
    write_staged_arrow(staged, arrow_events(0, 300), part_id=0)
    res = staged_mod._commit_by_copy(lake._impl, staged, ("copy-job", 1))
    assert res.rows == 300
    assert staged.filesystem().get_file_info(staged.path).type == pa.fs.FileType.NotFound
    assert_df_equality(lake.read(events_table), events(spark, 0, 300), ignore_row_order=True, ignore_nullable=True)
    again = lake.new_staging(events_table)
    write_staged_arrow(again, arrow_events(0, 300), part_id=0)
    assert staged_mod._commit_by_copy(lake._impl, again, ("copy-job", 1)).skipped
    assert lake.read(events_table).count() == 300


def test_dictionary_encoding_only_for_string_columns(lake, events_table):
    import pyarrow.parquet as pq

    staged = lake.new_staging(events_table)
    paths = write_staged_arrow(staged, arrow_events(0, 400, parts=1), part_id=0)
    meta = pq.ParquetFile(paths[0], filesystem=staged.filesystem()).metadata
    encodings = {meta.row_group(0).column(i).path_in_schema: set(meta.row_group(0).column(i).encodings)
                 for i in range(meta.num_columns)}
    assert "RLE_DICTIONARY" in encodings["name"]
    assert not any("DICTIONARY" in e for e in encodings["id"] | encodings["at"])
    lake.commit_staged(staged)
    assert lake.read(events_table).count() == 400
