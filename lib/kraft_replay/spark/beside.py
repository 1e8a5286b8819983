"""Spark work run beside the caller's, in a thread of its own (knows nothing of Kafka).

A driver that submits its jobs one after another leaves the cores idle while it plans the next
one, and a job of a few small stages holds them less than a heavy one can use. :func:`beside` runs one
function's jobs in another thread while the caller goes on with its own: the tasks of both share the
cores, and each side's driver work overlaps the other's tasks.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

__all__ = ["Beside", "beside", "POOL"]

#: the scheduler pool of the jobs run beside (``spark.scheduler.pool``)
POOL = "beside"

T = TypeVar("T")


class Beside(Generic[T]):
    """``fn()`` running in a thread of its own, its Spark jobs in a job group of their own and in the
    scheduler pool ``pool``. The thread's local properties are these two alone: nothing of the caller's
    is carried over (a thread started from a streaming micro-batch would otherwise carry that batch's
    SQL execution ids into work that outlives it)."""

    def __init__(self, spark, fn: Callable[[], T], *, pool: str = POOL,  # noqa: ANN001 - a SparkSession
                 name: str = "kraft-replay-beside") -> None:
        self._sc = spark.sparkContext
        self._group = f"beside-{uuid.uuid4().hex[:12]}"
        self._value: T | None = None
        self._error: BaseException | None = None

        def run() -> None:
            # pinned thread mode: this thread's calls run on a JVM thread of its own, with its own properties
            self._sc.setJobGroup(self._group, "run beside the caller's jobs", interruptOnCancel=False)
            # under FAIR scheduling a pool of its own: the caller's jobs and these take the free cores in turn
            self._sc.setLocalProperty("spark.scheduler.pool", pool)
            try:
                self._value = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
                self._error = exc

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    def done(self) -> bool:
        """Whether ``fn`` has ended (:meth:`result` then returns at once)."""
        return not self._thread.is_alive()

    def result(self) -> T:
        """Wait for ``fn``; its value, or its exception raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def cancel(self) -> None:
        """Cancel ``fn``'s jobs until its thread ends (a job it starts after a cancel is cancelled in
        turn), and wait for it; its exception is dropped."""
        while True:
            self._sc.cancelJobGroup(self._group)
            self._thread.join(timeout=0.5)
            if not self._thread.is_alive():
                return


@contextmanager
def beside(spark, fn: Callable[[], T]) -> Iterator[Beside[T]]:  # noqa: ANN001 - a SparkSession
    """``fn()`` started in a thread of its own for the block's duration: the block takes its value with
    :meth:`Beside.result`. When the block raises (an error, an interrupt), ``fn``'s jobs are cancelled
    and its thread is waited for before the exception goes on; when it returns without asking, ``fn`` is
    waited for (its exception raised)."""
    job = Beside(spark, fn)
    try:
        yield job
    except BaseException:
        job.cancel()
        raise
    job.result()
