"""A lake opened driver only (``Lake(root, None)``, no JVM): runs, staged writes and their whole-table
overwrite, Arrow reads pruned by statistics, and ``merge_arrow`` — the same rows ``merge`` gives
through Spark; an operation that needs a DataFrame refuses in one line."""

from __future__ import annotations

import datetime as dt
import os
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from lake_helpers import EVENTS

from kraft_replay.lake import Lake, LakeError
from kraft_replay.lake.staged import write_staged_arrow

pytestmark = pytest.mark.embedded  # the embedded backend's own machinery (tests/lake/conftest.py)

T0 = dt.datetime(2026, 11, 24, 10, 0, tzinfo=dt.timezone.utc)


def _events(ids: list[int], name: str = "n") -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"{name}{i}" for i in ids]),
        "at": pa.array([T0 + dt.timedelta(seconds=i) for i in ids], pa.timestamp("us", tz="UTC")),
        "part": pa.array([i % 3 for i in ids], pa.int32()),
    })


def _sorted(t: pa.Table) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: (r["id"], r["name"]))


@pytest.fixture
def driver(tmp_path) -> Lake:
    lake = Lake(str(tmp_path / "lake"), None, backend="auto")
    lake.create_table("events", EVENTS, partition_by=["part"])
    return lake


def test_a_run_of_staged_writes_and_a_whole_table_overwrite(driver) -> None:
    assert driver.backend == "deltars"  # auto without a JVM
    driver.start_run("r1", ["events"])
    st = driver.new_staging("events")
    write_staged_arrow(st, _events(list(range(10))), part_id="a")
    driver.commit_staged(st, txn=("app-r1", 1))
    assert driver.read_arrow("events", ["id"]).num_rows == 0  # committed, not yet published
    assert driver.partitions("events") == []  # as readers see it: before the publish, nothing
    driver.publish(["events"], "r1")
    assert driver.read_arrow("events", ["id"]).num_rows == 10
    assert driver.partitions("events") == [{"part": "0"}, {"part": "1"}, {"part": "2"}]
    # only the files the statistics allow are read; the filter holds for the rows
    got = driver.read_arrow("events", ["id"], partitions=[("part", "=", 1)], filter=pc.field("id") >= 4)
    assert sorted(got.column("id").to_pylist()) == [4, 7]
    st = driver.new_staging("events")
    write_staged_arrow(st, _events([100, 101]), part_id="b")
    res = driver.commit_staged(st, overwrite=True)  # outside a run: a run of its own
    assert res.removed_files > 0 and sorted(driver.read_arrow("events", ["id"]).column("id").to_pylist()) == [100, 101]
    with pytest.raises(Exception, match="replace_where .* or overwrite"):
        driver.commit_staged(driver.new_staging("events"), replace_where="part = 1", overwrite=True)


def test_partition_stats_come_off_the_delta_log_as_readers_see_it(driver) -> None:
    """Rows and the greatest value per partition from the files' statistics, at the published version;
    None once a file has none (the caller counts with Spark)."""
    driver.start_run("r1", ["events"])
    st = driver.new_staging("events")
    write_staged_arrow(st, _events(list(range(10))), part_id="a")
    write_staged_arrow(st, _events([30, 31]), part_id="b")
    driver.commit_staged(st, txn=("app-r1", 1))
    assert driver.partition_stats("events", "part", "id") == {}  # committed, not yet published
    driver.publish(["events"], "r1")
    want = {"0": (5, 30), "1": (4, 31), "2": (3, 8)}  # ids 0..9, 30, 31 by id % 3
    assert driver.partition_stats("events", "part", "id") == want
    with pytest.raises(LakeError, match="'id' is not a partition column"):
        driver.partition_stats("events", "id", "id")
    first = driver.published_versions()["events"]
    st = driver.new_staging("events")
    write_staged_arrow(st, _events([40]), part_id="c")
    driver.commit_staged(st)  # outside a run: published at once
    assert driver.partition_stats("events", "part", "id")["1"] == (5, 40)
    assert driver.partition_stats("events", "part", "id", version=first) == want  # an older version named

    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    bare = driver.root + "/bare"  # a table whose one file was committed without statistics
    driver.create_table("bare", EVENTS, partition_by=["part"])
    os.makedirs(f"{bare}/part=1")
    pq.write_table(_events([4]).drop_columns(["part"]), f"{bare}/part=1/f.parquet")
    table = DeltaTable(bare)
    add = AddAction("part=1/f.parquet", os.path.getsize(f"{bare}/part=1/f.parquet"), {"part": "1"},
                    int(time.time() * 1000), True, "")
    table.create_write_transaction([add], mode="append", schema=table.schema())
    assert driver.partitions("bare") == [{"part": "1"}] and driver.partition_stats("bare", "part", "id") is None


def test_merge_arrow_equals_the_spark_merge(spark, driver, tmp_path) -> None:
    """The same merges on a driver-only lake and through Spark on another: equal rows; a batch whose
    keys are all new touches no file (an append), one with known keys rewrites only their files."""
    spark_lake = Lake(str(tmp_path / "spark"), spark, backend="deltars")
    spark_lake.create_table("events", EVENTS, partition_by=["part"])
    batches = [_events(list(range(0, 6))), _events(list(range(6, 9))), _events([2, 7, 20], name="m")]
    results = [driver.merge_arrow("events", b, ["id", "part"]) for b in batches]
    # the same through Spark: the first two hold new keys only (one append), the third known ones too
    frame = lambda t: spark.createDataFrame(t.to_pandas(), EVENTS)  # noqa: E731
    spark_lake.append("events", frame(pa.concat_tables(batches[:2])))
    spark_lake.merge("events", frame(batches[2]), ["id", "part"])
    want = spark_lake.read_arrow("events", ["id", "name", "at", "part"])
    got = driver.read_arrow("events", ["id", "name", "at", "part"])
    assert _sorted(got) == _sorted(want) and got.num_rows == 10
    assert [r.removed_files for r in results[:2]] == [0, 0]  # new keys only: nothing rewritten
    assert 0 < results[2].removed_files < 3 + 3  # only the files holding ids 2 and 7
    assert driver.merge_arrow("events", _events([]), ["id"]).version is None
    with pytest.raises(Exception, match="several rows for key"):
        driver.merge_arrow("events", pa.concat_tables([_events([1]), _events([1], name="x")]), ["id"])


def test_rewrite_arrow_replaces_the_files_of_one_partition_it_picks(driver) -> None:
    """``rewrite_arrow`` (the live replay's sink): only the files of the partition that the statistics
    pick are read and replaced, by the tables ``fn`` returns, each in files of its own; other
    partitions and unpicked files are untouched; ``append_arrow`` appends; a repeated txn is skipped."""
    driver.append_arrow("events", _events([0, 3, 6]))          # part 0: one file, ids 0..6
    driver.append_arrow("events", _events([9, 12, 1]))         # part 0: ids 9, 12; part 1: id 1
    seen: list[list[int]] = []

    def keep_odd_and_add(old: pa.Table) -> list[pa.Table]:
        seen.append(sorted(old.column("id").to_pylist()))
        return [old.filter(pc.equal(pc.bit_wise_and(old.column("id"), 1), 1)), _events([30], name="new")]

    res = driver.rewrite_arrow("events", {"part": "0"}, keep_odd_and_add, columns=["id"],
                               touched=lambda st: st is None or st.max.get("id") is None or st.max["id"] >= 9,
                               txn=("sink", 1))
    assert seen == [[9, 12]]                                   # the picked file only, its rows whole
    assert res.removed_files == 1 and res.files == 2           # the two returned tables: files of their own
    assert sorted(driver.read_arrow("events", ["id"]).column("id").to_pylist()) == [0, 1, 3, 6, 9, 30]
    again = driver.rewrite_arrow("events", {"part": "0"}, keep_odd_and_add, txn=("sink", 1))
    assert again.skipped and len(seen) == 1
    with pytest.raises(LakeError, match="partitioned by"):
        driver.rewrite_arrow("events", {"id": "1"}, lambda old: [old])


def test_operations_that_move_dataframes_refuse_in_one_line(driver) -> None:
    with pytest.raises(LakeError) as e:
        driver.read("events")
    assert "without a Spark session" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(LakeError, match="delta-spark' needs a Spark session"):
        Lake(driver.root, None, backend="delta-spark")
