"""Seed 003's lookups on Arrow batches (docs/design.md, "``fencing_outcomes``, ``fencing_summary``"): for
each produce request, the partition as its target broker's cache held it (the ``partitions`` version
visible at the broker's applied offset then) and as the log had it (at the log end then).

Spark hands :func:`partition_views` the requests and the partitions' versions of one hash bucket of
partitions (``repartition`` by cluster, topic id and partition id: one shuffle, no sort); the applied
offsets and log ends come from the :class:`~kraft_replay.outcomes.steps.ClusterSteps` broadcast to the
workers, the versions by ``searchsorted`` on (partition, offset) — facts §5.2 (a version is visible
over ``[valid_from_offset, valid_to_offset)``; versions never visible are skipped; at one
``valid_from_offset`` the last record wins) and §9.1 (a broker's applied offset at a time).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.outcomes.steps import NULL, ClusterSteps
from kraft_replay.spark.arrow import arrow_schema, codes

__all__ = ["partition_views", "VIEW_INPUT", "VIEW_OUTPUT", "REQUEST_PASS"]

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
    got = list(batches)
    if not got:
        return
    t = pa.Table.from_batches(got)
    del got
    is_req = pc.equal(t.column("_kind"), 1)
    # each kind's own columns only, then its rows: a filter copies what it keeps
    req = t.select(["cluster_id", "topic_id", "partition_id", *REQUEST_PASS]).filter(is_req)
    ver = t.select(["cluster_id", "topic_id", "partition_id", *VERSION_COLUMNS]).filter(pc.invert(is_req))
    del t
    if req.num_rows:
        yield from _views(req, ver, steps).to_batches(max_chunksize=1 << 16)


def _ints(col: pa.ChunkedArray, fill: int) -> np.ndarray:
    return col.fill_null(fill).to_numpy().astype(np.int64)


def _keys(req: pa.Table, ver: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An int64 key per (cluster, topic id, partition id) of the requests and of the versions, and which
    of each have one (a null part never matches: its key may equal another's)."""
    n = req.num_rows
    both = lambda name: pa.chunked_array([*req.column(name).chunks, *ver.column(name).chunks],  # noqa: E731
                                         type=req.schema.field(name).type)
    c, _ = codes(both("cluster_id"))
    tt, _ = codes(both("topic_id"))
    pid = both("partition_id")
    ok = (c >= 0) & (tt >= 0) & pid.is_valid().to_numpy(zero_copy_only=False)
    p = _ints(pid, 0)
    if len(p):
        p -= p.min()
    # partition ids are int32 (a range < 2^32) and a task holds < 2^30 (cluster, topic) pairs: < 2^62
    key = (c * (int(tt.max(initial=0)) + 1) + tt) * (int(p.max(initial=0)) + 1) + p
    return key[:n], key[n:], ok[:n], ok[n:]


def _pairs(vkey: np.ndarray, vfrom: np.ndarray, qkey: np.ndarray, qoff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(key, offset) pairs as int64s that order as the pairs do (offsets ranked when too wide)."""
    allo = np.concatenate([vfrom, qoff])
    if not len(allo):
        return vfrom, qoff
    lo, hi = int(allo.min()), int(allo.max())
    width = hi - lo + 1
    if (int(max(vkey.max(initial=0), qkey.max(initial=0))) + 1) * width < 1 << 62:
        return vkey * width + (vfrom - lo), qkey * width + (qoff - lo)
    u = np.unique(allo)
    return vkey * len(u) + np.searchsorted(u, vfrom), qkey * len(u) + np.searchsorted(u, qoff)


def _views(req: pa.Table, ver: pa.Table, steps: dict[str, ClusterSteps]) -> pa.Table:
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

    # the versions ever visible, looked up in (partition, valid_from_offset, record offset) order
    vis = pc.or_kleene(pc.is_null(ver.column("_to")), pc.greater(ver.column("_to"), ver.column("_from")))
    ver = ver.filter(pc.fill_null(vis, False))
    qkey, vkey, qok, vok = _keys(req, ver)
    vfrom, vrec = _ints(ver.column("_from"), NULL), _ints(ver.column("_rec"), -1)
    order = np.lexsort((vrec, vfrom, vkey))
    order = order[vok[order]]
    vkey, vfrom = vkey[order], vfrom[order]
    vto = _ints(ver.column("_to"), np.iinfo(np.int64).max)[order]
    deleted = ver.column("deleted").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)[order]
    m = len(vkey)

    def at(offset: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per request, the version visible at ``offset`` (its row in ``ver``), whether one is visible,
        whether it is live (not a tombstone); ``has``: the request has a key and an offset."""
        if not m:
            z = np.zeros(n, bool)
            return np.zeros(n, np.int64), z, z
        vp, qp = _pairs(vkey, vfrom, qkey, np.where(has, offset, vfrom[0]))
        o = np.argsort(qp)  # needles in order: the search walks the versions once, not at random
        i = np.empty(n, np.int64)
        i[o] = np.searchsorted(vp, qp[o], "right") - 1
        j = np.maximum(i, 0)
        visible = has & (i >= 0) & (vkey[j] == qkey) & (offset < vto[j])
        return order[j], visible, visible & ~deleted[j]

    vj, _, vlive = at(applied, qok & (applied != NULL))
    tj, tvis, tlive = at(end, qok)

    def field(name: str, j: np.ndarray, live: np.ndarray) -> pa.Array:
        col = ver.column(name)
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
