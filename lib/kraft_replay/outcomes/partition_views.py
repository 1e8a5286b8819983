"""Seed 003's lookups on Arrow batches (docs/design.md, "``fencing_outcomes``, ``fencing_summary``"): for
each produce request, the partition as its target broker's cache held it (the ``partitions`` version
visible at the broker's applied offset then) and as the log had it (at the log end then).

The versions are looked up in a :class:`VersionIndex` by ``searchsorted`` on (partition, offset) —
facts §5.2 (a version is visible over ``[valid_from_offset, valid_to_offset)``; versions never
visible are skipped; at one ``valid_from_offset`` the last record wins) — built one of two ways:
Spark hands :func:`partition_views` the requests and the versions of one hash bucket of partitions
(``repartition`` by cluster, topic id and partition id: one shuffle, no sort) and each task indexes
its versions; or the whole table is indexed once on the driver and broadcast, and
:func:`indexed_views` takes the requests alone, as they are read. The applied offsets and log ends
come from the :class:`~kraft_replay.outcomes.steps.ClusterSteps` broadcast to the workers (§9.1: a
broker's applied offset at a time).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.outcomes.steps import NULL, ClusterSteps
from kraft_replay.spark.arrow import arrow_schema, codes

__all__ = ["partition_views", "indexed_views", "version_index", "VersionIndex", "VIEW_INPUT", "VIEW_OUTPUT",
           "REQUEST_PASS", "VERSION_COLUMNS"]

#: request columns passed through as they come (``_t``: request time, µs)
REQUEST_PASS = ["request_id", "_t", "producer_id", "topic_name", "target_broker", "acks", "produce_version",
                "current_leader_epoch", "believed_leader_epoch"]
#: a version's columns (besides its key)
VERSION_COLUMNS = ["_from", "_to", "_rec", "deleted", "_since", "leader", "leader_epoch", "leader_recovery_state",
                   "replicas", "isr"]
#: the one frame :func:`partition_views` reads: ``_kind`` 1 = a request (:data:`REQUEST_PASS` set),
#: 0 = a partitions version (``_from``, ``_to``, ``_rec``: valid_from/valid_to/record offset; ``_since``:
#: valid_from_time in µs; the rest as in ``partitions``); the other kind's columns are null
VIEW_INPUT = ("cluster_id string, topic_id string, partition_id int, _kind int, request_id long, _t long, "
              "producer_id long, topic_name string, target_broker int, acks int, produce_version int, "
              "current_leader_epoch int, believed_leader_epoch int, _from long, _to long, _rec long, deleted boolean, "
              "_since long, leader int, leader_epoch int, leader_recovery_state int, replicas array<int>, isr array<int>")
#: one row per request: the request, its broker's state (``applied_offset`` null: none), the log end,
#: whether the broker is known and the time inside the log span, the view (``_in_replicas``: the broker
#: is one of the view's replicas) and the truth (``true_exists_since``: µs, a tombstone's included)
VIEW_OUTPUT = ("cluster_id string, topic_id string, partition_id int, request_id long, _t long, producer_id long, "
               "topic_name string, target_broker int, acks int, produce_version int, current_leader_epoch int, "
               "believed_leader_epoch int, applied_offset long, log_end_offset long, _known boolean, _inside boolean, "
               "view_exists boolean, _in_replicas boolean, view_isr array<int>, view_leader int, view_leader_epoch int, "
               "true_exists boolean, _true_leader int, _true_epoch int, _true_lrs int, true_exists_since long")


def partition_views(batches: Iterator[pa.RecordBatch], steps: dict[str, ClusterSteps]) -> Iterator[pa.RecordBatch]:
    """Seed 003 / facts §5.2, §9.1: the rows of one task (every request and version of its partitions,
    :data:`VIEW_INPUT`) -> one row per request, :data:`VIEW_OUTPUT`."""
    # each kind's own columns only; a batch of one kind is taken whole (the shuffle hands a task its
    # map outputs one after another: requests and versions come in long runs), a mixed one filtered
    kinds: tuple[list[pa.RecordBatch], list[pa.RecordBatch]] = ([], [])
    for b in batches:
        k = b.column("_kind")
        lo, hi = pc.min_max(k).values()
        if lo == hi:
            kinds[lo.as_py() == 1].append(b)
        elif b.num_rows:
            is_req = pc.equal(k, 1)
            kinds[0].append(b.filter(pc.invert(is_req)))
            kinds[1].append(b.filter(is_req))
    if not kinds[1]:
        return
    schema = kinds[1][0].schema
    req = pa.Table.from_batches(kinds[1], schema).select(["cluster_id", "topic_id", "partition_id", *REQUEST_PASS])
    ver = pa.Table.from_batches(kinds[0], schema).select(["cluster_id", "topic_id", "partition_id", *VERSION_COLUMNS])
    del kinds
    if req.num_rows:
        yield from _views(req, version_index(ver), steps).to_batches(max_chunksize=1 << 16)


def indexed_views(batches: Iterator[pa.RecordBatch], steps: dict[str, ClusterSteps], index: VersionIndex
                  ) -> Iterator[pa.RecordBatch]:
    """:func:`partition_views` of requests alone (:data:`VIEW_INPUT`'s key and :data:`REQUEST_PASS`
    columns, any partitioning), their partitions' versions given as one :class:`VersionIndex` (built
    once from the whole ``partitions`` table, broadcast): batch by batch, one row per request."""
    for b in batches:
        if b.num_rows:
            yield from _views(pa.Table.from_batches([b]), index, steps).to_batches(max_chunksize=1 << 16)


def _ints(col: pa.ChunkedArray, fill: int) -> np.ndarray:
    return col.fill_null(fill).to_numpy().astype(np.int64)


def _dictionary(col: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """:func:`~kraft_replay.spark.arrow.codes` of a string column, the dictionary as an Arrow array
    (the value set requests are looked up in)."""
    code, names = codes(col)
    return code, pa.array(names, pa.string())


#: the version columns a view reads (from the index's ``fields``, in the versions' own order)
_VIEW_FIELDS = ["leader", "leader_epoch", "leader_recovery_state", "replicas", "isr", "_since"]


@dataclass(frozen=True)
class VersionIndex:
    """Facts §5.2: the partitions' versions ever visible (open, or ``valid_to_offset`` > ``valid_from_offset``),
    sorted by partition, ``valid_from_offset`` and record offset, searchable by (partition, offset).

    A partition is a (cluster, topic id, partition id) code packed into an int64 ``raw`` key (the
    dictionaries ``clusters`` / ``topics``, partition ids from ``pid_lo`` over ``n_pids``); ``keys``
    are the distinct ones, a version's *dense* key its position there. ``packed`` = dense key ×
    ``width`` + the version's ``valid_from_offset`` as ``offset - lo + 1`` (or, when that does not fit
    an int64, its rank among the distinct ``ranks``, from 1): ascending, so the version visible at an
    offset is found by one ``searchsorted``. ``to`` and ``deleted`` follow that order; ``row`` maps it
    to the versions' rows in ``fields`` (:data:`_VIEW_FIELDS`, as read)."""

    clusters: pa.Array
    topics: pa.Array
    pid_lo: int
    n_pids: int
    keys: np.ndarray
    lo: int
    width: int
    ranks: np.ndarray | None
    packed: np.ndarray
    to: np.ndarray
    deleted: np.ndarray
    row: np.ndarray
    fields: pa.Table

    def __len__(self) -> int:
        return len(self.packed)

    def dense(self, cluster: pa.ChunkedArray, topic: pa.ChunkedArray, pid: pa.ChunkedArray) -> np.ndarray:
        """The dense key of each (cluster, topic id, partition id); -1 when no version has it (or a part is null)."""
        if not len(self.keys):
            return np.full(len(pid), -1, np.int64)
        c = pc.index_in(cluster, value_set=self.clusters).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        t = pc.index_in(topic, value_set=self.topics).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        p = _ints(pid, 0) - self.pid_lo
        ok = (c >= 0) & (t >= 0) & (p >= 0) & (p < self.n_pids) & pid.is_valid().to_numpy(zero_copy_only=False)
        raw = np.where(ok, (c * len(self.topics) + t) * self.n_pids + p, 0)
        d = np.minimum(np.searchsorted(self.keys, raw), len(self.keys) - 1)
        return np.where(ok & (self.keys[d] == raw), d, -1)

    def at(self, dense: np.ndarray, offset: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per request (its dense key, an offset, whether it has one), the version visible at the offset
        (its row in ``fields``), whether one is visible, whether it is live (not a tombstone)."""
        n = len(dense)
        has = has & (dense >= 0)
        if not len(self):
            z = np.zeros(n, bool)
            return np.zeros(n, np.int64), z, z
        if self.ranks is None:
            part = np.clip(offset - self.lo + 1, 0, self.width - 1)
        else:
            part = np.searchsorted(self.ranks, offset, "right")
        needle = np.where(has, dense * self.width + part, -1)
        o = np.argsort(needle)  # needles in order: the search walks the versions once, not at random
        i = np.empty(n, np.int64)
        i[o] = np.searchsorted(self.packed, needle[o], "right") - 1
        j = np.maximum(i, 0)
        visible = has & (i >= 0) & (self.packed[j] // self.width == dense) & (offset < self.to[j])
        return self.row[j], visible, visible & ~self.deleted[j]


def version_index(ver: pa.Table) -> VersionIndex:
    """The :class:`VersionIndex` of ``ver`` (a key and :data:`VERSION_COLUMNS`, as :data:`VIEW_INPUT`)."""
    c, clusters = _dictionary(ver.column("cluster_id"))
    t, topics = _dictionary(ver.column("topic_id"))
    pid = ver.column("partition_id")
    vfrom, vrec = _ints(ver.column("_from"), NULL), _ints(ver.column("_rec"), -1)
    vto = _ints(ver.column("_to"), np.iinfo(np.int64).max)
    to_null = ver.column("_to").is_null().to_numpy(zero_copy_only=False)
    ok = (c >= 0) & (t >= 0) & pid.is_valid().to_numpy(zero_copy_only=False) & (
        to_null | (ver.column("_from").is_valid().to_numpy(zero_copy_only=False) & (vto > vfrom)))
    p = _ints(pid, 0)
    pid_lo = int(p[ok].min()) if ok.any() else 0
    n_pids = int(p[ok].max()) - pid_lo + 1 if ok.any() else 1
    if len(clusters) * len(topics) * n_pids >= 1 << 63:  # never with int32 ids and < 2^31 topics per cluster
        raise ValueError("partition keys do not fit an int64")
    raw = (c * len(topics) + t) * n_pids + (p - pid_lo)
    order = _order(raw, vfrom, vrec, ok)
    order = order[ok[order]]
    raw, vfrom = raw[order], vfrom[order]
    start = np.ones(len(raw), bool)
    start[1:] = raw[1:] != raw[:-1]
    keys = raw[start]
    dense = np.cumsum(start) - 1
    lo = int(vfrom.min()) if len(vfrom) else 0
    width = (int(vfrom.max()) - lo + 2) if len(vfrom) else 1
    ranks = None
    if len(keys) * width >= 1 << 62:  # offsets too wide to pack: their ranks among the versions' offsets
        ranks = np.unique(vfrom)
        width = len(ranks) + 1
        part = np.searchsorted(ranks, vfrom) + 1
    else:
        part = vfrom - lo + 1
    deleted = ver.column("deleted").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    return VersionIndex(clusters, topics, pid_lo, n_pids, keys, lo, width, ranks, dense * width + part,
                        vto[order], deleted[order], order, ver.select(_VIEW_FIELDS).combine_chunks())


def _order(raw: np.ndarray, vfrom: np.ndarray, vrec: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """The order of the rows by (``raw``, ``vfrom``, ``vrec``) — only the ``ok`` rows' places matter:
    one stable (radix) sort of (``raw``, ``vfrom``) packed into an int64 when that fits, the runs of
    equal pairs then ordered by ``vrec`` (~5× faster than ``lexsort`` on 9.5M rows); else ``lexsort``."""
    if ok.any():
        lo = int(vfrom[ok].min())
        width = int(vfrom[ok].max()) - lo + 1
        if (int(raw[ok].max()) + 1) * width < 1 << 63:
            packed = np.where(ok, raw * width + (vfrom - lo), -1)
            order = np.argsort(packed, kind="stable")
            ps = packed[order]
            tie = np.flatnonzero(ps[1:] == ps[:-1])
            if len(tie):  # several records at one offset of one partition: by record offset
                at = np.unique(np.concatenate([tie, tie + 1]))
                sub = order[at]
                order[at] = sub[np.lexsort((vrec[sub], packed[sub]))]
            return order
    return np.lexsort((vrec, vfrom, raw))


def _views(req: pa.Table, index: VersionIndex, steps: dict[str, ClusterSteps]) -> pa.Table:
    n = req.num_rows
    t = _ints(req.column("_t"), NULL)
    target = _ints(req.column("target_broker"), -1)
    applied = np.full(n, NULL, np.int64)
    end = np.full(n, -1, np.int64)
    known = np.zeros(n, bool)
    inside = np.zeros(n, bool)
    code, names = codes(req.column("cluster_id"))
    for k, c in enumerate(names):  # the broker states and log ends of each cluster's requests
        cs = steps.get(c)
        if cs is None:
            continue
        m = code == k
        applied[m] = cs.applied_at(target[m], t[m])
        end[m] = cs.log_end_at(t[m])
        known[m] = cs.is_known(target[m])
        inside[m] = cs.inside(t[m]) & (t[m] != NULL)

    dense = index.dense(req.column("cluster_id"), req.column("topic_id"), req.column("partition_id"))
    vj, _, vlive = index.at(dense, applied, applied != NULL)
    tj, tvis, tlive = index.at(dense, end, np.ones(n, bool))
    m = len(index)

    def field(name: str, j: np.ndarray, live: np.ndarray) -> pa.Array:
        col = index.fields.column(name)
        if not m:
            return pa.nulls(n, col.type)
        return col.take(pa.array(j, mask=~live)).combine_chunks()

    reps = field("replicas", vj, vlive)
    in_reps = np.zeros(n, bool)
    if n and m:
        parent = pc.list_parent_indices(reps).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(reps).fill_null(-1).to_numpy(zero_copy_only=False)
        hit = flat == target[parent]
        in_reps = np.bincount(parent[hit], minlength=n) > 0
    cols = {c: req.column(c) for c in ("cluster_id", "topic_id", "partition_id", *REQUEST_PASS)}
    return pa.table({
        **cols, "applied_offset": pa.array(applied, mask=applied == NULL), "log_end_offset": pa.array(end),
        "_known": pa.array(known), "_inside": pa.array(inside), "view_exists": pa.array(vlive),
        "_in_replicas": pa.array(in_reps), "view_isr": field("isr", vj, vlive), "view_leader": field("leader", vj, vlive),
        "view_leader_epoch": field("leader_epoch", vj, vlive), "true_exists": pa.array(tlive),
        "_true_leader": field("leader", tj, tlive), "_true_epoch": field("leader_epoch", tj, tlive),
        "_true_lrs": field("leader_recovery_state", tj, tlive), "true_exists_since": field("_since", tj, tvis)},
        schema=_OUTPUT_SCHEMA)


_OUTPUT_SCHEMA = arrow_schema(VIEW_OUTPUT)
