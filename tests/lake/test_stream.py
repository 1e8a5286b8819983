"""Structured Streaming: the lake source picks up new commits, honours trigger limits, and the
sink is exactly-once across a real SIGKILL between its Delta commit and Spark's checkpoint commit."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality

from kraft_replay.lake import InvalidArgumentError, Lake

from lake_helpers import BACKENDS, EVENTS, ROOT, data_files, delta_table, events, run_job


def _wait_for(path: Path, proc, timeout: float = 240.0) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, f"helper job exited early with {proc.returncode}"
        assert time.time() < deadline, f"helper job did not reach {path.name} in {timeout}s"
        time.sleep(0.2)


def test_source_picks_up_appends_made_after_start(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 300))
    stream = lake.read_stream(events_table)
    query = (stream.writeStream.format("memory").queryName("lake_source_test")
             .trigger(processingTime="500 milliseconds").start())
    try:
        query.processAllAvailable()
        assert spark.table("lake_source_test").count() == 300
        lake.append(events_table, events(spark, 300, 450))
        lake.append(events_table, events(spark, 450, 500))
        query.processAllAvailable()
        got = spark.table("lake_source_test")
        assert_df_equality(got, lake.read(events_table), ignore_row_order=True, ignore_nullable=True)
    finally:
        query.stop()


def test_trigger_limits_split_batches(spark, lake, events_table, tmp_path):
    lake.append(events_table, events(spark, 0, 600, parts=3, slices=2))  # 6 files of 100 rows
    assert len(data_files(lake, events_table)) == 6
    lake.create_table("copy", lake.schema(events_table), ["part"])
    q = lake.write_stream(lake.read_stream(events_table, max_files_per_trigger=4), "copy",
                          str(tmp_path / "ck1"), trigger={"availableNow": True})
    q.awaitTermination()
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes == [400, 200]
    assert lake.read("copy").count() == 600
    lake.append(events_table, events(spark, 600, 900, parts=3, slices=1))  # 3 more files of 100 rows
    if lake.backend == "delta-spark":  # Delta's own source bounds a micro-batch by files or bytes, not rows
        with pytest.raises(InvalidArgumentError, match="no rows-per-trigger limit") as exc:
            lake.read_stream(events_table, max_rows_per_trigger=250)
        assert "\n" not in str(exc.value)
        return
    q2 = lake.write_stream(lake.read_stream(events_table, max_rows_per_trigger=250), "copy",
                           str(tmp_path / "ck1"), trigger={"availableNow": True})
    q2.awaitTermination()
    assert [p["numInputRows"] for p in q2.recentProgress if p["numInputRows"]] == [200, 100]
    assert_df_equality(lake.read("copy"), lake.read(events_table), ignore_row_order=True, ignore_nullable=True)


@pytest.fixture(scope="module")
def killed_sinks(spark, tmp_path_factory) -> dict:
    """On each backend a lake whose table ``src`` (4 files of 100 rows) was streamed into ``dst`` a file
    per micro-batch by a helper job - one process for both backends' queries (one JVM to start) - that
    was SIGKILLed while each query hung after its sink committed batch 1 to Delta and before Spark
    wrote the batch to its checkpoint: ``{backend: (lake, checkpoint)}``."""
    base = tmp_path_factory.mktemp("sigkill")
    lakes, specs, markers = {}, [], []
    for backend in BACKENDS:
        lake = Lake(str(base / backend / "lake"), spark, backend=backend, target_file_rows=500)
        lake.create_table("src", EVENTS, ["part"])
        lake.append("src", events(spark, 0, 400, parts=1, slices=4))  # 4 tasks: 4 files of 100 rows
        lake.create_table("dst", EVENTS, ["part"])
        checkpoint, marker = base / backend / "ckpt", base / backend / "marker"
        lakes[backend] = (lake, checkpoint)
        specs += [backend, lake.root, str(checkpoint), str(marker)]
        markers.append(marker)
    proc = run_job(ROOT / "tests/lake/jobs/sink_job.py", "1", *specs)
    try:
        for marker in markers:
            _wait_for(marker, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return lakes


def test_sink_is_exactly_once_across_sigkill(spark, backend, killed_sinks):
    # "src": 4 files of 100 rows, streamed a file per micro-batch (killed_sinks)
    lake, checkpoint = killed_sinks[backend]
    n_files = len(data_files(lake, "src"))
    assert n_files == 4
    # Killed after Delta committed batch 1 but before Spark wrote commits/1.
    assert (checkpoint / "offsets" / "1").exists() and not (checkpoint / "commits" / "1").exists()
    committed_before = lake.read("dst").count()
    assert committed_before == 200
    q = lake.write_stream(lake.read_stream("src", max_files_per_trigger=1), "dst", str(checkpoint),
                          trigger={"availableNow": True})
    q.awaitTermination()
    assert q.exception() is None
    got = lake.read("dst")
    assert_df_equality(got, lake.read("src"), ignore_row_order=True, ignore_nullable=True)
    writes = [h for h in lake.history("dst") if h.get("operation") != "CREATE TABLE"]
    assert len(writes) == n_files  # batch 1 replayed after the restart but not committed twice
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    app_ids = {json.loads(line)["txn"]["appId"] for v in range(1, n_files + 1)
               for line in (Path(lake.root) / "dst/_delta_log" / f"{v:020d}.json").read_text().splitlines()
               if '"txn"' in line}
    assert len(app_ids) == 1 and delta_table(lake, "dst").transaction_version(app_ids.pop()) == n_files - 1
    assert query_id  # the sink id is derived from this persisted query id


def test_commits_that_remove_rows_fail_the_stream_unless_skipped(spark, lake, events_table, tmp_path):
    lake.append(events_table, events(spark, 0, 90))
    lake.compact(events_table)  # dataChange=false: not a change commit, no new rows
    lake.overwrite(events_table, events(spark, 100, 130).where("part = 1"), replace_where="part = 1")
    lake.append(events_table, events(spark, 500, 530))
    failing = (lake.read_stream(events_table, starting_version=1).writeStream.format("noop")
               .option("checkpointLocation", str(tmp_path / "c1")).trigger(availableNow=True).start())
    try:
        failing.awaitTermination()
        raised = None
    except Exception as exc:  # StreamingQueryException
        raised = str(exc)
    # the lake's source (embedded backend) and Delta's own (delta-spark) say it in their words
    assert raised is not None and ("version 3 removes or rewrites rows" in raised if lake.backend == "deltars"
                                   else "DELTA_SOURCE_TABLE_IGNORE_CHANGES" in raised and "version 3" in raised), raised
    q = (lake.read_stream(events_table, starting_version=1, skip_change_commits=True)
         .writeStream.format("memory").queryName("skip_changes").trigger(availableNow=True).start())
    q.awaitTermination()
    ids = sorted(r.id for r in spark.table("skip_changes").collect())
    assert ids == list(range(90)) + list(range(500, 530))


def test_a_stream_of_tables_starts_from_one_marker_per_cluster_with_snapshot_markers(spark, lake, tmp_path):
    """``read_stream_tables(..., snapshot_markers=True)``: the rows already there when the query starts
    come as one marker row per cluster of each table partitioned by ``cluster_id`` (the other columns
    null, the snapshot's version), a table not partitioned by it as its rows; rows committed later come
    as rows. Without the option the snapshot comes as rows."""
    from pyspark.sql import functions as F

    def rows(start: int, stop: int, clusters: int):
        return events(spark, start, stop, slices=2).withColumn("cluster_id", F.concat(F.lit("c"), (F.col("id") % clusters).cast("string")))

    schema = rows(0, 1, 1).schema
    lake.create_table("keyed", schema, ["cluster_id"])
    lake.create_table("flat", schema, [])
    lake.append("keyed", rows(0, 60, 3))
    lake.append("keyed", rows(60, 90, 2))
    lake.append("flat", rows(0, 5, 2))
    snap = lake.version("keyed")
    got: list[list[dict]] = []

    def collect(df, _bid) -> None:
        got.append([r.asDict() for r in df.collect()])

    def run(markers: bool, ckpt: str) -> None:
        q = (lake.read_stream_tables(["keyed", "flat"], with_version=True, snapshot_markers=markers)
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / ckpt))
             .trigger(availableNow=True).start())
        q.awaitTermination()

    run(True, "ck")
    assert len(got) == 1
    keyed = sorted((r for r in got[0] if r["_table"] == "keyed"), key=lambda r: r["cluster_id"])
    assert [(r["cluster_id"], r["_commit_version"], r["_snapshot_marker"], r["id"], r["name"]) for r in keyed] == [
        ("c0", snap, True, None, None), ("c1", snap, True, None, None), ("c2", snap, True, None, None)]
    flat = [r for r in got[0] if r["_table"] == "flat"]
    assert sorted(r["id"] for r in flat) == list(range(5)) and not any(r["_snapshot_marker"] for r in flat)
    lake.append("keyed", rows(90, 100, 3))
    got.clear()
    run(True, "ck")
    assert sorted(r["id"] for r in got[0]) == list(range(90, 100))
    assert {r["_commit_version"] for r in got[0]} == {snap + 1} and not any(r["_snapshot_marker"] for r in got[0])
    got.clear()
    run(False, "ck-rows")
    assert sorted(r["id"] for b in got for r in b if r["_table"] == "keyed") == list(range(100))
    assert "_snapshot_marker" not in got[0][0]
