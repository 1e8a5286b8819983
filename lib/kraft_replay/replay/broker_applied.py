"""``broker_applied``: each broker's applied offset as a step function of time (facts §5.1, §9.1).

A broker's ``last-applied-record-offset`` is the lastContainedOffset of the newest image it
published; between two samples it is known only at the samples, so the table is the step function
the samples draw: per (cluster, broker), intervals ``[from_time, to_time)`` over which the sampled
offset stayed the same (consecutive samples with one offset merged, ``samples`` of them).

* **Down time**: a gap between two samples longer than ``gap_factor`` × the broker's median sample
  interval means no samples (a broker down, an exporter not scraped): the interval before it ends one
  median interval after its last sample and a ``NO_SAMPLES`` interval (offset null) covers the rest.
* **Restarts**: an interval whose offset is below the previous interval's (a restarted broker loads
  the latest snapshot, facts §5.1) or that follows a ``NO_SAMPLES`` gap is ``restarted``.
* **Stuck**: a broker that applies nothing (network-partitioned from the controllers) draws one
  long ``APPLIED`` interval with many samples; ``cache_lag`` says whether the log moved meanwhile.
* The last interval of a broker is open (``to_time`` null): its offset is the latest known.

One shuffle of the samples by broker, then each task draws its brokers' intervals on numpy
(:func:`applied_intervals`: one sort of the task's samples by broker and time, whole columns, no
Python per row). The median is the lower median, ``sorted[ceil(n/2) - 1]`` of the broker's n sample
intervals, exact at any size.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema

from kraft_replay.replay.schemas import BROKER_APPLIED_SCHEMA
from kraft_replay.spark import tasks_holding
from kraft_replay.spark.arrow import codes, longs, per_task

__all__ = ["broker_applied", "applied_intervals", "samples_by_broker", "sample_order", "previous", "BROKER_APPLIED_COLUMNS", "BY_BROKER", "GAP_FACTOR"]

GAP_FACTOR = 3.0
#: about this many samples per task of :func:`applied_intervals` (a task's samples are in Python memory at once)
TASK_ROWS = 500_000
BROKER_APPLIED_COLUMNS = BROKER_APPLIED_SCHEMA.names
_KEY = ["cluster_id", "broker_id"]
#: the windows' partition columns: the broker first, so that the sort's prefix tells rows apart
#: (docs/design.md, "Versioned tables")
BY_BROKER = ["broker_id", "cluster_id"]


def broker_applied(progress: DataFrame, gap_factor: float = GAP_FACTOR) -> DataFrame:
    """Facts §9.1 / §5.1: the ``broker_applied`` intervals of bronze ``broker_progress`` samples
    (one shuffle by broker: every sample of a broker in one task, :func:`applied_intervals`)."""
    return samples_by_broker(progress).mapInArrow(per_task(partial(applied_intervals, gap_factor=gap_factor)),
                                                  from_arrow_schema(BROKER_APPLIED_SCHEMA))


def samples_by_broker(progress: DataFrame, rows: int | None = None) -> DataFrame:
    """The samples :func:`applied_intervals` reads, shuffled by broker (every sample of a broker in one
    task; ``rows``: the samples, when known: tasks of about :data:`TASK_ROWS`; else the shuffle partitions)."""
    p = progress.select(*_KEY, "observed_at", "applied_offset", "applied_record_time")
    return p.repartition(*BY_BROKER) if rows is None else p.repartition(
        tasks_holding(progress.sparkSession, rows, TASK_ROWS), *BY_BROKER)


def sample_order(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``t`` (``broker_progress`` samples: ``cluster_id``, ``broker_id``, ``observed_at``)
    in order of cluster, broker and time (a null time first), a sample of a broker at a time it was
    sampled already left out (the first met is kept: the sort is stable); and where each broker's
    samples start in that order (a mask)."""
    cluster = codes(t.column("cluster_id"))[0]
    broker, has_broker = longs(t.column("broker_id"))
    broker = np.where(has_broker, broker, np.iinfo(np.int64).min)  # below any int32 id
    us, has_us = longs(t.column("observed_at"))
    order = np.lexsort((us, has_us, broker, cluster))
    cluster, broker, us, has_us = cluster[order], broker[order], us[order], has_us[order]
    first = np.ones(len(order), bool)
    first[1:] = (cluster[1:] != cluster[:-1]) | (broker[1:] != broker[:-1])
    dup = np.zeros(len(order), bool)
    dup[1:] = ~first[1:] & (has_us[1:] == has_us[:-1]) & (~has_us[1:] | (us[1:] == us[:-1]))
    return order[~dup], first[~dup]


def previous(values: np.ndarray, valid: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's previous value within its broker's rows (``first``: where they start) and whether
    there is one (not at a broker's first row, nor after a null)."""
    prev = np.empty_like(values)
    prev[:1] = 0
    prev[1:] = values[:-1]
    has = ~first
    has[1:] &= valid[:-1]
    return prev, has


def applied_intervals(t: pa.Table, gap_factor: float = GAP_FACTOR) -> pa.Table:
    """Facts §9.1 / §5.1 (the module docstring's rules): one task's ``broker_progress`` samples — every
    sample of each of its brokers — as ``broker_applied`` rows. Samples of a broker at one time count
    once (the first met); a null time sorts first and has no interval on either side; a null offset
    continues the run before it."""
    if not t.num_rows:
        return BROKER_APPLIED_SCHEMA.empty_table()
    keep, first = sample_order(t)
    us, has_us = (a[keep] for a in longs(t.column("observed_at")))
    off, has_off = longs(t.column("applied_offset"))
    off, has_off = off[keep], has_off[keep]
    n = len(keep)
    group = np.cumsum(first) - 1
    # each sample's interval since the one before (null at a broker's first, or next to a null time)
    gap_us, has_gap = previous(us, has_us, first)
    gap_us, has_gap = us - gap_us, has_gap & has_us
    # the broker's lower median interval: its gaps sorted, the ceil(k/2)-th
    g_gaps, v_gaps = group[has_gap], gap_us[has_gap]
    sorted_gaps = v_gaps[np.lexsort((v_gaps, g_gaps))]
    k = np.bincount(g_gaps, minlength=int(group[-1]) + 1)
    at = np.cumsum(k) - k + np.maximum(np.ceil(0.5 * k).astype(np.int64), 1) - 1
    med = sorted_gaps[np.minimum(at, len(sorted_gaps) - 1)][group] if len(sorted_gaps) else np.zeros(n, np.int64)
    gap = has_gap & (k > 0)[group] & (gap_us.astype(np.float64) > med.astype(np.float64) * gap_factor)
    # a run starts at a broker's first sample, after a null offset, at another offset, or after a gap
    prev_off, has_prev = previous(off, has_off, first)
    new = ~has_prev | gap | (has_off & (off != prev_off))
    run_first = np.flatnonzero(new)
    run_last = np.r_[run_first[1:], n] - 1
    nxt = run_last + 1  # the next run's first sample, when it is the same broker's
    follows = nxt < n
    follows[follows] = ~first[nxt[follows]]
    nxt = np.minimum(nxt, n - 1)
    gap_after = follows & gap[nxt]
    m = med[run_first]
    end_us = np.where(gap_after, us[run_last] + m, us[nxt])
    end_ok = np.where(gap_after, has_us[run_last], follows & has_us[nxt])
    restarted = gap[run_first] | (has_prev[run_first] & has_off[run_first] & (off[run_first] < prev_off[run_first]))
    rows = keep[run_first]
    applied = {
        "cluster_id": t.column("cluster_id").take(rows), "broker_id": t.column("broker_id").take(rows),
        "from_time": pa.array(us[run_first], pa.int64(), mask=~has_us[run_first]),
        "to_time": pa.array(end_us, pa.int64(), mask=~end_ok),
        "state": pa.array(np.full(len(rows), "APPLIED", object), pa.string()),
        "applied_offset": pa.array(off[run_first], pa.int64(), mask=~has_off[run_first]),
        "applied_record_time": pc.cast(t.column("applied_record_time").take(keep[run_last]), pa.int64()),
        "samples": pa.array(run_last - run_first + 1, pa.int64()),
        "restarted": pa.array(restarted),
    }
    g = np.flatnonzero(gap_after)  # the NO_SAMPLES interval of each gap
    down = {
        "cluster_id": t.column("cluster_id").take(rows[g]), "broker_id": t.column("broker_id").take(rows[g]),
        "from_time": pa.array(end_us[g], pa.int64(), mask=~end_ok[g]),
        "to_time": pa.array(us[nxt[g]], pa.int64()),
        "state": pa.array(np.full(len(g), "NO_SAMPLES", object), pa.string()),
        "applied_offset": pa.nulls(len(g), pa.int64()), "applied_record_time": pa.nulls(len(g), pa.int64()),
        "samples": pa.array(np.zeros(len(g), np.int64)), "restarted": pa.array(np.zeros(len(g), bool)),
    }
    out = pa.concat_tables([pa.table(applied), pa.table(down)]).combine_chunks()
    return pa.table([out.column(f.name).cast(f.type) for f in BROKER_APPLIED_SCHEMA], schema=BROKER_APPLIED_SCHEMA)
