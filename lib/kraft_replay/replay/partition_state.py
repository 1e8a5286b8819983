"""The ``partitions`` domain from its events to its versions, on Arrow batches (facts §5.2, §5.6;
docs/design.md, "Versioned tables", "``partitions`` on Arrow batches").

Spark hands :func:`partition_state` every event of one hash bucket of partitions (``repartition`` by
cluster, stream, topic id and partition id: one shuffle, no sort); the task orders them by partition
and (visible offset, offset, order in the record) with one ``lexsort`` and works on whole columns:

* record-local checks: a PartitionRecord applies when its topic exists, its LeaderRecoveryState is 0
  or 1 and its directories are absent, all MIGRATING or one per replica; a PartitionChangeRecord when
  its topic exists, its LeaderRecoveryState is −1, 0 or 1 and the partition exists just before (the
  last reset before it — an applied PartitionRecord or a snapshot's partition, not a tombstone — set it);
* the state after each event: every field carried forward from the last event that set it — a reset
  sets all, an applied change those it does not leave unchanged (null lists, Leader −2, LRS −1) — as
  a running maximum of row indexes cut at the partition's first row; the leader epoch is the reset's
  plus the applied changes since that set Leader, the partition epoch the reset's plus every applied
  change (running counts);
* a change whose directories do not match its replicas in the carried state does not apply: a
  fixpoint of whole-column passes, each failing the first mismatching change of a reset's segment
  (real logs: none);
* versions: the events that apply, less a snapshot's restatement of the current state and the
  deletion of a partition that does not exist; each valid until the next (``valid_to_*``) and naming
  the fields that differ from the version before (``changed_fields``; all after none or a tombstone).

Out come, in one frame (:data:`STATE_OUTPUT`, ``_row``): the versions (0), the anomalies (1) and the
tombstones that closed an existing partition (2). No row is looked at alone in Python.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.codec.schema import record_type
from kraft_replay.replay.records import API, ZERO_UUID
from kraft_replay.spark.arrow import arrow_schema, codes

__all__ = ["partition_state", "STATE_INPUT", "STATE_OUTPUT", "FIELDS", "MAX_FIXPOINT_PASSES", "VERSION", "ANOMALY",
           "CLOSED", "IMAGE", "LEADER", "OUTPUT_SCHEMA", "KIND_RECORD_TYPES", "with_record_types"]

LISTS = ["replicas", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr"]
#: the versioned fields, in the table's order (the order of ``changed_fields``)
FIELDS = ["topic_name", "replicas", "isr", "removing_replicas", "adding_replicas", "leader", "leader_recovery_state",
          "leader_epoch", "partition_epoch", "directories", "eligible_leader_replicas", "last_known_elr"]
MAX_FIXPOINT_PASSES = 64
VERSION, ANOMALY, CLOSED, IMAGE, LEADER = 0, 1, 2, 3, 4

#: one row per event: ``kind`` PR (PartitionRecord), PC (PartitionChangeRecord), S (a loaded
#: snapshot's partition), T (a topic's removal: tombstone candidate), SA (absent from a loaded
#: snapshot: deletion candidate); ``r_*`` the record's values with Kafka's sentinels as nulls;
#: ``_vtime`` µs; ``_t_exists`` / ``_t_name`` the topic just before the event (its name on PR and S
#: events only: the state reads it on resets alone); ``record_type`` null where it is the one its
#: kind names (:data:`KIND_RECORD_TYPES`)
STATE_INPUT = (
    "cluster_id string, _sid long, topic_id string, partition_id int, kind string, "
    + ", ".join(f"r_{x} array<int>" for x in LISTS)
    + ", r_leader int, r_lrs int, r_le int, r_pe int, r_dirs array<string>, r_topic_name string, "
    "_vis long, _ord long, _sub int, _vtime long, record_offset long, record_type string, snapshot_end_offset long, "
    "_t_exists boolean, _t_name string")
#: the record type a PR / PC event's kind names: such an event is handed to Python with a null
#: ``record_type`` (a string of ~23 bytes less on nearly every event) and the state restores it
#: (:func:`with_record_types`)
KIND_RECORD_TYPES = {"PR": record_type(API["PARTITION"]).tool_name, "PC": record_type(API["PARTITION_CHANGE"]).tool_name}
#: ``_row`` :data:`VERSION`: a version (the table's columns; times in µs); :data:`ANOMALY`: an event
#: that did not apply (``_code``, ``_msg``, ``_ord``, ``record_type``); :data:`CLOSED`: a tombstone of
#: an existing partition (``record_offset``); :data:`IMAGE`: a version visible at an image's offset
#: (``_ord``; made by the caller, :func:`kraft_replay.replay.partitions.live_at`); :data:`LEADER`: a
#: leader-affecting change (``valid_from_offset``; ``_ord`` the partition's change before it; made by the
#: caller, :func:`kraft_replay.replay.partitions.leader_change_rows`)
STATE_OUTPUT = (
    "cluster_id string, _sid long, topic_id string, partition_id int, _row int, topic_name string, "
    "replicas array<int>, isr array<int>, removing_replicas array<int>, adding_replicas array<int>, leader int, "
    "leader_recovery_state int, leader_epoch int, partition_epoch int, directories array<string>, "
    "eligible_leader_replicas array<int>, last_known_elr array<int>, changed_fields array<string>, deleted boolean, "
    "valid_from_offset long, valid_to_offset long, _from_us long, _to_us long, record_offset long, record_type string, "
    "snapshot_end_offset long, _ord long, _code string, _msg string")

OUTPUT_SCHEMA = arrow_schema(STATE_OUTPUT)


def partition_state(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Facts §5.2 / §5.6: every event of a task's partitions (:data:`STATE_INPUT`) -> their versions,
    anomalies and closing tombstones (:data:`STATE_OUTPUT`)."""
    got = list(batches)
    if not got:
        return
    t = pa.Table.from_batches(got)
    del got
    if t.num_rows:
        yield from _state(t).to_batches(max_chunksize=1 << 16)


def _np(col: pa.ChunkedArray | pa.Array, fill: int = 0) -> np.ndarray:
    return col.fill_null(fill).to_numpy(zero_copy_only=False)


def _bools(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return _np(col, False).astype(bool)


def _valid(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return col.is_valid().to_numpy(zero_copy_only=False)


def _take(col: pa.Array, idx: np.ndarray) -> pa.Array:
    """``col`` at ``idx`` (null where ``idx`` < 0)."""
    return col.take(pa.array(np.maximum(idx, 0), mask=idx < 0))


def _through(index: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``index`` at ``idx`` (−1 where ``idx`` < 0: no row stays no row)."""
    return np.where(idx >= 0, index[np.maximum(idx, 0)], -1)


def _list_sizes(col: pa.Array) -> np.ndarray:
    return _np(pc.list_value_length(col), -1).astype(np.int64)


def _parents(col: pa.Array) -> np.ndarray:
    """The list of each value of ``pc.list_flatten(col)`` (a null list's values are not flattened)."""
    return np.repeat(np.arange(len(col)), np.maximum(_list_sizes(col), 0))


def _real(col: pa.Array) -> np.ndarray:
    """Facts §5.2: a directory list with a non-zero entry (absent, empty or all-zero: MIGRATING)."""
    parents = _parents(col)
    nonzero = _bools(pc.not_equal(pc.list_flatten(col), ZERO_UUID))
    return np.bincount(parents[nonzero], minlength=len(col)) > 0


def with_record_types(t: pa.Table) -> pa.Table:
    """``t`` (:data:`STATE_INPUT` rows) with the ``record_type`` of each PR / PC event whose type is null:
    the one its kind names (:data:`KIND_RECORD_TYPES`)."""
    rt, kind = t.column("record_type"), t.column("kind")
    for k, name in KIND_RECORD_TYPES.items():
        rt = pc.if_else(pc.and_(pc.is_null(rt), pc.equal(kind, k)), pa.scalar(name), rt)
    return t.set_column(t.schema.get_field_index("record_type"), "record_type", rt)


class _Sorted:
    """A task's events in (partition, visible offset, offset, order) order, with the partition's first
    row of each row (``first``) for running values that restart at each partition. The rows stay
    where they came (``raw``); ``order`` maps a sorted row to its raw row: per-row checks are numpy
    arrays put in order, and a column's values are taken from the raw rows once, where needed
    (:meth:`pick`, :class:`_Field`)."""

    def __init__(self, t: pa.Table) -> None:
        self.raw = with_record_types(t.combine_chunks())
        keys = [codes(t.column("cluster_id"))[0], _np(t.column("_sid"), -2).astype(np.int64),
                codes(t.column("topic_id"))[0], _np(t.column("partition_id"), -1).astype(np.int64)]
        kind = codes(t.column("kind"))[0]
        order = np.lexsort((kind, _np(t.column("_sub")), _np(t.column("_ord")), _np(t.column("_vis")), *keys[::-1]))
        self.order = order
        keys = [k[order] for k in keys]
        n = self.n = len(order)
        new = np.zeros(n, bool)
        new[:1] = True
        for k in keys:
            new[1:] |= k[1:] != k[:-1]
        self.new = new
        self.part = np.cumsum(new) - 1  # the partition of each row, numbered from 0
        self.first = np.flatnonzero(new)[self.part]
        self.rows = np.arange(n, dtype=np.int64)

    def raw_col(self, name: str) -> pa.Array:
        c = self.raw.column(name)
        return c.chunk(0) if c.num_chunks else pa.array([], self.raw.schema.field(name).type)

    def source(self, idx: np.ndarray) -> np.ndarray:
        """Sorted rows ``idx`` as raw rows (−1 stays −1)."""
        return _through(self.order, idx)

    def valid(self, name: str) -> np.ndarray:
        return _valid(self.raw_col(name))[self.order]

    def ints(self, name: str, fill: int = 0) -> np.ndarray:
        return _np(self.raw_col(name), fill)[self.order]

    def pick(self, name: str, idx: np.ndarray) -> pa.Array:
        """Column ``name`` at sorted rows ``idx`` (null where ``idx`` < 0), taken from the raw rows."""
        return _take(self.raw_col(name), self.source(idx))

    def kind(self, k: str) -> np.ndarray:
        return _bools(pc.equal(self.raw_col("kind"), k))[self.order]

    def last_set(self, mask: np.ndarray) -> np.ndarray:
        """Per row, the last row of its partition at or before it where ``mask`` holds (−1: none)."""
        idx = np.where(mask, self.rows, -1)
        np.maximum.accumulate(idx, out=idx)
        idx[idx < self.first] = -1
        return idx

    def last_before(self, mask: np.ndarray) -> np.ndarray:
        """Per row, the last row of its partition strictly before it where ``mask`` holds (−1: none)."""
        idx = self.last_set(mask)
        out = np.empty_like(idx)
        out[0:1] = -1
        out[1:] = idx[:-1]
        out[self.new] = -1
        return out

    def running(self, mask: np.ndarray) -> np.ndarray:
        """Per row, how many rows of its partition up to it (included) ``mask`` holds."""
        cs = np.cumsum(mask, dtype=np.int64)
        return cs - (cs - mask)[self.first]


class _Carried:
    """The state after each event given the changes that ``failed``: for each field the row that last
    set it (−1: none), the epochs, which changes applied and which mismatch their directories."""

    def __init__(self, s: _Sorted, ev: dict, failed: np.ndarray) -> None:
        self.applied = ev["pc_pre"] & ~failed
        counted = ev["pc_local"] & ~failed
        reset = ev["reset_set"]
        n_le = s.running(counted & ev["leader_set"])
        n_pe = s.running(counted)
        self.reset = s.last_set(reset)
        self.idx = {x: s.last_set(reset | (self.applied & ev[f"{x}_set"])) for x in (*LISTS, "leader", "dirs")}
        self.idx["lrs"] = s.last_set(reset | (self.applied & ev["lrs_set"]))
        r = self.reset
        has = r >= 0
        self.le = np.where(has & ev["le_valid"][r], (ev["le"] - n_le)[r] + n_le, -1)
        self.le_valid = has & ev["le_valid"][r]
        self.pe = np.where(has & ev["pe_valid"][r], (ev["pe"] - n_pe)[r] + n_pe, -1)
        self.pe_valid = has & ev["pe_valid"][r]
        d, rp = self.idx["dirs"], self.idx["replicas"]
        self.dirs_size = np.where(d >= 0, ev["dirs_size"][d], -1)
        self.replicas_size = np.where(rp >= 0, ev["replicas_size"][rp], -1)
        real = (d >= 0) & ev["dirs_real"][np.maximum(d, 0)]
        self.mismatch = self.applied & real & (self.replicas_size >= 0) & (self.dirs_size != self.replicas_size)


def _events(s: _Sorted) -> dict:
    """Record-local checks and the existence of the partition just before each event."""
    pr, pcr, snap, tomb, absent = (s.kind(k) for k in ("PR", "PC", "S", "T", "SA"))
    lrs_valid = s.valid("r_lrs")
    lrs = s.ints("r_lrs", -99)
    topic_ok = s.ints("_t_exists", False).astype(bool)
    dirs, replicas = s.raw_col("r_dirs"), s.raw_col("r_replicas")
    ev = {"pr": pr, "pc": pcr, "snap": snap, "tomb": tomb, "absent": absent, "topic_ok": topic_ok,
          "dirs_size": _list_sizes(dirs)[s.order], "replicas_size": _list_sizes(replicas)[s.order],
          "dirs_real": _real(dirs)[s.order]}
    pr_dirs_ok = ~ev["dirs_real"] | (ev["dirs_size"] == ev["replicas_size"])
    lrs01 = lrs_valid & np.isin(lrs, (0, 1))
    ev["pr_applies"] = pr & topic_ok & lrs01 & pr_dirs_ok
    ev["lrs01"] = lrs01
    ev["lrs_pc_ok"] = lrs_valid & np.isin(lrs, (-1, 0, 1))
    # the last reset before: an applied PartitionRecord or a snapshot's partition sets it, a tombstone not
    sets = ev["pr_applies"] | snap
    before = s.last_before(sets | tomb | absent)
    ev["exists_before"] = (before >= 0) & sets[np.maximum(before, 0)]
    ev["seg"] = s.running(ev["pr_applies"] | snap | tomb | absent)
    ev["reset_set"] = sets
    ev["pc_local"] = pcr & topic_ok & ev["lrs_pc_ok"]
    ev["pc_pre"] = ev["pc_local"] & ev["exists_before"]
    for x in LISTS:
        ev[f"{x}_set"] = s.valid(f"r_{x}")
    ev["leader_set"] = s.valid("r_leader")
    ev["dirs_set"] = s.valid("r_dirs")
    ev["lrs_set"] = lrs_valid & (lrs != -1)
    ev["le"], ev["le_valid"] = s.ints("r_le").astype(np.int64), s.valid("r_le")
    ev["pe"], ev["pe_valid"] = s.ints("r_pe").astype(np.int64), s.valid("r_pe")
    return ev


def _resolve(s: _Sorted, ev: dict) -> tuple[_Carried, list[np.ndarray]]:
    """Facts §5.2: the carried state with the directory mismatches resolved — each pass fails the first
    mismatching change of every reset's segment — and the failed changes with their two sizes."""
    failed = np.zeros(s.n, bool)
    found: list[np.ndarray] = []
    carried = _Carried(s, ev, failed)
    for _ in range(MAX_FIXPOINT_PASSES):
        m = np.flatnonzero(carried.mismatch)
        if not m.size:
            return carried, found
        part, seg = s.part[m], ev["seg"][m]
        first = m[np.r_[True, (part[1:] != part[:-1]) | (seg[1:] != seg[:-1])]]
        found.append(np.stack([first, carried.dirs_size[first], carried.replicas_size[first]]))
        failed[first] = True
        carried = _Carried(s, ev, failed)
    raise RuntimeError(f"partitions: directory mismatches did not settle in {MAX_FIXPOINT_PASSES} passes")


class _Field:
    """A field's value at some rows: ``values`` taken at ``src`` (−1: null). Rows with the same source
    hold the same value, so comparisons look at the values only where the sources differ."""

    def __init__(self, values: pa.Array, src: np.ndarray) -> None:
        self.values, self.src = values, src

    def at(self, idx: np.ndarray) -> pa.Array:
        """The values at positions ``idx`` (null where ``idx`` < 0)."""
        return _take(self.values, _through(self.src, idx))

    def only(self, idx: np.ndarray) -> "_Field":
        return _Field(self.values, self.src[idx])

    def same(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Whether the values at positions ``i`` and ``j`` are equal (null-safe; lists by value)."""
        a, b = self.src[i], self.src[j]
        eq = a == b
        d = np.flatnonzero(~eq)
        if d.size:
            eq[d] = _equal(_take(self.values, a[d]), _take(self.values, b[d]))
        return eq


def _fields_at(s: _Sorted, ev: dict, c: _Carried, rows: np.ndarray) -> dict[str, _Field]:
    """The state after each of ``rows`` (every field; directories with the MIGRATING default), as
    where each value comes from: the raw row that set it (the epochs: computed)."""
    out: dict[str, _Field] = {}
    names = pc.coalesce(s.raw_col("r_topic_name"), s.raw_col("_t_name"))
    out["topic_name"] = _Field(names, s.source(c.reset[rows]))
    for x in LISTS:
        out[x] = _Field(s.raw_col(f"r_{x}"), s.source(c.idx[x][rows]))
    out["leader"] = _Field(s.raw_col("r_leader"), s.source(c.idx["leader"][rows]))
    out["leader_recovery_state"] = _Field(s.raw_col("r_lrs"), s.source(c.idx["lrs"][rows]))
    own = np.arange(len(rows), dtype=np.int64)
    out["leader_epoch"] = _Field(pa.array(c.le[rows].astype(np.int32), mask=~c.le_valid[rows]), own)
    out["partition_epoch"] = _Field(pa.array(c.pe[rows].astype(np.int32), mask=~c.pe_valid[rows]), own)
    d = c.idx["dirs"][rows]
    real = (d >= 0) & ev["dirs_real"][np.maximum(d, 0)]
    # not real: one zero directory per replica (none when the replicas are unknown), taken from the
    # lists of zeros appended after the raw ones, one per length present
    rp = c.idx["replicas"][rows]
    sizes = np.where(rp >= 0, np.maximum(ev["replicas_size"][np.maximum(rp, 0)], 0), 0)
    lengths = np.unique(sizes)  # one list of zeros per length present
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    zeros = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array([ZERO_UUID] * int(offsets[-1]), pa.string()))
    raw = s.raw_col("r_dirs")
    values = pa.concat_arrays([raw, zeros.cast(raw.type)])
    out["directories"] = _Field(values, np.where(real, s.source(d), len(raw) + np.searchsorted(lengths, sizes)))
    return out


def _equal(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Null-safe equality of two aligned columns (lists: the same values in the same order)."""
    an, bn = ~_valid(a), ~_valid(b)
    if not pa.types.is_list(a.type):
        return _bools(pc.equal(a, b)) | (an & bn)
    la, lb = _list_sizes(a), _list_sizes(b)
    eq = la == lb  # both null: −1 == −1
    cand = np.flatnonzero(eq & (la > 0))
    if cand.size:
        ia = pa.array(cand)
        fa, fb = pc.list_flatten(a.take(ia)), pc.list_flatten(b.take(ia))
        same = _bools(pc.equal(fa, fb)) | (~_valid(fa) & ~_valid(fb))
        parents = _parents(a.take(ia))
        eq[cand[np.bincount(parents[~same], minlength=cand.size) > 0]] = False
    return eq


def _neighbours(part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per position of a partition-ordered subset, the previous and next position of the same partition (−1: none)."""
    n = len(part)
    prev, nxt = np.arange(-1, n - 1), np.arange(1, n + 1)
    same = part[1:] == part[:-1] if n else np.zeros(0, bool)
    prev[1:][~same] = -1
    nxt[:-1][~same] = -1
    if n:
        nxt[-1] = -1
    return prev, nxt


def _versions(s: _Sorted, ev: dict, c: _Carried) -> pa.Table:
    """Facts §5.2 / §5.6: the versions of the events that apply (docs/design.md, "Versioned tables")."""
    rows = np.flatnonzero(ev["pr_applies"] | ev["snap"] | ev["tomb"] | ev["absent"] | c.applied)
    f = _fields_at(s, ev, c, rows)
    deleted = (ev["tomb"] | ev["absent"])[rows]
    from_snap = (ev["snap"] | ev["absent"])[rows]
    # a deletion is kept when the partition exists just before it, a snapshot's set when it changes it
    prev, _ = _neighbours(s.part[rows])
    exists = (prev >= 0) & ~deleted[np.maximum(prev, 0)]
    keep = np.where(deleted, exists, True)
    check = np.flatnonzero(from_snap & ~deleted & exists)
    if check.size:
        same = np.ones(check.size, bool)
        for name in FIELDS:
            same &= f[name].same(check, prev[check])
        keep[check[same]] = False
    kept = np.flatnonzero(keep)
    rows, deleted = rows[kept], deleted[kept]
    f = {k: v.only(kept) for k, v in f.items()}
    prev, nxt = _neighbours(s.part[rows])
    # changed_fields: all after no version or a tombstone, those that differ otherwise; null on a tombstone
    n = len(rows)
    changed = np.ones((n, len(FIELDS)), bool)
    cmp = np.flatnonzero((prev >= 0) & ~deleted & ~deleted[np.maximum(prev, 0)])
    if cmp.size:
        for j, name in enumerate(FIELDS):
            changed[cmp, j] = ~f[name].same(cmp, prev[cmp])
    changed[deleted] = False
    counts = changed.sum(axis=1)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    names = pa.array(FIELDS).take(pa.array(np.nonzero(changed)[1].astype(np.int32)))
    changed_fields = pa.ListArray.from_arrays(pa.array(offsets), names, mask=pa.array(deleted))

    live = np.where(deleted, -1, np.arange(n))
    out = {k: s.pick(k, rows) for k in ("cluster_id", "_sid", "topic_id", "partition_id")}
    out["_row"] = pa.array(np.full(n, VERSION, np.int32))
    for name in FIELDS:
        out[name] = f[name].at(live)
    out["changed_fields"] = changed_fields
    out["deleted"] = pa.array(deleted)
    to = _through(rows, nxt)
    out["valid_from_offset"], out["_from_us"] = s.pick("_vis", rows), s.pick("_vtime", rows)
    out["valid_to_offset"], out["_to_us"] = s.pick("_vis", to), s.pick("_vtime", to)
    for k in ("record_offset", "record_type", "snapshot_end_offset", "_ord"):
        out[k] = s.pick(k, rows)
    return _table(out, n)


def _join(*parts: pa.Array | str) -> pa.Array:
    """Element-wise concatenation of string columns and literals."""
    return pc.binary_join_element_wise(*parts, "")


def _string(col: pa.Array) -> pa.Array:
    return pc.cast(col, pa.string())


def _anomalies(s: _Sorted, ev: dict, failed_found: list[np.ndarray]) -> pa.Table:
    """Facts §5.7: the events that do not apply, with a reason code and message."""
    pr, pcr, topic_ok, exists = ev["pr"], ev["pc"], ev["topic_ok"], ev["exists_before"]
    cases = [
        (pr & ~topic_ok, "UNKNOWN_TOPIC", lambda a: _join("PartitionRecord for unknown topic id ", a["topic_id"])),
        (pr & ~ev["lrs01"], "INVALID_FIELD_VALUE",
         lambda a: _join("LeaderRecoveryState ", _string(a["r_lrs"]), " is neither 0 nor 1")),
        (pr & ~ev["pr_applies"], "DIRECTORIES_MISMATCH",
         lambda a: _join(_string(pc.list_value_length(a["r_dirs"])), " directories for ",
                         _string(pc.list_value_length(a["r_replicas"])), " replicas")),
        (pcr & ~topic_ok, "UNKNOWN_TOPIC", lambda a: _join("PartitionChangeRecord for unknown topic id ", a["topic_id"])),
        (pcr & ~exists, "UNKNOWN_PARTITION",
         lambda a: _join("PartitionChangeRecord for partition ", _string(a["partition_id"]), " the topic does not have")),
        (pcr & ~ev["lrs_pc_ok"], "INVALID_FIELD_VALUE",
         lambda a: _join("LeaderRecoveryState ", _string(a["r_lrs"]), " is not -1, 0 or 1")),
    ]
    taken = np.zeros(s.n, bool)
    parts = []
    for mask, code, message in cases:
        rows = np.flatnonzero(mask & ~taken)
        taken |= mask
        if rows.size:
            a = {k: s.pick(k, rows) for k in ("topic_id", "partition_id", "r_lrs", "r_dirs", "r_replicas")}
            parts.append((rows, code, message(a)))
    for found in failed_found:  # the changes the fixpoint failed, with the sizes it found
        rows, dirs, replicas = found
        msg = _join(_string(pa.array(dirs)), " directories for ", _string(pa.array(replicas)), " replicas")
        parts.append((rows, "DIRECTORIES_MISMATCH", msg))
    if not parts:
        return _table({}, 0)
    rows = np.concatenate([p[0] for p in parts])
    n = len(rows)
    out = {k: s.pick(k, rows) for k in ("cluster_id", "_sid", "topic_id", "partition_id", "_ord", "record_type")}
    out["_row"] = pa.array(np.full(n, ANOMALY, np.int32))
    out["_code"] = pa.array(np.concatenate([np.full(len(p[0]), p[1], object) for p in parts]), pa.string())
    out["_msg"] = pa.concat_arrays([p[2] for p in parts])
    return _table(out, n)


def _closed(s: _Sorted, ev: dict) -> pa.Table:
    """The tombstones that close a partition existing just before them (counted per record by Spark)."""
    rows = np.flatnonzero(ev["tomb"] & ev["exists_before"])
    out = {k: s.pick(k, rows) for k in ("cluster_id", "_sid", "topic_id", "partition_id", "record_offset")}
    out["_row"] = pa.array(np.full(len(rows), CLOSED, np.int32))
    return _table(out, len(rows))


def _table(cols: dict[str, pa.Array], n: int) -> pa.Table:
    return pa.table([cols[f.name].cast(f.type) if f.name in cols else pa.nulls(n, f.type) for f in OUTPUT_SCHEMA],
                    schema=OUTPUT_SCHEMA)


def _state(t: pa.Table) -> pa.Table:
    s = _Sorted(t)
    ev = _events(s)
    carried, found = _resolve(s, ev)
    return pa.concat_tables([_versions(s, ev, carried), _anomalies(s, ev, found), _closed(s, ev)])
