"""Faults: a job killed between writing data files and committing, and concurrent appends."""

from __future__ import annotations

import pytest

import signal
import threading
import time
from pathlib import Path

from lake_helpers import ROOT, events, run_job

pytestmark = pytest.mark.embedded  # the embedded backend's own machinery (tests/lake/conftest.py)


def _data_files_on_disk(lake, name: str) -> set[str]:
    root = Path(lake.root) / name
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet")}


def test_kill_between_write_and_commit_leaves_no_rows_and_rerun_commits_once(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 100))
    marker = Path(lake.root).parent / "staged.marker"
    proc = run_job(ROOT / "tests/lake/jobs/commit_crash_job.py", lake.root, str(marker))
    try:
        deadline = time.time() + 240
        while not marker.exists():
            assert proc.poll() is None, f"helper job exited early with {proc.returncode}"
            assert time.time() < deadline, "helper job never reached the commit"
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    committed = {f.path for f in lake._impl.snapshot(events_table).files}
    orphans = _data_files_on_disk(lake, events_table) - committed
    assert orphans, "the killed job should have left written-but-uncommitted files"
    assert lake.version(events_table) == 1 and lake.read(events_table).count() == 100

    rerun = lake.append(events_table, events(spark, 1000, 1300), txn=("crash-job", 1))
    again = lake.append(events_table, events(spark, 1000, 1300), txn=("crash-job", 1))
    assert not rerun.skipped and again.skipped
    ids = [r.id for r in lake.read(events_table).select("id").collect()]
    assert len(ids) == 400 and len(set(ids)) == 400

    deleted = lake.vacuum(events_table, retain_hours=0)
    assert {Path(p).name for p in deleted} == {Path(p).name for p in orphans}
    assert _data_files_on_disk(lake, events_table) == {f.path for f in lake._impl.snapshot(events_table).files}
    assert lake.read(events_table).count() == 400


def test_two_concurrent_appends_both_land(spark, lake, events_table):
    lake.append(events_table, events(spark, 0, 50))
    backend = lake._impl
    original = backend._commit
    barrier = threading.Barrier(2, timeout=180)
    read_versions: list[int] = []

    def commit_together(name, snap, *args, **kwargs):
        read_versions.append(snap.version)
        barrier.wait()  # both writers hold the same snapshot: one of them must hit a conflict
        return original(name, snap, *args, **kwargs)

    backend._commit = commit_together
    results: dict[int, object] = {}
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            results[i] = lake.append(events_table, events(spark, 1000 * (i + 1), 1000 * (i + 1) + 100))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    backend._commit = original
    assert not errors, errors
    assert read_versions == [1, 1]
    assert sorted(r.version for r in results.values()) == [2, 3]
    ids = {r.id for r in lake.read(events_table).select("id").collect()}
    assert len(ids) == 250 and {1000, 1099, 2000, 2099} <= ids


def test_same_txn_committed_concurrently_lands_once(spark, lake, events_table):
    backend = lake._impl
    original = backend._commit
    barrier = threading.Barrier(2, timeout=180)

    def commit_together(*args, **kwargs):
        barrier.wait()  # both runs of the same job reach the commit with the txn not yet recorded
        return original(*args, **kwargs)

    backend._commit = commit_together
    results: list[object] = []

    def run() -> None:
        results.append(lake.append(events_table, events(spark, 0, 100), txn=("retried-job", 1)))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    backend._commit = original
    assert sorted(r.skipped for r in results) == [False, True]
    assert lake.read(events_table).count() == 100
    assert lake.version(events_table) == 1
    # The losing run removed its staged files: nothing on disk outside the log.
    assert _data_files_on_disk(lake, events_table) == {f.path for f in lake._impl.snapshot(events_table).files}


def test_merge_and_rewrite_retry_a_conflicting_commit_and_clean_their_staging(spark, lake, events_table, monkeypatch):
    """A merge or rewrite whose commit meets a concurrent one is redone on a new snapshot; one that
    keeps conflicting ends with a one-line CommitConflictError. Every failed attempt's staged files
    are deleted, and nothing is committed by it."""
    import pytest
    from deltalake.exceptions import CommitFailedError
    from pyspark.sql import functions as F

    from kraft_replay.lake import CommitConflictError
    from kraft_replay.lake.deltars import _OP_RETRIES

    lake.append(events_table, events(spark, 0, 300))
    impl = lake._impl
    commit = impl._commit
    calls = {"n": 0, "fail": 0}

    def conflicting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["n"] += 1
        if calls["n"] <= calls["fail"]:
            raise CommitFailedError("Transaction failed: a concurrent transaction deleted the same data")
        return commit(*args, **kwargs)

    monkeypatch.setattr(impl, "_commit", conflicting)

    def on_disk_is_committed() -> bool:
        return _data_files_on_disk(lake, events_table) == {f.path for f in impl.snapshot(events_table).files}

    version = lake.version(events_table)
    calls.update(n=0, fail=_OP_RETRIES)
    with pytest.raises(CommitConflictError, match=r"^table 'events': merge kept conflicting .*; retry the job$"):
        lake.merge(events_table, events(spark, 0, 10), keys=["id"])
    calls.update(n=0)
    with pytest.raises(CommitConflictError, match=r"^table 'events': rewrite kept conflicting .*; retry the job$"):
        lake.rewrite(events_table, lambda rows: [rows], "part = 0", touched=lambda st: True, columns=["id"])
    assert calls["n"] == _OP_RETRIES and lake.version(events_table) == version and on_disk_is_committed()

    before = _data_files_on_disk(lake, events_table)
    calls.update(n=0, fail=1)
    merged = lake.merge(events_table, events(spark, 0, 10).withColumn("name", F.lit("merged")), keys=["id"])
    assert lake.read(events_table).where("name = 'merged'").count() == 10 and calls["n"] == 2
    before |= {f.path for f in impl.snapshot(events_table).files}
    calls.update(n=0, fail=1)
    rewritten = lake.rewrite(events_table, lambda rows: [rows.where("id % 2 = 0")], "part = 0",
                             touched=lambda st: True, columns=["id"])
    assert merged.version is not None and rewritten.version == merged.version + 1 and calls["n"] == 2
    got = lake.read(events_table)
    assert got.where("part = 0 AND id % 2 = 1").count() == 0 and got.where("part != 0").count() == 200
    # on disk: the committed files and those the two commits replaced (kept until vacuum), no staged leftovers
    committed = {f.path for f in impl.snapshot(events_table).files}
    assert _data_files_on_disk(lake, events_table) == committed | before
