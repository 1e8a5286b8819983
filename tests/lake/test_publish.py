"""Published versions: readers see a table at its published version, a run's commits become visible
in one publish commit, and the commits of a run that never published are rolled back by the next."""

from __future__ import annotations

from pathlib import Path

import pytest

from lake_helpers import data_files, events

from kraft_replay.lake import InvalidArgumentError, rollback_line


def _ids(df) -> list[int]:
    return sorted(r.id for r in df.select("id").collect())


def _files_on_disk(lake, name: str) -> set[str]:
    root = Path(lake.root) / name
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts}


def test_readers_see_the_published_version_until_the_run_publishes(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 100))  # never published: read at its latest version
    assert lake.published_version(events_table) is None and lake.read(events_table).count() == 100

    assert lake.start_run("run-a", [events_table]) == []
    lake.append(events_table, events(spark, 100, 150))  # adopts v1 as published first, then commits v2
    assert lake.published_version(events_table) == 1 and lake.version(events_table) == 2
    assert lake.read(events_table).count() == 100
    assert lake.read(events_table, latest=True).count() == 150
    assert lake.read(events_table, version=2).count() == 150  # explicit versions stay explicit
    info = {t.name: t for t in lake.tables()}[events_table]
    assert (info.version, info.num_rows, info.head_version, info.unpublished_commits, info.published) == (1, 100, 2, 1, True)
    lake.register_views()
    assert spark.sql(f"SELECT count(*) AS n FROM {events_table}").first().n == 100

    assert lake.publish([events_table], "run-a") == {events_table: 2}
    assert lake.run_id is None
    assert lake.read(events_table).count() == 150
    lake.register_views()
    assert spark.sql(f"SELECT count(*) AS n FROM {events_table}").first().n == 150
    assert "_published" not in lake.table_names()


def test_next_run_rolls_back_an_unpublished_run_and_its_txns(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 100))
    lake.publish([events_table], "first")
    published_files = _files_on_disk(lake, events_table)

    lake.start_run("dies", [events_table])
    lake.append(events_table, events(spark, 1000, 1100), txn=("job", 1))
    lake.append(events_table, events(spark, 2000, 2100))
    lake.end_run()  # the run dies before publishing
    assert lake.read(events_table).count() == 100 and lake.version(events_table) == 3
    dead_files = _files_on_disk(lake, events_table) - published_files
    assert dead_files

    rolled = lake.start_run("rerun", [events_table])
    assert [(r.table, r.head, r.published, r.version, r.files_removed) for r in rolled] == \
        [(events_table, 3, 1, 4, len(dead_files))]
    assert "v3->v1 (2 commit(s)" in rollback_line(rolled)
    assert lake.published_version(events_table) == 4  # the restore commit holds the published rows
    assert _files_on_disk(lake, events_table) == published_files  # the dead commits' files are gone
    assert _ids(lake.read(events_table, latest=True)) == list(range(100))
    # the rolled-back commit's txn does not make the rerun's commit look "already committed": the embedded
    # backend resets it in its rollback commit; Delta's RESTORE keeps it, so on delta-spark a writer inside a
    # run takes an app id of its own run (as the pipeline's writers do)
    app = "job" if lake.backend == "deltars" else "job-rerun"
    if lake.backend == "delta-spark":
        assert lake.append(events_table, events(spark, 1000, 1100), txn=("job", 1)).skipped
    res = lake.append(events_table, events(spark, 1000, 1100), txn=(app, 1))
    assert not res.skipped
    assert lake.append(events_table, events(spark, 1000, 1100), txn=(app, 1)).skipped  # within the run: once
    lake.publish([events_table], "rerun")
    assert _ids(lake.read(events_table)) == list(range(100)) + list(range(1000, 1100))
    assert lake.start_run("idle", [events_table]) == []  # nothing left to roll back
    lake.end_run()


def test_writes_outside_a_run_publish_themselves(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 60))
    lake.publish([events_table], "p")
    lake.start_run("dies", [events_table])
    lake.append(events_table, events(spark, 500, 600))
    lake.end_run()
    # a plain write to a published table: the dead run is rolled back, the write is published
    lake.append(events_table, events(spark, 60, 90))
    assert _ids(lake.read(events_table)) == list(range(90))
    assert lake.published_version(events_table) == lake.version(events_table)
    lake.compact(events_table)
    lake.vacuum(events_table, retain_hours=0)  # vacuum commits too: still published, still readable
    assert lake.published_version(events_table) == lake.version(events_table)
    assert _ids(lake.read(events_table)) == list(range(90))
    assert _files_on_disk(lake, events_table) == {f.path for f in data_files(lake, events_table)}


def test_publish_checks_its_arguments(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 10))
    lake.append(events_table, events(spark, 10, 20))
    assert lake.publish([events_table], "p", versions={events_table: 1}) == {events_table: 1}
    assert lake.read(events_table).count() == 10
    with pytest.raises(InvalidArgumentError, match="lower version"):
        lake.publish([events_table], "q", versions={events_table: 0})
    with pytest.raises(InvalidArgumentError, match="versions 0..2, not 5"):
        lake.publish([events_table], "q", versions={events_table: 5})
    with pytest.raises(InvalidArgumentError, match="not among the tables"):
        lake.publish([events_table], "q", versions={"other": 1})
    with pytest.raises(InvalidArgumentError, match="the lake's own"):
        lake.append("_published", events(spark, 0, 1))


def test_stream_stops_at_the_published_version_and_skips_rolled_back_runs(spark, lake, events_table, tmp_path):
    lake.append(events_table, events(spark, 0, 100))
    lake.publish([events_table], "p1")
    lake.create_table("copy", lake.schema(events_table), ["part"])
    ck = str(tmp_path / "ck")

    def catch_up() -> list[int]:
        q = lake.write_stream(lake.read_stream(events_table), "copy", ck, trigger={"availableNow": True})
        q.awaitTermination()
        return _ids(lake.read("copy"))

    lake.start_run("in-flight", [events_table])
    lake.append(events_table, events(spark, 1000, 1100))  # unpublished: never streamed
    assert catch_up() == list(range(100))
    lake.end_run()  # ... and the run dies

    lake.start_run("rerun", [events_table])  # rollback: a RESTORE commit, published
    lake.append(events_table, events(spark, 100, 130))
    assert catch_up() == list(range(100))  # the rerun is not published yet
    lake.publish([events_table], "rerun")
    assert catch_up() == list(range(130))  # dead versions skipped, the RESTORE is no change commit
    fresh = lake.read_stream(events_table)  # a new query starts from the published snapshot
    q = fresh.writeStream.format("memory").queryName("published_stream_fresh").trigger(availableNow=True).start()
    q.awaitTermination()
    assert _ids(spark.table("published_stream_fresh")) == list(range(130))
    with pytest.raises(InvalidArgumentError, match="published by runs"):
        lake.write_stream(lake.read_stream("copy"), events_table, str(tmp_path / "ck2"))


def test_writers_of_different_tables_run_side_by_side(spark, lake, events_table):
    """Two writers (ingest --follow and replay --mode stream share a lake this way): a run of one
    table does not roll back the other's run in flight, and concurrent publishes lose nothing."""
    import threading

    from kraft_replay.lake import Lake
    from lake_helpers import EVENTS

    lake.create_table("other", EVENTS, partition_by=["part"])
    lake.append(events_table, events(spark, 0, 10))
    lake.append("other", events(spark, 0, 10))
    lake.publish([events_table, "other"], "setup")
    second = Lake(lake.root, spark, backend="deltars", target_file_rows=500)  # another writer

    lake.start_run("a", [events_table])
    lake.append(events_table, events(spark, 10, 20))      # in flight, unpublished
    second.start_run("b", ["other"])                       # must not roll back run a's commit
    second.append("other", events(spark, 10, 30))
    second.publish(["other"], "b")
    lake.publish([events_table], "a")
    assert lake.read(events_table).count() == 20 and lake.read("other").count() == 30

    # concurrent publishes: each re-reads _published under the lock, neither is lost
    errors: list[BaseException] = []

    def writer(lk, table: str, base: int) -> None:
        try:
            for i in range(4):
                run = f"{table}-{i}"
                lk.start_run(run, [table])
                lk.append(table, events(spark, base + i, base + i + 1))
                lk.publish([table], run)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(lake, events_table, 1000)),
               threading.Thread(target=writer, args=(second, "other", 2000))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    published = lake.published_versions()
    assert published[events_table] == lake.version(events_table) and published["other"] == lake.version("other")
    assert lake.read(events_table).count() == 24 and lake.read("other").count() == 34
