"""The live replay: one cluster's replay kept current step by step, record by record, the way Kafka's
``MetadataLoader`` applies each ``MetadataDelta`` to its ``MetadataImage`` (facts §3-§6). It is the
kernel of ``kraft-replay replay --mode stream`` (docs/design.md, "Stream mode"): the state a
stateful streaming operator keeps per cluster between micro-batches.

It is not a third implementation of the rules: a :class:`LiveCluster` *is* the sequential replay
(:mod:`kraft_replay.replay.sequential`) of the rows it has been given, paused after its last record
and resumed with the next rows. Its first step is a whole sequential replay; each later step applies
only the new rows. The rows a step emits, applied to the tables with :func:`apply_step`, give
exactly the tables a whole replay of every row so far gives (tests/replay/test_replay_live.py holds
the two equal after every step).

What the state holds: the image (every domain's current entities and their open versions), the log's
position (first and last offset, the replay start, the offset gaps met), an open metadata
transaction's held-back records, the batches not yet certainly committed (their ``log_batches``
rows change when a later epoch or a snapshot commits them), the usable snapshots (records only of
those that could still resynchronise a later gap).

What a step cannot absorb raises :class:`Unabsorbable` with the reason, before anything changes: the
caller replays the cluster whole (:meth:`LiveCluster.replay`) from all its rows. Those cases: log
rows at or below the last offset replayed (a copy from another node, a tail rewritten by a later
leader, a batch arriving late), a divergent batch among the new rows, more rows of a snapshot already read, a snapshot that changes where replay starts or falls in an
offset gap already replayed, a snapshot while the cluster has no log yet, and the first log rows of a
cluster that has snapshots or whose log starts past offset 0.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.ingest.schemas import QUARANTINE_SCHEMA
from kraft_replay.replay.features import METADATA_VERSION
from kraft_replay.replay.image_rows import image_rows, mv_changes
from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA, SILVER_TABLES, VERSIONED_TABLES
from kraft_replay.replay.sequential import (
    SequentialResult, Snapshot, _as_table, _batches, _BATCH_KEY, _ClusterReplay, _divergent, _gaps, _log_positions,
    _snapshots, batch_rows, start_snapshot, table_rows)

__all__ = ["LiveCluster", "Step", "Unabsorbable", "apply_step", "closed_versions", "open_versions", "open_versions_kept",
           "BATCH_KEY"]

#: the key of a ``log_batches`` row
BATCH_KEY = ["cluster_id", *_BATCH_KEY]


class Unabsorbable(Exception):
    """The new rows change what was already replayed: replay the cluster whole (the message says why)."""


@dataclass
class Step:
    """What one step changed, for one cluster.

    ``whole``: ``tables`` hold every row of the cluster (a whole replay; ``reason``: why), replacing
    its rows. Otherwise: the versioned tables present hold the versions closed by the step and the
    open versions of the entities the step touched (they replace those entities' open versions:
    :func:`open_versions_kept`);
    ``log_batches`` rows are new or changed (by batch key); ``replay_anomalies`` rows are new;
    ``image_snapshots`` rows are the images at the step's metadata.version changes (new; a whole step:
    every image of the cluster at such a change); ``log_commit`` is the cluster's row. See
    :func:`apply_step`."""

    cluster_id: str
    whole: bool
    tables: dict[str, pa.Table]
    quarantine: pa.Table = field(default_factory=QUARANTINE_SCHEMA.empty_table)
    reason: str | None = None
    records: int = 0          # records replayed by the step
    lag_whole: bool = False   # the stream's cache_lag rows in ``tables`` replace the cluster's (computed whole)

    @property
    def changed(self) -> list[str]:
        return sorted(self.tables)


def _cluster(table: pa.Table, cluster_id: str) -> pa.Array:
    return pc.equal(table.column("cluster_id"), cluster_id)


def _entity_ids(t: pa.Table, name: str) -> pa.Array:
    """One string per row naming its entity (cluster id and key columns; nulls kept distinct)."""
    cols = [pc.fill_null(pc.cast(t.column(c), pa.string()), "\x00") for c in ("cluster_id", *SILVER_TABLES[name].key_names)]
    return cols[0].combine_chunks() if len(cols) == 1 else pc.binary_join_element_wise(*cols, "\x1f").combine_chunks()


def closed_versions(t: pa.Table) -> pa.Table:
    """The closed versions of a versioned table's rows (``valid_to_offset`` set)."""
    return t.filter(pc.is_valid(t.column("valid_to_offset")))


def open_versions(t: pa.Table) -> pa.Table:
    """The open versions of a versioned table's rows (``valid_to_offset`` null)."""
    return t.filter(pc.is_null(t.column("valid_to_offset")))


def open_versions_kept(old: pa.Table, rows: pa.Table, name: str) -> pa.Table:
    """The open versions of versioned table ``name`` in ``old`` that a step's ``rows`` leave open: those
    of the entities the step does not name (every entity it names has its open version, if any, among
    ``rows``; the open version it had before is among ``rows`` closed)."""
    opened = open_versions(old)
    if not rows.num_rows or not opened.num_rows:
        return opened
    return opened.filter(pc.invert(pc.is_in(_entity_ids(opened, name), value_set=_entity_ids(rows, name))))


def apply_step(tables: dict[str, pa.Table], step: Step) -> dict[str, pa.Table]:
    """The silver tables after ``step`` (the rule a sink follows): a whole step replaces the cluster's
    rows of every table; otherwise see :class:`Step`. ``tables``: every silver table (missing ones are
    empty); returns new tables, ``tables`` is not changed."""
    out = dict(tables)
    cid = step.cluster_id
    for name, rows in step.tables.items():
        schema = IMAGE_SNAPSHOTS_SCHEMA if name == IMAGE_SNAPSHOTS else SILVER_TABLES[name].schema
        cur = out.get(name, schema.empty_table())
        mine = _cluster(cur, cid)
        if step.whole or name == "log_commit":
            keep = pc.invert(mine)
        elif name in VERSIONED_TABLES:  # the entities the step names: their open versions replaced
            named = pc.is_in(_entity_ids(cur, name), value_set=_entity_ids(rows, name))  # the cluster id is in the id
            keep = pc.invert(pc.and_(named, pc.is_null(cur.column("valid_to_offset"))))
        elif name == "log_batches":
            index = cur.select(BATCH_KEY).append_column("_i", pa.array(np.arange(cur.num_rows), pa.int64()))
            gone = index.join(rows.select(BATCH_KEY), BATCH_KEY, join_type="left semi").column("_i")
            keep = pc.invert(pc.is_in(index.column("_i"), value_set=gone.combine_chunks()))
        else:  # replay_anomalies, image_snapshots: appended
            keep = pa.array(np.ones(cur.num_rows, dtype=bool))
        out[name] = pa.concat_tables([cur.filter(keep), rows.cast(cur.schema)])
    return out


def _control_parts(control: pa.Table | None) -> tuple[pa.Table | None, pa.Table | None]:
    """The log's control rows, and those of snapshot files."""
    if control is None or control.num_rows == 0:
        return None, None
    is_log = pc.equal(pc.fill_null(control.column("source_kind"), "log"), "log")
    return control.filter(is_log), control.filter(pc.invert(is_log))


def _snapshot_ids(snap: pa.Table | None, control_snap: pa.Table | None) -> set[tuple[int, int]]:
    out: set[tuple[int, int]] = set()
    for t in (snap, control_snap):
        if t is not None and t.num_rows:
            g = t.group_by(["snapshot_end_offset", "snapshot_epoch"]).aggregate([])
            out |= set(zip(g.column("snapshot_end_offset").to_pylist(), g.column("snapshot_epoch").to_pylist(), strict=True))
    return out


def _best(snaps: Iterable[Snapshot]) -> list[Snapshot]:
    """One snapshot per end offset (the highest epoch), by end offset (as the sequential replay chooses)."""
    best: dict[int, Snapshot] = {}
    for s in snaps:
        if s.end_offset not in best or s.epoch > best[s.end_offset].epoch:
            best[s.end_offset] = s
    return sorted(best.values(), key=lambda s: s.end_offset)


def _same(a: Snapshot | None, b: Snapshot | None) -> bool:
    return (a is None) == (b is None) and (a is None or (a.end_offset, a.epoch) == (b.end_offset, b.epoch))


def _compact(t: pa.Table, chunks: int = 64) -> pa.Table:
    """``t`` in one chunk once it has ``chunks`` (a table grown by one chunk per step)."""
    return t.combine_chunks() if t.column(0).num_chunks >= chunks else t


class LiveCluster:
    """One cluster's live replay (see the module docstring). Picklable: it is the stream's state."""

    def __init__(self, run: _ClusterReplay, snapshot_ids: set[tuple[int, int]]) -> None:
        self.run = run
        self.snapshot_ids = snapshot_ids
        run.log = run.control = None       # the rows are replayed; the state keeps no bronze
        run.quarantine = []
        run.snapshots = []
        run.anomalies_before += len(run.img.anomalies)
        run.img.anomalies = []
        run.img.rows = {t: [] for t in VERSIONED_TABLES}
        run.img.closed = {t: [] for t in VERSIONED_TABLES}
        bt = run.batch_table
        self.pending = bt.filter(pc.invert(bt.column("certainly_committed")))
        run.batch_table = SILVER_TABLES["log_batches"].schema.empty_table()
        self._prune()

    @property
    def cluster_id(self) -> str:
        return self.run.cluster_id

    @property
    def last_offset(self) -> int | None:
        return self.run.last

    @classmethod
    def replay(cls, cluster_id: str, log: pa.Table | None, control: pa.Table | None, snapshots: pa.Table | None,
               reason: str | None = None) -> tuple[LiveCluster, Step]:
        """A whole replay of every bronze row of the cluster: the live state, and every row of its
        silver tables (a whole :class:`Step`)."""
        log, control, snapshots = _as_table(log), _as_table(control), _as_table(snapshots)
        run = _ClusterReplay(cluster_id, log, control, snapshots)
        run.run()
        res = SequentialResult([run])
        step = Step(cluster_id, True, dict(res.tables), res.quarantine, reason, run.replayed)
        versions = {t: res.tables[t] for t in VERSIONED_TABLES}
        step.tables[IMAGE_SNAPSHOTS] = image_rows(cluster_id, versions, mv_changes(versions["features"]))
        ids = _snapshot_ids(snapshots, _control_parts(control)[1])
        return cls(run, ids), step

    @classmethod
    def resume(cls, cluster_id: str, log: pa.Table | None, control: pa.Table | None, snapshots: pa.Table | None,
               stored: dict[str, pa.Table]) -> LiveCluster:
        """The live replay of the bronze rows given, taken up from a stored replay of exactly those rows
        instead of replaying them: ``stored`` holds the cluster's silver tables as that replay wrote
        them (each versioned table's open versions and the ``log_commit`` row are read). The state is
        the one :meth:`replay` leaves; the image is the stored one."""
        log, control, snapshots = _as_table(log), _as_table(control), _as_table(snapshots)
        run = _ClusterReplay(cluster_id, log, control, snapshots)
        opened = {}
        for t in VERSIONED_TABLES:
            rows = stored.get(t)
            if rows is not None and rows.num_rows:
                rows = rows.filter(pc.and_(_cluster(rows, cluster_id), pc.is_null(rows.column("valid_to_offset"))))
                opened[t] = rows.select(SILVER_TABLES[t].schema.names).to_pylist()
        commit = stored["log_commit"].filter(_cluster(stored["log_commit"], cluster_id)).to_pylist()
        if len(commit) != 1:
            raise ValueError(f"cluster {cluster_id}: no stored log_commit row to resume from")
        run.resume(opened, commit[0])
        return cls(run, _snapshot_ids(snapshots, _control_parts(control)[1]))

    def _prune(self) -> None:
        """Forget the records of snapshots that can no longer resynchronise a gap (a later gap starts
        after the last offset; a snapshot resynchronises a gap ``[lo, hi)`` when lo < end <= hi)."""
        last = self.run.last
        if last is None:
            return
        for s in self.run.snaps:
            if s.end_offset <= last + 1 and s.records:
                s.records = []

    def _newly_committed(self, committed: int) -> pa.Table:
        """The batches not yet proven committed that ``committed`` now covers, marked so (their
        ``log_batches`` rows change), taken out of ``pending``."""
        if isinstance(self.pending, list):  # a state kept as rows by an earlier version
            self.pending = table_rows("log_batches", self.pending)
        covered = pc.less_equal(self.pending.column("batch_last_offset"), committed)
        now = self.pending.filter(covered)
        self.pending = self.pending.filter(pc.invert(covered))
        i = now.schema.get_field_index("certainly_committed")
        return now.set_column(i, now.schema.field(i), pa.array([True] * now.num_rows, pa.bool_()))

    def _images(self, out: dict[str, pa.Table], before: int | None, level_before: int | None) -> pa.Table | None:
        """The ``image_snapshots`` rows of a step's metadata.version changes (None: none), the images
        at offsets after ``before`` (the last offset replayed before it; ``level_before``: the
        metadata.version level open then): every version visible at such an offset is open now or
        was closed by the step (``out``'s rows)."""
        if "features" not in out:
            return None
        at = mv_changes(out["features"], after=before, level_before=level_before)
        if not at:
            return None
        img = self.run.img
        versions = {}
        for t in VERSIONED_TABLES:
            opened = table_rows(t, list(img.last_row[t].values()), sort=False)
            if t in out:
                opened = pa.concat_tables([opened, closed_versions(out[t])])
            versions[t] = opened
        return image_rows(self.cluster_id, versions, at)

    def _mv_level(self) -> int | None:
        """The level of the open ``metadata.version`` version (None: none, or deleted)."""
        row = self.run.img.last_row["features"].get((METADATA_VERSION,))
        return None if row is None or row["deleted"] else row["feature_level"]

    def step(self, log: pa.Table | None = None, control: pa.Table | None = None,
             snapshots: pa.Table | None = None) -> Step:
        """Apply the cluster's new bronze rows (``metadata_log``, ``metadata_control``,
        ``snapshot_records`` rows published since the last step). Raises :class:`Unabsorbable`
        (nothing changed) when they change what was already replayed."""
        r = self.run
        log, control, snapshots = _as_table(log), _as_table(control), _as_table(snapshots)
        ctl_log, ctl_snap = _control_parts(control)
        # -- checks: nothing changes until they pass ------------------------------------------------
        ids = _snapshot_ids(snapshots, ctl_snap)
        again = sorted(ids & self.snapshot_ids)
        if again:
            raise Unabsorbable(f"more rows of snapshot {again[0][0]}-{again[0][1]}, already read")
        if r.first is None and ids:
            raise Unabsorbable("a snapshot of a cluster with no log yet (replay starts at the newest)")
        pos = _log_positions(log, ctl_log)
        present = np.unique(pos.column("offset").to_numpy())
        if r.first is None and len(present) and (r.snaps or ids or present[0] > 0):
            raise Unabsorbable("the first log rows of a cluster with snapshots, or starting past offset 0")
        batches = _batches(pos)
        base, last_off, epoch = (batches.column(c).to_numpy() for c in _BATCH_KEY)
        if len(base):
            if r.last is not None and int(base.min()) <= r.last:
                raise Unabsorbable(f"log rows at offset {int(base.min())}, at or below the last offset replayed "
                                   f"({r.last}): a copy from another node, a rewritten tail or a late batch")
            if _divergent(base, last_off, epoch).any():
                raise Unabsorbable("a divergent batch among the new rows")
        new = _snapshots(snapshots, ctl_snap) if ids else []
        usable = [s for s in new if s.kind == "snapshot" and s.complete]
        snaps = _best([*r.snaps, *usable])
        if r.first is None and len(present):  # the log's first rows, from offset 0 on the empty image
            r.first, r.image_floor = 0, -1
        last = (int(present[-1]) if r.last is None else max(r.last, int(present[-1]))) if len(present) else r.last
        if r.first is not None and r.first > 0 and not _same(start_snapshot(snaps, r.first, last), r.start):
            raise Unabsorbable("a snapshot changes where replay starts")
        for s in usable:
            hit = next(((lo, hi) for lo, hi in r.gap_list if lo < s.end_offset <= hi), None)
            if hit is not None:
                raise Unabsorbable(f"snapshot {s.name} falls in the offset gap {hit[0]}..{hit[1] - 1} already replayed")

        # -- the step ----------------------------------------------------------------------------
        img = r.img
        self.snapshot_ids |= ids
        for s in new:
            if s.kind == "snapshot" and not s.complete:
                img.anomaly(s.end_offset - 1, None, f"snapshot {s.name}", "SNAPSHOT_INCOMPLETE",
                            f"snapshot {s.name} has no SnapshotFooter: not used", s.end_offset)
        r.snaps = snaps
        gaps = [] if not len(present) else _gaps(present, r.replay_start) if r.last is None else \
            _gaps(np.concatenate([[r.last], present]), max(r.last, r.replay_start))
        r.gap_list = r.gap_list + gaps
        replayed, before, level_before = r.replayed, r.last, self._mv_level()
        r.replay_records(r._log_records(set(), log), deque(gaps))
        r.last = last

        # commit certainty (§5.1): below the highest epoch, or covered by a snapshot
        below, top = r.below_top, r.top_epoch
        if len(base):
            if top is None or int(epoch.max()) > top:
                below = max(below, r.max_batch_last if r.max_batch_last is not None else -1)
                top = int(epoch.max())
            older = epoch < top
            if older.any():
                below = max(below, int(last_off[older].max()))
        committed = below
        for s in snaps:
            committed = max(committed, min(s.end_offset - 1, last))
        rows = batch_rows(r.cluster_id, batches, committed, r.spans(), r.replay_start)
        now = self._newly_committed(committed)
        self.pending = _compact(pa.concat_tables([self.pending, rows.filter(pc.invert(rows.column("certainly_committed")))]))
        r.below_top, r.top_epoch, r.committed = below, top, committed
        if len(base):
            r.batches += len(base)
            r.last_batch_epoch = int(epoch[-1])
            r.max_batch_last = max(r.max_batch_last if r.max_batch_last is not None else -1, int(last_off.max()))

        # what changed
        out: dict[str, pa.Table] = {}
        for t in VERSIONED_TABLES:
            fresh, closed = img.rows[t], img.closed[t]
            if not fresh and not closed:
                continue
            seen = {id(x) for x in fresh}  # each touched entity's newest version is among ``fresh``
            emitted = fresh + [x for x in closed if id(x) not in seen]
            out[t] = table_rows(t, emitted)
            img.rows[t], img.closed[t] = [], []
        if rows.num_rows or now.num_rows:
            out["log_batches"] = pa.concat_tables([now, rows]).sort_by([(c, "ascending") for c in SILVER_TABLES["log_batches"].sort_key])
        if img.anomalies:
            out["replay_anomalies"] = table_rows("replay_anomalies", img.anomalies)
        images = self._images(out, before, level_before)
        if images is not None:
            out[IMAGE_SNAPSHOTS] = images
        r.commit = r.commit_row()
        r.anomalies_before += len(img.anomalies)
        img.anomalies = []
        out["log_commit"] = table_rows("log_commit", [r.commit])
        self._prune()
        return Step(r.cluster_id, False, out, records=r.replayed - replayed)
