"""Faults: a job killed between writing data files and committing, and concurrent appends."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from lake_helpers import ROOT, events, run_job


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
