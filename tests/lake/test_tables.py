"""Round trips, time travel, overwrite, idempotent txns, merge, compaction, vacuum, views."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lake_helpers import EVENTS, data_files, delta_table, events
from kraft_replay.lake import Lake


def test_append_read_round_trip(spark, lake, events_table):
    df = events(spark, 0, 2000)
    res = lake.append(events_table, df)
    assert res.rows == 2000 and res.version == 1 and not res.skipped
    back = lake.read(events_table)
    assert back.columns == EVENTS.fieldNames()
    assert_df_equality(back, df, ignore_row_order=True, ignore_nullable=True)


@pytest.fixture
def lake_3000(spark, backend, shared_lakes) -> Lake:
    """A lake whose ``events`` holds ids 0..2999 appended by one task (read only: shared by the tests
    that read it)."""
    def build(lake: Lake) -> None:
        lake.create_table("events", EVENTS, partition_by=["part"])
        lake.append("events", events(spark, 0, 3000, parts=3, slices=1))

    return shared_lakes(backend, "rows3000", build)


@pytest.fixture
def lake_unpublished_run(spark, backend, shared_lakes) -> Lake:
    """A lake whose ``events`` has ids 0..99 published and ids 100..199 appended by a run that never
    published (read only: shared by the tests that read it)."""
    def build(lake: Lake) -> None:
        lake.create_table("events", EVENTS, partition_by=["part"])
        lake.append("events", events(spark, 0, 100))
        lake.publish(["events"], "first")
        lake.start_run("unpublished", ["events"])
        lake.append("events", events(spark, 100, 200))  # a run that never publishes: readers do not see it
        lake.end_run()

    return shared_lakes(backend, "unpublished-run", build)


def test_files_respect_target_rows_and_carry_stats(lake_3000):
    lake, events_table = lake_3000, "events"
    files = data_files(lake, events_table)
    # 1 task x 3 partition values x 1000 rows each, at most 500 rows per file -> 6 files of 500.
    assert sorted(f.num_records for f in files) == [500] * 6
    for f in files:
        meta = pq.read_metadata(f"{lake.root}/{events_table}/{f.path}")
        assert meta.num_rows == f.num_records
    add = pa.table(delta_table(lake, events_table).get_add_actions(flatten=True)).to_pydict()
    assert all(lo <= hi for lo, hi in zip(add["min.id"], add["max.id"]))
    assert sum(add["num_records"]) == 3000


def test_time_travel_by_version_and_timestamp(spark, lake, events_table):
    v1 = lake.append(events_table, events(spark, 0, 100)).version
    time.sleep(1.1)
    v2 = lake.append(events_table, events(spark, 100, 250)).version
    assert (v1, v2) == (1, 2)
    assert lake.read(events_table, version=v1).count() == 100
    assert lake.read(events_table, version=0).count() == 0
    assert lake.read(events_table).count() == 250
    ts1 = next(h["timestamp"] for h in lake.history(events_table) if h["version"] == v1)
    at_v1 = dt.datetime.fromtimestamp((ts1 + 500) / 1000, tz=dt.timezone.utc)
    assert lake.read(events_table, timestamp=at_v1).count() == 100
    assert lake.read(events_table, timestamp=at_v1.isoformat()).count() == 100
    assert [h["version"] for h in lake.history(events_table)] == [2, 1, 0]


def _files_scanned(df) -> int:
    """Files Spark's scan actually opened, from the executed plan's metrics."""
    df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    total = 0
    stack = [plan]
    while stack:
        node = stack.pop()
        metrics = node.metrics()
        if metrics.contains("numFiles"):
            total += int(metrics.apply("numFiles").value())
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return total


def test_partition_pruning_reads_fewer_files(spark, lake_3000):
    lake, events_table = lake_3000, "events"  # ids 0..2999 in 3 partitions, 1 task
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        all_files = len(data_files(lake, events_table))
        full = lake.read(events_table)
        pruned = lake.read(events_table).where("part = 1")
        assert _files_scanned(full) == all_files == 6
        assert _files_scanned(pruned) == 2
        assert pruned.count() == 1000
        # Driver-side pruning through `where` lists only the matching files.
        assert len(lake.read(events_table, where="part = 2").inputFiles()) == 2
        assert lake.read(events_table, where="part = 2").where("id % 3 != 2").count() == 0
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", "true")


def test_txn_makes_append_idempotent(spark, lake, events_table):
    first = lake.append(events_table, events(spark, 0, 100), txn=("ingest-job", 7))
    again = lake.append(events_table, events(spark, 0, 100), txn=("ingest-job", 7))
    older = lake.append(events_table, events(spark, 0, 100), txn=("ingest-job", 3))
    newer = lake.append(events_table, events(spark, 100, 150), txn=("ingest-job", 8))
    assert not first.skipped and again.skipped and older.skipped and not newer.skipped
    assert lake.read(events_table).count() == 150
    assert delta_table(lake, events_table).transaction_version("ingest-job") == 8


def test_overwrite_whole_table_and_replace_where(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 300))
    res = lake.overwrite(events_table, events(spark, 1000, 1030))
    assert res.removed_files > 0
    assert sorted(r.id for r in lake.read(events_table).collect()) == list(range(1000, 1030))
    # Replace only partition 0; partitions 1 and 2 keep their rows.
    new_part0 = events(spark, 5000, 5030).where("part = 0")
    lake.overwrite(events_table, new_part0, replace_where="part = 0")
    got = lake.read(events_table)
    assert got.where("part = 0").count() == new_part0.count()
    assert got.where("part = 0 AND id < 5000").count() == 0
    assert got.where("part != 0").count() == 20
    # Rows outside the predicate are refused and nothing is committed.
    version = lake.version(events_table)
    with pytest.raises(Exception, match="does not match"):
        lake.overwrite(events_table, events(spark, 0, 10), replace_where="part = 0")
    assert lake.version(events_table) == version


def test_merge_upserts_and_rewrites_only_touched_files(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 900, slices=1))
    before = {f.path for f in data_files(lake, events_table)}
    upd = events(spark, 0, 0).unionByName(
        spark.createDataFrame([(3, "changed", dt.datetime(2030, 1, 1), 0), (10_000, "new", None, 1)], EVENTS))
    res = lake.merge(events_table, upd, keys=["id", "part"])
    after = lake.read(events_table)
    assert after.count() == 901
    assert after.where("id = 3").collect()[0]["name"] == "changed"
    assert after.where("id = 10000").collect()[0]["name"] == "new"
    assert after.select("id").distinct().count() == 901
    # Only the file holding id 3 (partition 0) was replaced.
    assert res.removed_files == 1
    now = {f.path for f in data_files(lake, events_table)}
    assert len(before - now) == 1
    dup = spark.createDataFrame([(1, "a", None, 1), (1, "b", None, 1)], EVENTS)
    with pytest.raises(Exception, match="several rows for key"):
        lake.merge(events_table, dup, keys=["id", "part"])


def test_rewrite_reads_and_replaces_only_the_files_its_statistics_pick(spark, lake, events_table):
    """``rewrite``: on the embedded backend the files of the matching partition whose statistics say
    they may hold rows with ``id >= 600`` are read, ``fn``'s two DataFrames replace them in files of
    their own, in one commit; the other files (and partitions) are untouched. delta-spark has no
    per-file choice: ``fn`` gets the whole partition and its frames replace it (one ``replaceWhere``
    overwrite). The table ends the same on both; a DataFrame with rows outside the partition commits
    nothing."""
    from pyspark.sql import functions as F

    lake.append(events_table, events(spark, 0, 300, slices=1))     # ids < 300: files that stay
    lake.append(events_table, events(spark, 600, 900, slices=1))   # ids >= 600: read and replaced
    part0 = {f.path for f in data_files(lake, events_table) if f.partition_values["part"] == "0"}
    seen: list[int] = []

    def fn(rows):
        seen.append(rows.count())
        kept = rows.where("id < 600 OR id % 2 = 0")
        return [kept.where("id < 750"), kept.where("id >= 750").withColumn("name", F.lit("late"))]

    res = lake.rewrite(events_table, fn, "part = 0", touched=lambda st: st.max.get("id", 10**9) >= 600, columns=["id"])
    after = {f.path for f in data_files(lake, events_table)}
    if lake.backend == "deltars":
        assert seen == [100]                             # part 0's ids 600..897, step 3: 100 rows read
        assert res.removed_files == 1 and len(part0 - after) == 1 and res.files == 2 and res.rows == 50
    else:
        assert seen == [200]                             # and part 0's 100 ids below 300
        assert res.removed_files == 2 and not part0 & after and res.rows == 150
    got = lake.read(events_table)
    assert got.where("part = 0 AND id >= 600").count() == 50
    assert got.where("part = 0 AND id >= 750").select("name").distinct().collect() == [("late",)]
    assert got.where("part != 0 OR id < 600").count() == 300 + 200   # everything else as it was
    version = lake.version(events_table)
    with pytest.raises(Exception, match="does not match"):
        lake.rewrite(events_table, lambda rows: [rows.withColumn("part", F.lit(1))], "part = 0",
                     touched=lambda st: True, columns=["id"])
    assert lake.version(events_table) == version         # nothing committed


def test_compact_then_vacuum(spark, lake, events_table):
    for i in range(4):
        lake.append(events_table, events(spark, i * 30, (i + 1) * 30))
    small = len(data_files(lake, events_table))
    expected = lake.read(events_table)
    expected_rows = sorted(expected.collect())
    res = lake.compact(events_table)
    assert len(data_files(lake, events_table)) == 3 < small  # one file per partition value
    assert res.removed_files == small
    assert sorted(lake.read(events_table).collect()) == expected_rows
    entry = lake.history(events_table, 1)[0]
    assert entry["kraft_replay.operation" if lake.backend == "deltars" else "operation"] == "OPTIMIZE"
    import json as _json

    version = lake.version(events_table)
    log = f"{lake.root}/{events_table}/_delta_log/{version:020d}.json"
    actions = [_json.loads(line) for line in open(log)]
    assert all(a["add"]["dataChange"] is False for a in actions if "add" in a)
    assert all(a["remove"]["dataChange"] is False for a in actions if "remove" in a)
    deleted = lake.vacuum(events_table, retain_hours=0)
    assert len(deleted) == small
    assert sorted(lake.read(events_table).collect()) == expected_rows
    assert sorted(lake.read(events_table, version=version).collect()) == expected_rows


def test_tables_and_views(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 120))
    lake.create_table("kv", StructType([StructField("k", StringType()), StructField("v", LongType())]))
    lake.append("kv", spark.createDataFrame([("a", 1), ("b", 2)], "k string, v long"))
    infos = {t.name: t for t in lake.tables()}
    assert set(infos) == {"events", "kv"}
    assert (infos["events"].version, infos["events"].num_rows) == (1, 120)
    assert (infos["kv"].num_rows, infos["kv"].partition_by) == (2, ())
    assert infos["events"].schema.fieldNames() == EVENTS.fieldNames()
    assert sorted(lake.register_views()) == ["events", "kv"]
    row = spark.sql("SELECT count(*) AS n, sum(v) AS s FROM kv").collect()[0]
    assert (row.n, row.s) == (2, 3)
    assert spark.sql("SELECT count(*) FROM events WHERE part = 0").collect()[0][0] == 40


def test_create_table_is_idempotent_and_checks_schema(lake):
    assert lake.create_table("t", EVENTS, ["part"]) is True
    assert lake.create_table("t", EVENTS, ["part"]) is False
    with pytest.raises(Exception, match="exists with schema"):
        lake.create_table("t", StructType([StructField("x", LongType())]))


def test_lake_on_file_uri(spark, tmp_path):
    lake = Lake(f"file://{tmp_path}/urilake", spark, backend="deltars", target_file_rows=1000)
    lake.create_table("e", EVENTS, ["part"])
    lake.append("e", events(spark, 0, 50))
    assert lake.read("e").count() == 50
    assert [t.name for t in lake.tables()] == ["e"]


def test_reader_scan_reads_the_published_rows_a_filter_keeps(lake_unpublished_run):
    """``LakeReader.scan``: the rows readers see (the published version, not a newer unpublished commit),
    files pruned by a partition filter, rows by a pyarrow expression — no Spark; a tuple filter on a
    column that is not a partition column filters rows; a missing table is None."""
    import pyarrow.compute as pc

    from kraft_replay.lake.errors import InvalidArgumentError
    from kraft_replay.lake.reader import LakeReader

    lake, events_table = lake_unpublished_run, "events"  # ids 0..99 published, 100..199 an unpublished run's
    reader = LakeReader(lake.root)
    got = reader.scan(events_table, columns=["id", "part"], partitions=[("part", "=", 1)], filter=pc.field("id") >= 90)
    assert sorted(got.column("id").to_pylist()) == [91, 94, 97] and set(got.column("part").to_pylist()) == {1}
    assert got.schema.names == ["id", "part"]
    by_id = reader.scan(events_table, partitions=[("id", "in", [3, 150])])
    assert by_id.column("id").to_pylist() == [3]
    with pytest.raises(InvalidArgumentError, match="operator '<'"):
        reader.scan(events_table, partitions=[("part", "<", 2)])
    assert reader.scan("nope") is None


def test_create_table_evolve_adds_the_columns_a_wider_schema_has(spark, lake, events_table):
    """``create_table(evolve=True)``: a table whose columns are all columns of the new schema, in order,
    gains the others in one commit (old rows null there) — trailing ones by a schema change, others by a
    rewrite of its rows; any other difference is still refused."""
    lake.append(events_table, events(spark, 0, 10))
    wider = StructType([*EVENTS.fields, StructField("note", StringType())])
    assert lake.create_table(events_table, wider, ["part"], evolve=True) is False
    assert lake.schema(events_table).fieldNames() == wider.fieldNames()
    assert lake.read(events_table).where("note IS NULL").count() == 10
    inner = StructType([*wider.fields[:2], StructField("tag", LongType()), *wider.fields[2:]])
    version = lake.version(events_table)
    assert lake.create_table(events_table, inner, ["part"], evolve=True) is False
    assert lake.version(events_table) == version + 1 and lake.schema(events_table).fieldNames() == inner.fieldNames()
    assert sorted(r.id for r in lake.read(events_table).where("tag IS NULL AND name IS NOT NULL").collect()) == list(range(10))
    with pytest.raises(Exception, match="exists with schema"):
        lake.create_table(events_table, StructType([StructField("x", LongType()), StructField("part", LongType())]),
                          ["part"], evolve=True)


def test_overwrite_with_a_schema_drops_a_column_in_one_commit_a_rollback_undoes(spark, lake, events_table):
    """``overwrite(schema=...)``: the rows and the schema replaced in one commit, partitioning kept; a run
    that never publishes it is rolled back to the old schema and rows by the next run."""
    lake.append(events_table, events(spark, 0, 30))
    lake.publish([events_table], "first")
    narrow = StructType([f for f in EVENTS.fields if f.name != "name"])
    lake.start_run("drop-name", [events_table])
    r = lake.overwrite(events_table, lake.read(events_table).drop("name"), schema=narrow)
    lake.end_run()                                                  # never published
    assert r.removed_files >= 1 and lake.schema(events_table).fieldNames() == narrow.fieldNames()
    assert "name" in lake.read(events_table).columns               # readers: the published version
    lake.start_run("next", [events_table])                         # rolls the dead run back
    lake.end_run()
    assert lake.schema(events_table).fieldNames() == EVENTS.fieldNames() and lake.read(events_table, latest=True).count() == 30
    lake.overwrite(events_table, lake.read(events_table).drop("name"), schema=narrow)   # a run of its own: published
    back = lake.read(events_table)
    assert back.columns == narrow.fieldNames() and back.count() == 30 and len(lake.read(events_table, where="part = 1").collect()) == 10
    with pytest.raises(Exception, match="whole-table overwrite only"):
        lake.overwrite(events_table, back, replace_where="part = 1", schema=narrow)


def test_read_arrow_gives_the_rows_spark_reads_at_the_same_version(lake_unpublished_run):
    """``Lake.read_arrow``: the columns of the version ``read`` reads (the published one, not a newer
    unpublished commit; or a given version), files pruned by partition filters — equal to Spark's read
    of them; a filter on a column that is not a partition column is a one-line error."""
    from kraft_replay.lake.errors import InvalidArgumentError

    lake, events_table = lake_unpublished_run, "events"  # ids 0..99 published, 100..199 an unpublished run's

    def rows(t: pa.Table) -> list[tuple]:
        return sorted(zip(*[t.column(c).to_pylist() for c in t.column_names]))

    got = lake.read_arrow(events_table, ["id", "at", "part"], partitions=[("part", "in", [0, 2])])
    assert got.schema.names == ["id", "at", "part"]
    spark_rows = lake.read(events_table, where="part IN (0, 2)").select("id", "at", "part").toArrow()
    assert rows(got) == rows(spark_rows) and len(got) == 67 and max(got.column("id").to_pylist()) == 99
    latest = lake.read_arrow(events_table, ["id"], version=lake.version(events_table))
    assert sorted(latest.column("id").to_pylist()) == list(range(200))
    with pytest.raises(InvalidArgumentError, match="partition column") as e:
        lake.read_arrow(events_table, ["id"], partitions=[("id", "=", 3)])
    assert "\n" not in str(e.value)


@pytest.mark.embedded
def test_a_small_runs_rows_are_written_from_the_driver_as_sparks_writer_lays_them_out(spark, lake, events_table, tmp_path):
    """Inside a small run (``spark.sized_run`` of few rows) the embedded backend brings a frame's rows to
    the driver as Arrow and writes the files itself: the table holds the rows Spark's file writer
    writes for the same frame, in the same partition directories (a null partition value included),
    at most ``target_file_rows`` rows a file, with the same footer statistics."""
    from kraft_replay.spark import sized_run

    nulls = spark.createDataFrame([(10_000, None, None, None)], EVENTS)
    df = events(spark, 0, 3000, slices=1).unionByName(nulls)
    lake.append(events_table, df)  # Spark's writer: a session outside a small run
    driver = Lake(str(tmp_path / "driver"), spark, backend="deltars", target_file_rows=500)
    driver.create_table(events_table, EVENTS, partition_by=["part"])
    with sized_run(spark, 10):
        res = driver.append(events_table, df)
    assert res.rows == 3001
    assert_df_equality(driver.read(events_table), lake.read(events_table), ignore_row_order=True)

    def layout(lk: Lake) -> list[tuple]:
        files = lk._impl.snapshot(events_table).files
        return sorted(((tuple(sorted(f.partition_values.items())), f.num_records) for f in files), key=repr)

    def stats(lk: Lake) -> list[tuple]:
        add = pa.table(lk._impl.snapshot(events_table).table.get_add_actions(flatten=True)).to_pydict()
        return sorted(zip(add["partition.part"], add["num_records"], add["min.id"], add["max.id"], add["null_count.name"]),
                      key=repr)

    assert layout(driver) == layout(lake) and ((("part", None),), 1) in layout(driver)
    assert stats(driver) == stats(lake)
    driver_files = [f.path.rsplit("/", 1)[-1] for f in driver._impl.snapshot(events_table).files]
    spark_files = [f.path.rsplit("/", 1)[-1] for f in data_files(lake, events_table)]
    assert all(n.startswith("part-driver-") for n in driver_files), driver_files  # no Spark writer job
    assert not any(n.startswith("part-driver-") for n in spark_files), spark_files
