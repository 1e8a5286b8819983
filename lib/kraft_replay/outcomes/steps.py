"""Step functions the outcome tables look requests up in, broadcast to the Python workers (docs/design.md,
"Shared lookups of the outcome tables"): per cluster, each broker's applied offset over time
(``broker_applied``), the log's end over time and its batches by offset (``log_batches``), its known
brokers and its log span. Built once on the driver by :func:`broadcast_steps`; read with ``searchsorted``
by :mod:`kraft_replay.outcomes.scope_play` (consistency) and :mod:`kraft_replay.outcomes.partition_views`
(fencing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.spark.arrow import codes

__all__ = ["NULL", "OPEN", "BrokerSteps", "ClusterSteps", "cluster_steps", "log_steps", "cluster_log_steps", "arrow_micros",
           "broadcast_steps", "broadcast_read_steps", "held_broadcast", "released_broadcasts"]

NULL = np.iinfo(np.int64).min  # no applied offset (no interval, NO_SAMPLES)
OPEN = np.iinfo(np.int64).max  # an interval still open (to_time null)

@dataclass(frozen=True)
class BrokerSteps:
    """One broker's ``broker_applied`` intervals in ``from_time`` order (µs): ``start``, ``end``
    (:data:`OPEN` when open), ``offset`` (the applied offset of an ``APPLIED`` interval, else
    :data:`NULL`) and ``high`` (running maximum of ``offset``)."""

    start: np.ndarray
    end: np.ndarray
    offset: np.ndarray
    high: np.ndarray


@dataclass(frozen=True)
class ClusterSteps:
    """What a cluster's requests are looked up in: its known brokers (sorted), its log span (µs,
    both ends included; None: no batches), each broker's :class:`BrokerSteps`, its batches' base
    offsets (ascending) with their append times (µs), the log's end over time: the batches'
    append times (ascending, ``end_time``) with the largest last offset appended at or before each
    (``end_high``), and — for :func:`log_steps` only — their last offsets (ascending, ``by_last``) with
    their append times."""

    known: np.ndarray
    span: tuple[int, int] | None
    brokers: dict[int, BrokerSteps]
    batch_base: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    batch_time: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    end_time: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    end_high: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    by_last: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    by_last_time: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def log_end_at(self, t: np.ndarray) -> np.ndarray:
        """The end of the replayed log at each time ``t`` (µs): the largest ``batch_last_offset`` of the
        batches appended at or before it; -1 before any (or for a :data:`NULL` time)."""
        i = np.searchsorted(self.end_time, t, "right") - 1
        return np.where(i >= 0, self.end_high[np.maximum(i, 0)] if len(self.end_high) else -1, -1).astype(np.int64)

    def is_known(self, broker: np.ndarray) -> np.ndarray:
        """Whether each broker id is one of the cluster's known brokers."""
        return np.isin(broker, self.known)

    def inside(self, t: np.ndarray) -> np.ndarray:
        """Whether each time ``t`` (µs) is inside the log span (both ends included)."""
        if self.span is None:
            return np.zeros(len(t), bool)
        return (t >= self.span[0]) & (t <= self.span[1])

    def batch_time_at(self, offset: np.ndarray) -> np.ndarray:
        """The append time (µs) of the batch holding each offset (the largest ``batch_base_offset``
        at or below it); :data:`NULL` for a negative offset or one before every batch."""
        i = np.searchsorted(self.batch_base, offset, "right") - 1
        ok = (i >= 0) & (offset >= 0)
        return np.where(ok, self.batch_time[np.maximum(i, 0)] if len(self.batch_time) else NULL, NULL)

    def next_batch_time(self, offset: np.ndarray) -> np.ndarray:
        """The append time (µs) of the first batch whose last offset is at or above each offset (the
        batch holding it, or the next one after a gap); :data:`NULL` past the last batch."""
        i = np.searchsorted(self.by_last, offset, "left")
        ok = i < len(self.by_last)
        return np.where(ok, self.by_last_time[np.minimum(i, len(self.by_last) - 1)] if len(self.by_last) else NULL, NULL)

    def applied_at(self, broker: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Facts §9.1: the applied offset of ``broker[i]`` at ``t[i]`` (the interval with
        ``start <= t < end``), :data:`NULL` in a ``NO_SAMPLES`` interval or outside every interval."""
        out = np.full(len(t), NULL, dtype=np.int64)
        for b in np.unique(broker):
            s = self.brokers.get(int(b))
            if s is None:
                continue
            m = broker == b
            i = np.searchsorted(s.start, t[m], "right") - 1
            ok = i >= 0
            j = np.where(ok, i, 0)
            ok &= t[m] < s.end[j]
            out[m] = np.where(ok, s.offset[j], NULL)
        return out

    def caught_up(self, broker: np.ndarray, t: np.ndarray, until: np.ndarray, token: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Seed 000, wait policy: the earliest ``APPLIED`` interval of ``broker[i]`` starting in
        (``t[i]``, ``until[i]``] with an offset >= ``token[i]``: its start and offset (:data:`NULL` when
        none). Found by ``searchsorted`` on the running maximum when no earlier interval reached the
        token (an offset going back, after a restart, is looked at interval by interval)."""
        at = np.full(len(t), NULL, dtype=np.int64)
        off = np.full(len(t), NULL, dtype=np.int64)
        for b in np.unique(broker):
            s = self.brokers.get(int(b))
            if s is None:
                continue
            idx = np.flatnonzero(broker == b)
            lo = np.searchsorted(s.start, t[idx], "right")
            hi = np.searchsorted(s.start, until[idx], "right")
            before = np.where(lo > 0, s.high[np.maximum(lo - 1, 0)], NULL)
            tok = token[idx]
            j = np.searchsorted(s.high, tok, "left")
            plain = before < tok
            hit = plain & (j < hi)
            at[idx[hit]] = s.start[j[hit]]
            off[idx[hit]] = s.offset[j[hit]]
            for k in np.flatnonzero(~plain):  # the broker had reached the token before t, then went back
                w = np.flatnonzero(s.offset[lo[k]:hi[k]] >= tok[k])
                if len(w):
                    at[idx[k]] = s.start[lo[k] + w[0]]
                    off[idx[k]] = s.offset[lo[k] + w[0]]
        return at, off

    def next_broker(self, broker: np.ndarray) -> np.ndarray:
        """The next known broker id after ``broker`` (ascending, cyclic)."""
        if not len(self.known):
            return broker
        i = np.searchsorted(self.known, broker, "right")
        return np.where(i < len(self.known), self.known[np.minimum(i, len(self.known) - 1)], self.known[0])


def cluster_steps(intervals: pa.Table, known: pa.Table, spans: pa.Table | None, batches: pa.Table
                  ) -> dict[str, ClusterSteps]:
    """Per cluster, its :class:`ClusterSteps` from ``intervals`` (``cluster_id``, ``broker_id``,
    ``start``, ``end``, ``offset``: µs and applied offset, null end = open, null offset = not applied),
    ``known`` (``cluster_id``, ``broker_id``), ``spans`` (``cluster_id``, ``span_start``,
    ``span_end`` in µs; None: the log span of :func:`kraft_replay.outcomes.lookups.log_span`, from the
    batches' first and last append times and the intervals' last start) and ``batches``
    (``cluster_id``, ``base``, ``last``, ``time``: base and last offset, append µs)."""
    icode, inames = codes(intervals.column("cluster_id"))
    bid = intervals.column("broker_id").to_numpy(zero_copy_only=False).astype(np.int64)
    start = intervals.column("start").to_numpy(zero_copy_only=False).astype(np.int64)
    end = intervals.column("end").fill_null(OPEN).to_numpy().astype(np.int64)
    offset = intervals.column("offset").fill_null(NULL).to_numpy().astype(np.int64)
    o = _order(icode, bid, start)
    if o is not None:
        icode, bid, start, end, offset = icode[o], bid[o], start[o], end[o], offset[o]
    steps: dict[str, dict[int, BrokerSteps]] = {}
    last_start: dict[str, int] = {}
    for a, b in _runs(icode, bid):
        if icode[a] < 0:  # no cluster id: looked up by no request
            continue
        c = inames[icode[a]]
        off = offset[a:b].copy()
        steps.setdefault(c, {})[int(bid[a])] = BrokerSteps(start[a:b].copy(), end[a:b].copy(), off,
                                                          np.maximum.accumulate(off))
        last_start[c] = max(last_start.get(c, NULL), int(start[b - 1]))
    kn: dict[str, list[int]] = {}
    for c, b in zip(known.column("cluster_id").to_pylist(), known.column("broker_id").to_pylist()):
        kn.setdefault(c, []).append(int(b))
    bcode, bnames = codes(batches.column("cluster_id"))
    base = batches.column("base").to_numpy(zero_copy_only=False).astype(np.int64)
    last = batches.column("last").to_numpy(zero_copy_only=False).astype(np.int64)
    btime = batches.column("time").to_numpy(zero_copy_only=False).astype(np.int64)
    bb, ee = {}, {}
    for k in _groups(bcode, base):  # by offset: the batch holding an offset
        bb[bnames[bcode[k[0]]]] = (base[k], btime[k])
    for k in _groups(bcode, btime, last):  # by append time: the log's end at a time
        ee[bnames[bcode[k[0]]]] = (btime[k], np.maximum.accumulate(last[k]))
    if spans is None:  # first and last append time, or the last interval start when later
        sp = {c: (int(t[0]), max(int(t[-1]), last_start.get(c, NULL))) for c, (t, _) in ee.items()}
    else:
        sp = {c: (lo, hi) for c, lo, hi in zip(spans.column("cluster_id").to_pylist(),
                                              spans.column("span_start").to_pylist(),
                                              spans.column("span_end").to_pylist()) if lo is not None}
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    return {c: ClusterSteps(np.array(sorted(kn.get(c, [])), dtype=np.int64), sp.get(c), steps.get(c, {}),
                            *bb.get(c, empty), *ee.get(c, empty)) for c in {*steps, *kn, *sp, *bb}}


def log_steps(batches: pa.Table) -> dict[str, ClusterSteps]:
    """Per cluster, :func:`cluster_log_steps` of its rows of ``batches`` (``cluster_id``, ``last``,
    ``time``: :func:`cluster_steps`' ``batches``, ``base`` not read)."""
    bcode, bnames = codes(batches.column("cluster_id"))
    last = batches.column("last").to_numpy(zero_copy_only=False).astype(np.int64)
    btime = batches.column("time").to_numpy(zero_copy_only=False).astype(np.int64)
    return {bnames[bcode[k[0]]]: cluster_log_steps(last[k], btime[k]) for k in _groups(bcode)}


def cluster_log_steps(last: np.ndarray, time: np.ndarray) -> ClusterSteps:
    """One cluster's log's end over time and its batches by last offset (``by_last``,
    :meth:`ClusterSteps.next_batch_time`) from its batches' last offsets and append times (µs, int64;
    at least one): what ``cache_lag``'s samples look up, nothing else (no broker steps, no batches by
    base offset). 16 bytes per batch when the two orders are one (append times growing with offsets,
    the usual log: one pair of arrays serves both, pickled once), 32 otherwise."""
    k = _order(time, last)
    t, high = (time, last) if k is None else (time[k], last[k])
    high = np.maximum.accumulate(high)
    k = _order(last)
    by, by_t = (last, time) if k is None else (last[k], time[k])
    if np.array_equal(by, high) and np.array_equal(by_t, t):
        by, by_t = high, t
    none = np.zeros(0, np.int64)
    return ClusterSteps(none, (int(t[0]), int(t[-1])), {}, none, none, t, high, by, by_t)


def arrow_micros(col: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """A timestamp column as int64 microseconds since the epoch (UTC)."""
    return pc.cast(col, pa.timestamp("us", tz="UTC"), safe=False).cast(pa.int64())


def _groups(code: np.ndarray, *keys: np.ndarray) -> list[np.ndarray]:
    """The row indexes of each cluster (``code`` >= 0) in the order of ``keys``."""
    o = _order(code, *keys)
    o = np.arange(len(code)) if o is None else o
    return [o[a:b] for a, b in _runs(code[o]) if code[o[a]] >= 0]


def _order(*keys: np.ndarray) -> np.ndarray | None:
    """The lexicographic order of parallel ``keys`` (the first most significant); None when they are in
    order already (tables written sorted need no sort)."""
    n = len(keys[0])
    if n < 2:
        return None
    undecided = np.ones(n - 1, bool)
    for k in keys:
        if (undecided & (k[:-1] > k[1:])).any():
            return np.lexsort(keys[::-1])
        undecided &= k[:-1] == k[1:]
    return None


def broadcast_steps(broker_applied, brokers, log_batches):  # noqa: ANN001, ANN201 - DataFrames -> Broadcast
    """Every cluster's :class:`ClusterSteps` (:func:`cluster_steps`) from the silver tables, built on the
    driver and broadcast to the workers (``.value``: cluster id -> :class:`ClusterSteps`; 32 bytes per
    ``broker_applied`` interval, 24 per batch): :func:`broadcast_read_steps` of the frames collected as
    Arrow (one Spark collect each). Destroyed when the innermost :func:`released_broadcasts` block
    around the call ends, else by the caller (or with the Spark context)."""
    frames = {"broker_applied": broker_applied, "brokers": brokers, "log_batches": log_batches}
    return broadcast_read_steps(broker_applied.sparkSession, lambda t, cols: frames[t].select(*cols).toArrow())


def broadcast_read_steps(spark, read: Callable[[str, list[str]], pa.Table]):  # noqa: ANN001, ANN201
    """:func:`broadcast_steps` from the tables read as Arrow on the driver: ``read(table, columns)``
    gives those columns of ``broker_applied``, ``brokers`` and ``log_batches`` (e.g.
    :meth:`kraft_replay.lake.Lake.read_arrow` at the snapshot the job reads: no Spark job, no rows
    converted by the JVM). Same steps, same release."""
    ba = read("broker_applied", ["cluster_id", "broker_id", "from_time", "to_time", "state", "applied_offset"])
    applied = pc.fill_null(pc.equal(ba.column("state"), "APPLIED"), False)
    iv = pa.table({"cluster_id": ba.column("cluster_id"), "broker_id": ba.column("broker_id"),
                   "start": arrow_micros(ba.column("from_time")), "end": arrow_micros(ba.column("to_time")),
                   "offset": pc.if_else(applied, ba.column("applied_offset"), pa.scalar(None, pa.int64()))})
    del ba
    lb = read("log_batches", ["cluster_id", "batch_base_offset", "batch_last_offset", "append_time"])
    batches = pa.table({"cluster_id": lb.column("cluster_id"), "base": lb.column("batch_base_offset"),
                        "last": lb.column("batch_last_offset"), "time": arrow_micros(lb.column("append_time"))})
    known = read("brokers", ["cluster_id", "broker_id"]).group_by(["cluster_id", "broker_id"]).aggregate([])
    steps = cluster_steps(iv, known, None, batches)
    del iv, batches
    return held_broadcast(spark, steps)


def held_broadcast(spark, value: object):  # noqa: ANN001, ANN201 - a SparkSession -> Broadcast
    """``value`` broadcast to the workers, destroyed when the innermost :func:`released_broadcasts`
    block around the call ends (else by the caller)."""
    b = spark.sparkContext.broadcast(value)
    if _HELD:
        _HELD[-1].append(b)
    return b


_HELD: list[list] = []  # the broadcasts of each open released_broadcasts block


@contextmanager
def released_broadcasts() -> Iterator[None]:
    """The broadcasts :func:`broadcast_steps` makes inside the block are destroyed when it ends (their
    file on the driver and their blocks on the workers): a job computing frames that read them keeps
    them until its writes are done, a long-running stream does not pile them up."""
    _HELD.append([])
    try:
        yield
    finally:
        for b in _HELD.pop():
            try:
                b.destroy()
            except Exception:  # noqa: BLE001 - destroyed already by its user (consistency destroys its own)
                pass


def _runs(*keys: np.ndarray) -> list[tuple[int, int]]:
    """The [start, end) bounds of the runs of equal ``keys`` in sorted parallel arrays."""
    n = len(keys[0])
    if not n:
        return []
    change = np.zeros(n - 1, dtype=bool)
    for k in keys:
        change |= k[1:] != k[:-1]
    cuts = [0, *(np.flatnonzero(change) + 1).tolist(), n]
    return list(zip(cuts[:-1], cuts[1:]))


