"""Structured Streaming: the lake source picks up new commits, honours trigger limits, and the
sink is exactly-once across a real SIGKILL between its Delta commit and Spark's checkpoint commit."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from chispa import assert_df_equality

from lake_helpers import ROOT, events, run_job


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
    assert len(lake._impl.snapshot(events_table).files) == 6
    lake.create_table("copy", lake.schema(events_table), ["part"])
    q = lake.write_stream(lake.read_stream(events_table, max_files_per_trigger=4), "copy",
                          str(tmp_path / "ck1"), trigger={"availableNow": True})
    q.awaitTermination()
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes == [400, 200]
    assert lake.read("copy").count() == 600
    lake.append(events_table, events(spark, 600, 900, parts=3, slices=1))  # 3 more files of 100 rows
    q2 = lake.write_stream(lake.read_stream(events_table, max_rows_per_trigger=250), "copy",
                           str(tmp_path / "ck1"), trigger={"availableNow": True})
    q2.awaitTermination()
    assert [p["numInputRows"] for p in q2.recentProgress if p["numInputRows"]] == [200, 100]
    assert_df_equality(lake.read("copy"), lake.read(events_table), ignore_row_order=True, ignore_nullable=True)


def test_sink_is_exactly_once_across_sigkill(spark, lake, events_table, tmp_path):
    lake.append(events_table, events(spark, 0, 400, parts=2, slices=2))  # 4 files
    # Copy events into a flat "src" table so the helper job can use fixed names.
    lake.create_table("src", lake.schema(events_table), ["part"])
    lake.append("src", lake.read(events_table))
    lake.create_table("dst", lake.schema(events_table), ["part"])
    n_files = len(lake._impl.snapshot("src").files)
    checkpoint, marker = tmp_path / "ckpt", tmp_path / "marker"
    proc = run_job(ROOT / "tests/lake/jobs/sink_job.py", lake.root, str(checkpoint), str(marker), "1")
    try:
        _wait_for(marker, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
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
    assert len(app_ids) == 1 and lake._impl.snapshot("dst").table.transaction_version(app_ids.pop()) == n_files - 1
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
    assert raised is not None and "version 3 removes or rewrites rows" in raised
    q = (lake.read_stream(events_table, starting_version=1, skip_change_commits=True)
         .writeStream.format("memory").queryName("skip_changes").trigger(availableNow=True).start())
    q.awaitTermination()
    ids = sorted(r.id for r in spark.table("skip_changes").collect())
    assert ids == list(range(90)) + list(range(500, 530))
