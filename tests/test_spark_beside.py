"""Spark work run beside the caller's: its value, its error, its pool, and cancelling it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from kraft_replay.spark.beside import POOL, Beside, beside


def test_the_value_comes_back_and_the_jobs_ran_in_a_group_and_pool_of_their_own(spark) -> None:
    sc = spark.sparkContext

    def work() -> tuple[int, str | None, str | None]:
        return spark.range(1000).count(), sc.getLocalProperty("spark.scheduler.pool"), sc.getLocalProperty("spark.jobGroup.id")

    with beside(spark, work) as job:
        mine = spark.range(10).count()  # the caller's own job meanwhile
        n, pool, group = job.result()
    assert (mine, n, pool) == (10, 1000, POOL)
    assert group is not None and group.startswith("beside-")
    assert sc.statusTracker().getJobIdsForGroup(group), "its count ran in its group"
    assert sc.getLocalProperty("spark.scheduler.pool") is None  # the caller's thread is untouched


def test_its_pool_is_the_callers_choice_its_properties_its_own_and_it_says_when_it_is_done(spark) -> None:
    sc = spark.sparkContext
    gate = threading.Event()

    def wait() -> tuple[str | None, str | None]:
        gate.wait(30)
        return sc.getLocalProperty("spark.scheduler.pool"), sc.getLocalProperty("kraft.test.caller")

    sc.setLocalProperty("kraft.test.caller", "mine")  # e.g. a micro-batch's execution id: not carried over
    try:
        job = Beside(spark, wait, pool="derive")
        assert not job.done()
        gate.set()
        assert job.result() == ("derive", None)
        assert job.done()
    finally:
        sc.setLocalProperty("kraft.test.caller", None)


def test_its_error_is_raised_by_result_and_on_leaving(spark) -> None:
    def bad() -> None:
        raise ValueError("no such table")

    with pytest.raises(ValueError, match="no such table"):
        with beside(spark, bad) as job:
            job.result()
    with pytest.raises(ValueError, match="no such table"):
        with beside(spark, bad):
            pass


def _slow(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for b in batches:
        time.sleep(60)
        yield b


def test_an_error_in_the_block_cancels_its_jobs_before_going_on(spark) -> None:
    def slow_jobs() -> None:
        for _ in range(3):  # a job after a cancelled one is cancelled too
            try:
                spark.range(2, numPartitions=2).mapInArrow(_slow, "id long").count()
            except Exception:  # noqa: BLE001, S110 - cancelled: go on to the next job
                pass

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the caller failed"):
        with beside(spark, slow_jobs):
            time.sleep(3)  # its first job is running
            raise RuntimeError("the caller failed")
    # cancelled, not waited for: each of its tasks sleeps a minute
    assert time.monotonic() - started < 45
    assert spark.range(5).count() == 5  # the session goes on
