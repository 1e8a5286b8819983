"""The live replay as a Structured Streaming query (docs/design.md, "Stream mode"): each cluster's
:class:`~kraft_replay.replay.live.LiveCluster` kept in Spark's state store (RocksDB) by
``transformWithStateInPandas`` keyed by cluster id, advanced with each micro-batch's new bronze rows,
and its steps written by the driver with delta-rs commits and one publish per micro-batch.

* **Input**: the bronze ``metadata_log``, ``metadata_control`` and ``snapshot_records`` rows the
  lake's streaming source delivers (published runs only), each tagged with its table and the table
  version that added it, plus the new ``broker_progress`` samples and ``quorum_status`` captures. The
  rows already there when the query starts come as one marker per cluster and table (:func:`changes`):
  the operator reads them itself.
* **The operator** (:class:`LiveReplay`): the state is the live replay, pickled and compressed (a value of its own,
  written only when a micro-batch changed it), and beside it the cluster's cache lag
  (:class:`~kraft_replay.outcomes.live_lag.LiveLag`), per input table the version through which a
  whole replay already read it and the newest version delivered so far. New rows go to
  :meth:`LiveCluster.step`; a cluster seen for the first time, or a step the kernel cannot absorb
  (:class:`~kraft_replay.replay.live.Unabsorbable`), is replayed whole by the sequential rules from
  the cluster's bronze rows read with delta-rs at the versions delivered so far (rows delivered later
  from those versions are then skipped) — a cluster seen for the first time whose batch replay is
  stored in the lake is taken up from it instead (:meth:`LiveCluster.resume`). The step's rows and the new samples and captures then go to
  the cache lag, which returns the buckets they changed (computed whole when they reach behind its
  window). Out comes, per cluster, each changed table's rows as Arrow IPC.
* **The sink** (:func:`write_steps`, on the driver, no Spark plan): one Spark job brings the
  operator's output over as Arrow; per cluster the versioned tables' files holding open versions are
  rewritten (closed versions into files of their own; the open versions of the entities a step
  touched replaced by the step's), ``log_batches``, ``log_commit`` and
  ``cache_lag`` merged, anomalies appended, a whole replay replaces the cluster's rows; ``replay_progress`` says what ran
  and why; then one publish. The run id is ``live-<query>-<batch>``: a micro-batch Spark runs again
  after a crash finds its run in ``replay_progress`` and writes nothing twice (a run killed before
  its publish is rolled back by the next one).
* **Images**: a step's ``image_snapshots`` rows are the images at the metadata.version changes it
  passed, made by the kernel from its image (:mod:`kraft_replay.replay.image_rows`): appended, or
  for a whole replay replacing the cluster's (the images at offsets asked for, ``REQUESTED``, kept).
* **Derived tables** (``broker_applied``, the outcome tables, the images at offsets asked for) stay
  batch DataFrame jobs, run for the clusters touched since their last run every ``derive_every``
  seconds and when the query stops (:mod:`kraft_replay.serve.replay_stream`).
"""

from __future__ import annotations

import pickle
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from kraft_replay.ingest.schemas import (
    BROKER_PROGRESS_SCHEMA, CONTROL_SCHEMA, LOG_SCHEMA, QUARANTINE_SCHEMA, QUORUM_STATUS_SCHEMA, SNAPSHOT_SCHEMA)
from kraft_replay.lake.stream import COMMIT_VERSION, MARKER_COLUMN, TABLE_COLUMN
from kraft_replay.outcomes.cache_lag import CACHE_LAG
from kraft_replay.outcomes.live_lag import CACHE_LAG_KEY, CACHE_LAG_SCHEMA, LagUnabsorbable, LiveLag
from kraft_replay.replay.live import (
    BATCH_KEY, LiveCluster, Step, Unabsorbable, closed_versions, open_versions, open_versions_kept)
from kraft_replay.replay.run import QUARANTINE
from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA, REQUESTED, SILVER_TABLES, VERSIONED_TABLES

__all__ = ["BRONZE", "OUTPUT", "LiveReplay", "changes", "write_steps", "steps_of", "LiveReport"]

#: the bronze tables the live replay reads, and their schemas
BRONZE = {"metadata_log": LOG_SCHEMA, "metadata_control": CONTROL_SCHEMA, "snapshot_records": SNAPSHOT_SCHEMA}
METRICS = "broker_progress"
STATUS = "quorum_status"
#: the metric tables the live cache lag reads (the columns it needs)
LAG_INPUTS = {METRICS: BROKER_PROGRESS_SCHEMA,
              STATUS: pa.schema([QUORUM_STATUS_SCHEMA.field(c) for c in ("cluster_id", "observed_at", "high_watermark")])}
#: the silver columns the live cache lag reads
LAG_SILVER = {t: pa.schema([SILVER_TABLES[t].schema.field(c) for c in cols]) for t, cols in (
    ("log_batches", ("cluster_id", "batch_last_offset", "append_time")),
    ("brokers", ("cluster_id", "broker_id", "valid_from_offset", "record_offset", "valid_to_offset", "deleted", "fenced")),
    ("partitions", ("cluster_id", "topic_id", "partition_id", "valid_from_offset", "record_offset", "valid_to_offset",
                    "deleted", "leader", "leader_epoch")))}
# the operator's extra input columns (names without a leading underscore: pandas hand-offs rename those)
SOURCE = "kr_source"
VERSION = "kr_version"
MARKER = "kr_marker"
#: the operator's output: per cluster and table, the step's rows as Arrow IPC
OUTPUT = StructType([StructField("cluster_id", StringType()), StructField("kind", StringType()),
                     StructField("name", StringType()), StructField("data", BinaryType()),
                     StructField("reason", StringType()), StructField("records", LongType())])
DIVERGENT = "DIVERGENT_UNCOMMITTED"
FIRST_ROWS = "the cluster's first rows in this stream"


def changes(lake, cluster_id: str | None = None, max_files_per_trigger: int | None = None,  # noqa: ANN001
            tasks: int | None = None, snapshot_markers: bool = True) -> DataFrame:
    """A streaming DataFrame of every bronze row published from now on: the three log tables' rows,
    the new ``broker_progress`` samples and ``quorum_status`` captures (the columns the cache lag
    reads), ``kr_source`` naming the table, ``kr_version`` the table version that added the row and
    ``kr_marker``. One stream over the five tables (``Lake.read_stream_tables``): each micro-batch ends
    at one published moment in all of them, so an ingest run's log and control rows arrive together.

    The rows already there when a query starts come, with ``snapshot_markers``, as one marker row per
    cluster and table (``kr_marker`` true, ``kr_version`` the version they are at): the operator reads
    a cluster's rows itself with delta-rs when it first sees it, so Spark need not hand them over
    (measured on a storm's 180k records: ~13 s of a 17 s first micro-batch). Without it they come as
    rows. ``tasks``: how many tasks read a micro-batch."""
    df = lake.read_stream_tables([*BRONZE, *LAG_INPUTS], max_files_per_trigger=max_files_per_trigger, with_version=True,
                                 tasks=tasks, snapshot_markers=snapshot_markers)
    df = df.withColumnRenamed(TABLE_COLUMN, SOURCE).withColumnRenamed(COMMIT_VERSION, VERSION)
    df = (df.withColumnRenamed(MARKER_COLUMN, MARKER) if snapshot_markers
          else df.withColumn(MARKER, F.lit(False)))
    names = dict.fromkeys(n for schema in (*BRONZE.values(), *LAG_INPUTS.values()) for n in schema.names)
    df = df.select(*names, SOURCE, VERSION, MARKER)
    return df if cluster_id is None else df.where(F.col("cluster_id") == F.lit(cluster_id))


def _ipc(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def _from_ipc(b: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(b)).read_all()


def _arrow(pdf: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """A table's rows as the operator gets them (pandas) back in the bronze contract's Arrow types."""
    if pdf.empty:
        return schema.empty_table()
    return pa.Table.from_pandas(pdf[schema.names], schema=schema, preserve_index=False)


def read_bronze(lake_root: str, cluster_id: str, versions: dict[str, int | None],  # noqa: ANN001
                storage_options: dict[str, str] | None = None,
                tables: dict[str, pa.Schema] = BRONZE) -> tuple[list[pa.Table], dict[str, int]]:
    """The cluster's rows of ``tables`` (the three log tables by default) at ``versions`` (None: the
    published version), read with delta-rs (no Spark), and the version each was read at."""
    from kraft_replay.lake import Lake

    lake = Lake(lake_root, None, backend="deltars", storage_options=storage_options)
    published = lake.published_versions()
    out, at = [], {}
    for t, schema in tables.items():
        v = versions.get(t)
        v = published.get(t) if v is None else v
        if not lake.exists(t) or v is None:
            out.append(schema.empty_table())
            continue
        got = lake.read_arrow(t, schema.names, version=v, partitions=[("cluster_id", "=", cluster_id)])
        out.append(got.select(schema.names).cast(schema))
        at[t] = v
    return out, at


def _versions_so_far(delivered: dict[str, int], read: dict[str, int]) -> dict[str, int | None]:
    """Per input table, the version a whole read takes: the newest delivered so far or read by the last
    whole read (None: the published version, nothing of it delivered yet)."""
    at = {t: max(delivered.get(t, -1), read.get(t, -1)) for t in (*BRONZE, *LAG_INPUTS)}
    return {t: (v if v >= 0 else None) for t, v in at.items()}


#: per cluster, the state objects a Python worker kept after its last micro-batch and the tokens of the
#: two state values they were stored as (Spark reuses its Python workers: a storm micro-batch's kernel
#: unpickles in ~1 s)
_KEPT: dict[str, tuple[bytes, bytes, tuple]] = {}
_MAGIC = b"KRT1"   # "live" holding the whole state (an earlier version's checkpoint)
_MAGIC2 = b"KRT2"  # "live" holding the kernel, "head" the rest and the kernel's token (an earlier version's)
_MAGIC3 = b"KRT3"  # as KRT2, each pickle compressed (:func:`_pack`)
_TOKEN = 16
#: zstd at level 1: a storm's medium kernel pickles to 14.9 MB and packs to 1.3 MB in 13 ms (6 ms back).
#: Every byte of a state value is copied about eight times on its way through Spark's state server
#: into RocksDB (half the stream JVM's allocations before, docs/benchmarks.md, "Live freshness").
_CODEC = pa.Codec("zstd", compression_level=1)


def _pack(obj: object) -> bytes:
    """``obj`` pickled and compressed, its pickle's length first (8 bytes, big-endian)."""
    raw = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return len(raw).to_bytes(8, "big") + _CODEC.compress(raw, asbytes=True)


def _unpack(blob: bytes) -> object:
    """What :func:`_pack` packed."""
    return pickle.loads(_CODEC.decompress(blob[8:], decompressed_size=int.from_bytes(blob[:8], "big"), asbytes=True))


def _loads(value: bytes) -> Callable[[bytes], object]:
    """How the payload of a state value with this magic is read: packed (``KRT3``) or a plain pickle."""
    return _unpack if value[:len(_MAGIC3)] == _MAGIC3 else pickle.loads


class LiveReplay(StatefulProcessor):
    """The stream's stateful operator (see the module docstring), keyed by cluster id. ``lag_bucket``:
    the cache lag's bucket in seconds; ``lag_window``: how far behind the newest sample its state reaches
    (:class:`~kraft_replay.outcomes.live_lag.LiveLag`).

    Its state is two values per cluster: ``live``, the kernel (:class:`~kraft_replay.replay.live.LiveCluster`,
    written only by a micro-batch that changed it: a storm's medium cluster pickles to 9-15 MB, stored
    compressed to about a tenth), and
    ``head``, the rest (the versions a whole replay read and those delivered so far, the cache lag's
    state) with the token of the ``live`` value it goes with, written by every micro-batch that brings
    rows. A worker that kept the objects of the store's newest values reads only ``head``."""

    def __init__(self, lake_root: str, storage_options: dict[str, str] | None = None, lag_bucket: float = 1.0,
                 lag_window: float = 600.0) -> None:
        self.lake_root = lake_root
        self.storage_options = storage_options
        self.lag = {"bucket_s": lag_bucket, "window_s": lag_window}

    def init(self, handle: StatefulProcessorHandle) -> None:
        blob = StructType([StructField("blob", BinaryType())])
        self.state = handle.getValueState("live", blob)
        self.head = handle.getValueState("head", blob)

    def _held(self, cid: str) -> tuple[tuple[bytes, bytes] | None, tuple | None]:
        """The tokens of the store's values and the cluster's state (kernel, versions read, cache lag,
        versions delivered): the objects this Python worker kept after the cluster's last micro-batch
        where the store holds what they were kept as (the tokens), else unpickled from the store (a new
        worker, or a micro-batch Spark runs again after a failure: the store's older values)."""
        kept = _KEPT.pop(cid, None)  # popped: a failure half-way through leaves nothing kept
        if self.head.exists():
            hb = self.head.get()[0]
            n = len(_MAGIC3)
            tokens = (hb[n:n + _TOKEN], hb[n + _TOKEN:n + 2 * _TOKEN])
            if kept is not None and kept[0] == tokens[0]:
                return tokens, kept[2]
            rest = _loads(hb)(hb[n + 2 * _TOKEN:])
            if kept is not None and kept[1] == tokens[1]:  # the kernel unchanged since: only the rest differs
                return tokens, (kept[2][0], *rest)
            lb = self.state.get()[0]
            if lb[:n] not in (_MAGIC2, _MAGIC3) or lb[n:n + _TOKEN] != tokens[1]:
                raise RuntimeError(f"cluster {cid}: the state store's kernel is not the one its head was written with")
            return tokens, (_loads(lb)(lb[n + _TOKEN:]), *rest)
        if not self.state.exists():
            return None, None
        blob = self.state.get()[0]  # an earlier version's checkpoint: the whole state in ``live``
        return None, pickle.loads(blob[len(_MAGIC) + _TOKEN:] if blob[:len(_MAGIC)] == _MAGIC else blob)

    def _keep(self, cid: str, held: tuple, tokens: tuple[bytes, bytes] | None, kernel_changed: bool) -> None:
        """Write the cluster's state to the store (the kernel only when ``kernel_changed`` or not yet
        written as its own value), each value prefixed with a new token, and keep the objects."""
        live_token = tokens[1] if tokens is not None and not kernel_changed else None
        if live_token is None:
            live_token = uuid.uuid4().bytes
            self.state.update((_MAGIC3 + live_token + _pack(held[0]),))
        head_token = uuid.uuid4().bytes
        self.head.update((_MAGIC3 + head_token + live_token + _pack(held[1:]),))
        _KEPT[cid] = (head_token, live_token, held)

    def _resumed(self, cid: str, tables: list[pa.Table]) -> tuple[LiveCluster, Step] | None:
        """The cluster taken up from the replay stored in the lake (a batch replay's, its
        ``replay_progress`` row with the bronze rows it read) when the bronze ``tables`` hold exactly
        those rows up to its last offset (no copy or snapshot added since): the live state and a step of
        the rows after that offset. None when there is no such replay."""
        from kraft_replay.lake import Lake
        from kraft_replay.replay.incremental import REPLAY_PROGRESS, REPLAY_PROGRESS_SCHEMA

        lake = Lake(self.lake_root, None, backend="deltars", storage_options=self.storage_options)
        if not (lake.exists(REPLAY_PROGRESS) and lake.exists("log_commit")):
            return None
        part = [("cluster_id", "=", cid)]
        progress = lake.read_arrow(REPLAY_PROGRESS, REPLAY_PROGRESS_SCHEMA.names, partitions=part).to_pylist()
        commit = lake.read_arrow("log_commit", SILVER_TABLES["log_commit"].schema.names, partitions=part)
        if len(progress) != 1 or commit.num_rows != 1 or progress[0]["log_rows"] is None:
            return None  # none, or the live path's own (it counts no bronze rows)
        p, end = progress[0], progress[0]["through_offset"]
        if end is None or commit.column("last_offset")[0].as_py() != end:
            return None
        split = stored_and_after(tables, p)
        if split is None:
            return None
        (log_old, ctl_old, snap_old), (log_new, ctl_new, snap_new) = split
        stored = {t: lake.read_arrow(t, SILVER_TABLES[t].schema.names, partitions=part,
                                     filter=pc.field("valid_to_offset").is_null())
                  for t in VERSIONED_TABLES if lake.exists(t)}
        stored["log_commit"] = commit
        live = LiveCluster.resume(cid, log_old, ctl_old, snap_old, stored)
        step = live.step(log_new, ctl_new, snap_new)
        step.reason = f"taken up from the replay stored through offset {end}"
        return live, step

    def _whole(self, cid: str, delivered: dict[str, int], read: dict[str, int], reason: str):  # noqa: ANN202
        """The cluster replayed whole, and its cache lag computed whole, from its rows read with delta-rs
        at the versions delivered so far: the live state, the lag state, the step (with ``cache_lag``)
        and the versions read. A cluster new to the stream whose replay is stored in the lake is taken
        up from it instead (:meth:`_resumed`): its step holds only what came after."""
        at = _versions_so_far(delivered, read)
        tables, read = read_bronze(self.lake_root, cid, at, self.storage_options)
        taken = None
        if reason == FIRST_ROWS:
            try:
                taken = self._resumed(cid, tables)
            except Unabsorbable:
                taken = None  # what came after changes what the stored replay read: replayed whole
        if taken is not None:
            live, step = taken
            lag, step.tables[CACHE_LAG], read = self._lag_whole(cid, step, delivered, read)
            step.lag_whole = True
            return live, lag, step, read
        live, step = LiveCluster.replay(cid, *tables, reason=reason)
        (samples, status), read_lag = read_bronze(self.lake_root, cid, at, self.storage_options, LAG_INPUTS)
        lag, rows = LiveLag.whole(cid, *(step.tables.get(t) for t in ("log_batches", "brokers", "partitions")),
                                  samples, status, **self.lag)
        step.tables[CACHE_LAG] = rows
        return live, lag, step, {**read, **read_lag}

    def _lag_whole(self, cid: str, step: Step | None, delivered: dict[str, int], read: dict[str, int]):  # noqa: ANN202
        """The cluster's cache lag computed whole: its samples and captures read with delta-rs at the
        versions delivered so far, its published ``log_batches``, ``brokers`` and ``partitions`` with
        ``step``'s rows applied. The lag state, its rows and the versions read."""
        (samples, status), read_lag = read_bronze(self.lake_root, cid, _versions_so_far(delivered, read),
                                                  self.storage_options, LAG_INPUTS)
        published, _ = read_bronze(self.lake_root, cid, {}, self.storage_options, LAG_SILVER)
        silver = []
        for (t, schema), rows in zip(LAG_SILVER.items(), published, strict=True):
            new = None if step is None else step.tables.get(t)
            if new is None:
                silver.append(rows)
                continue
            new = new.select(schema.names).cast(schema)
            if t in VERSIONED_TABLES:  # the step's rows: the versions it closed, the open ones of what it touched
                rows = pa.concat_tables([closed_versions(rows), open_versions_kept(rows, new, t)])
            silver.append(pa.concat_tables([rows, new]))
        lag, out = LiveLag.whole(cid, *silver, samples, status, **self.lag)
        return lag, out, {**read, **read_lag}

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:  # noqa: N802, N803
        cid = key[0]
        pdf = pd.concat(list(rows), ignore_index=True)
        tokens, held = self._held(cid)
        kernel_changed = False
        # state: the kernel, the versions a whole replay read, the cache lag, the versions delivered so far
        live, read, lag, delivered = [*held, *[None, {}][len(held) - 2:]] if held is not None else (None, {}, None, {})
        got, arrived, unseen = {}, set(), set()
        marked = pdf[MARKER].fillna(False).astype(bool)
        for t, schema in (*BRONZE.items(), *LAG_INPUTS.items()):
            is_t = pdf[SOURCE] == t
            sub = pdf[is_t]
            if len(sub):
                arrived.add(t)
                delivered[t] = max(delivered.get(t, -1), int(sub[VERSION].max()))
                unread = sub[VERSION] > read.get(t, -1)  # a whole replay read the others already
                if (marked[is_t] & unread).any():
                    unseen.add(t)  # rows standing behind a marker: a whole read takes them
                sub = sub[unread & ~marked[is_t]]
            got[t] = _arrow(sub, schema)
        new = any(got[t].num_rows for t in BRONZE)
        new_lag = any(got[t].num_rows for t in LAG_INPUTS)
        step = None
        if unseen and live is not None:
            # markers come only for the rows there when a query starts, when no state is held yet
            live, lag, step, read = self._whole(cid, delivered, read, f"rows of {', '.join(sorted(unseen))} "
                                                "delivered as snapshot markers")
            kernel_changed = True
        elif new or live is None and arrived & set(BRONZE):
            reason = FIRST_ROWS
            if live is not None:
                try:
                    step = live.step(*(got[t] for t in BRONZE))
                except Unabsorbable as exc:  # nothing changed
                    reason = str(exc)
            if step is None:
                live, lag, step, read = self._whole(cid, delivered, read, reason)
            kernel_changed = True
        if live is not None and not (step is not None and (step.whole or step.lag_whole)) and (step is not None or new_lag):
            # seed 002's cache lag, sample by sample: what the step and the new samples change
            inputs = step.tables if step is not None else {}
            try:
                if lag is None:
                    raise LagUnabsorbable("no cache lag state yet")  # a state kept before the live cache lag
                rows_lag = lag.step(*(inputs.get(t) for t in ("log_batches", "brokers", "partitions")),
                                    got[METRICS], got[STATUS])
                if rows_lag.num_rows:
                    step = step or Step(cid, False, {})
                    step.tables[CACHE_LAG] = rows_lag
            except LagUnabsorbable:  # reaches behind the lag's window: the cluster's lag computed whole
                lag, rows_lag, read = self._lag_whole(cid, step, delivered, read)
                step = step or Step(cid, False, {})
                step.tables[CACHE_LAG] = rows_lag
                step.lag_whole = True
        if arrived:
            self._keep(cid, (live, read, lag, delivered), tokens, kernel_changed)
        elif held is not None and tokens is not None:
            _KEPT[cid] = (*tokens, held)
        out: list[dict[str, Any]] = []
        if step is not None:
            kind = "whole" if step.whole else "step"
            for name, t in step.tables.items():
                k = "lag-whole" if name == CACHE_LAG and step.lag_whole and not step.whole else kind
                out.append({"cluster_id": cid, "kind": k, "name": name, "data": _ipc(t), "reason": step.reason,
                            "records": step.records})
            if step.whole:
                out.append({"cluster_id": cid, "kind": kind, "name": QUARANTINE, "data": _ipc(step.quarantine),
                            "reason": step.reason, "records": step.records})
        if METRICS in arrived:
            out.append({"cluster_id": cid, "kind": "metrics", "name": METRICS, "data": None, "reason": None, "records": 0})
        if out:
            yield pd.DataFrame(out, columns=OUTPUT.fieldNames())

    def close(self) -> None:
        pass


def stored_and_after(tables: list[pa.Table], progress: dict) -> tuple[tuple[pa.Table, ...], tuple[pa.Table, ...]] | None:
    """A cluster's bronze ``tables`` (log, control, snapshot rows) split into what its stored batch
    replay read (``progress``: its ``replay_progress`` row) and what came after, or None when they are
    not exactly those rows plus later ones. Log and control-log rows after its last offset came after;
    so did the snapshots ending past it, unless the snapshot rows are as many as it read (it read
    every one then, a snapshot ahead of its log included: the position is found from them as it was).
    None: rows added at or below its last offset (a copy, a rewritten tail, a late snapshot)."""
    from kraft_replay.replay.live import _control_parts

    end = progress["through_offset"]
    log, control, snaps = tables
    ctl_log, ctl_snap = (t if t is not None else CONTROL_SCHEMA.empty_table() for t in _control_parts(control))

    def split(t: pa.Table, column: str, last: int) -> tuple[pa.Table, pa.Table]:
        old = pc.fill_null(pc.less_equal(t.column(column), last), True)
        return t.filter(old), t.filter(pc.invert(old))

    (log_old, log_new), (ctl_old, ctl_new) = split(log, "offset", end), split(ctl_log, "offset", end)
    if (snaps.num_rows, ctl_snap.num_rows) == (progress["snapshot_rows"], progress["control_snapshot_rows"]):
        (snap_old, snap_new), (csnap_old, csnap_new) = (snaps, snaps.slice(0, 0)), (ctl_snap, ctl_snap.slice(0, 0))
    else:
        (snap_old, snap_new), (csnap_old, csnap_new) = (split(snaps, "snapshot_end_offset", end + 1),
                                                        split(ctl_snap, "snapshot_end_offset", end + 1))
    if (log_old.num_rows, ctl_old.num_rows, csnap_old.num_rows, snap_old.num_rows) != (
            progress["log_rows"], progress["control_log_rows"], progress["control_snapshot_rows"], progress["snapshot_rows"]):
        return None
    return ((log_old, pa.concat_tables([ctl_old, csnap_old]), snap_old),
            (log_new, pa.concat_tables([ctl_new, csnap_new]), snap_new))


def steps_of(rows: pa.Table) -> tuple[list[Step], list[str]]:
    """The operator's output of one micro-batch (as Arrow): the steps, and the clusters with new metric
    samples."""
    steps: dict[str, Step] = {}
    metrics: list[str] = []
    for r in rows.to_pylist():
        cid = r["cluster_id"]
        if r["kind"] == "metrics":
            metrics.append(cid)
            continue
        s = steps.setdefault(cid, Step(cid, r["kind"] == "whole", {}, reason=r["reason"], records=r["records"] or 0))
        s.lag_whole = s.lag_whole or r["kind"] == "lag-whole"
        t = _from_ipc(r["data"])
        if r["name"] == QUARANTINE:
            s.quarantine = t
        else:
            s.tables[r["name"]] = t
    return [steps[c] for c in sorted(steps)], sorted(set(metrics))


def _may_hold_open(stats) -> bool:  # noqa: ANN001 - a kraft_replay.lake.FileStats or None
    """Whether a versioned table's file may hold an open version (``valid_to_offset`` null)."""
    nulls = None if stats is None else stats.null_count.get("valid_to_offset")
    return nulls is None or nulls > 0


def ensure_silver_tables(lake) -> None:  # noqa: ANN001 - a Lake
    """Create the silver tables, ``image_snapshots``, ``replay_progress``, ``ingest_quarantine`` and
    ``cache_lag`` where missing."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from kraft_replay.replay.incremental import REPLAY_PROGRESS, REPLAY_PROGRESS_SCHEMA

    for name, spec in SILVER_TABLES.items():
        lake.create_table(name, from_arrow_schema(spec.schema), partition_by=list(spec.partition_by))
    lake.create_table(REPLAY_PROGRESS, from_arrow_schema(REPLAY_PROGRESS_SCHEMA), partition_by=["cluster_id"])
    lake.create_table(QUARANTINE, from_arrow_schema(QUARANTINE_SCHEMA), partition_by=["cluster_id"])
    lake.create_table(CACHE_LAG, from_arrow_schema(CACHE_LAG_SCHEMA), partition_by=["cluster_id"])
    lake.create_table(IMAGE_SNAPSHOTS, from_arrow_schema(IMAGE_SNAPSHOTS_SCHEMA), partition_by=["cluster_id"])


def _table_write(lake, s: Step, name: str, rows: pa.Table, part: dict[str, str]) -> Callable[[], Any]:  # noqa: ANN001
    """The write of step ``s``'s rows of table ``name`` (see the module docstring)."""
    if name == CACHE_LAG and s.lag_whole and not s.whole:  # the cluster's lag computed whole
        return lambda: lake.rewrite_arrow(name, part, lambda old: [rows])
    if name == CACHE_LAG and not s.whole:  # seed 002: the buckets the step changed
        return lambda: lake.merge_arrow(name, rows, CACHE_LAG_KEY)
    if s.whole and name == IMAGE_SNAPSHOTS:  # the images at offsets asked for are the derive's (REQUESTED)
        return lambda: lake.rewrite_arrow(name, part, lambda old: [old.filter(pc.equal(old.column("trigger"), REQUESTED)), rows])
    if s.whole and name in VERSIONED_TABLES:  # closed and open versions in files of their own
        return lambda: lake.rewrite_arrow(name, part, lambda old: [closed_versions(rows), open_versions(rows)])
    if s.whole:
        return lambda: lake.rewrite_arrow(name, part, lambda old: [rows])
    if name in VERSIONED_TABLES:
        return lambda: lake.rewrite_arrow(name, part, lambda old: [
            pa.concat_tables([closed_versions(old), closed_versions(rows)]),
            pa.concat_tables([open_versions_kept(old, rows, name), open_versions(rows)])],
            touched=_may_hold_open, columns=["valid_to_offset"])
    if name == "log_batches":
        return lambda: lake.merge_arrow(name, rows, BATCH_KEY)
    if name == "log_commit":
        return lambda: lake.merge_arrow(name, rows, ["cluster_id"])
    return lambda: lake.append_arrow(name, rows)


def _run_writes(writes: dict[str, list[Callable[[], Any]]], fault: Callable[[str, str], None]) -> None:
    """Run each table's writes in order, the tables side by side (delta-rs commits release the GIL;
    measured: a tiny micro-batch's commits 0.5-0.6 s one after another). The first table's writes run
    alone first: they settle the run's adoption of tables never published (``Lake.start_run``)."""
    from concurrent.futures import ThreadPoolExecutor

    def table(name: str) -> None:
        for w in writes[name]:
            w()
        fault("kill-after-commit", name)  # test hook: KRAFT_REPLAY_FAULT=kill-after-commit:<table>

    names = sorted(writes)
    if not names:
        return
    table(names[0])
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="kraft-replay-commit") as pool:
        for f in [pool.submit(table, n) for n in names[1:]]:
            f.result()


def write_steps(lake, steps: Sequence[Step], run_id: str) -> dict[str, int] | None:  # noqa: ANN001 - a Lake
    """Write the steps of one micro-batch in one published run ``run_id`` (see the module docstring);
    None when that run is already in ``replay_progress`` (a micro-batch run again: nothing written).
    Returns the published versions. The tables exist (:func:`ensure_silver_tables`, once per stream)."""
    import datetime as dt

    from kraft_replay.ingest.pipeline import fault
    from kraft_replay.replay.incremental import REPLAY_PROGRESS, REPLAY_PROGRESS_SCHEMA

    if not steps:
        return {}
    done = lake.read_arrow(REPLAY_PROGRESS, ["run_id"], filter=pc.field("run_id") == run_id)
    if done.num_rows:
        return None
    names = sorted({n for s in steps for n in s.tables} | {REPLAY_PROGRESS}
                   | ({QUARANTINE} if any(s.whole for s in steps) else set()))
    lake.start_run(run_id, names)
    try:
        now = dt.datetime.now(dt.timezone.utc)
        progress = []
        writes: dict[str, list[Callable[[], Any]]] = {}  # per table, its writes in the steps' order
        for s in steps:
            part = {"cluster_id": s.cluster_id}
            for name, rows in s.tables.items():
                writes.setdefault(name, []).append(_table_write(lake, s, name, rows, part))
            if s.whole:
                q = s.quarantine
                writes.setdefault(QUARANTINE, []).append(lambda part=part, q=q: lake.rewrite_arrow(QUARANTINE, part, lambda old: [
                    old.filter(pc.invert(pc.equal(pc.fill_null(old.column("reason_code"), ""), DIVERGENT))), q]))
            if "log_commit" not in s.tables:
                continue  # new metric samples only: cache_lag merged (the same rows again if run again)
            commit = s.tables["log_commit"].to_pylist()
            last = commit[0]["last_offset"] if commit else None
            progress.append({"cluster_id": s.cluster_id, "replayed_at": now, "run_id": run_id,
                             "mode": "FULL" if s.whole else "LIVE", "reason": s.reason,
                             "through_offset": last, "new_records": s.records})
        _run_writes(writes, fault)
        if progress:
            lake.merge_arrow(REPLAY_PROGRESS, pa.Table.from_pylist(progress, schema=REPLAY_PROGRESS_SCHEMA), ["cluster_id"])
        return lake.publish(names, run_id)
    except BaseException:
        lake.end_run()
        raise


@dataclass
class LiveReport:
    """What a live stream run did."""

    batches: int = 0
    steps: int = 0
    whole: int = 0
    reasons: list[str] = field(default_factory=list)
    derived: int = 0
    lag_buckets: int = 0      # cache_lag rows written (a bucket written again counts again)
    batch_seconds: list[float] = field(default_factory=list)
    caught_up: list[str] = field(default_factory=list)  # clusters the batch replay caught up before the query

    def line(self) -> str:
        first = f"replay stream: batch catch-up of {', '.join(self.caught_up)}; " if self.caught_up else "replay stream: "
        if not self.batches:
            return first + "no new bronze rows"
        s = sorted(self.batch_seconds)
        return (f"{first}{self.batches} micro-batch(es), {self.steps} cluster step(s) ({self.whole} whole "
                f"replay(s)), cache_lag {self.lag_buckets} bucket row(s), derived tables {self.derived} time(s); "
                f"seconds per batch p50 {s[len(s) // 2]:.2f}, max {s[-1]:.2f}")


def micro_batch(lake, batch: DataFrame, batch_id: int, query_id: str, report: LiveReport,  # noqa: ANN001
                pending: set[str], say: Callable[[str], None]) -> None:
    """The sink of one micro-batch: the operator's output as Arrow (one Spark job), written by
    :func:`write_steps`; the touched clusters join ``pending`` (their derived tables are due)."""
    t0 = time.time()
    rows = batch.toArrow()
    if rows.num_rows == 0:
        return
    t1 = time.time()
    steps, metrics = steps_of(rows)
    run_id = f"live-{query_id[:8]}-{batch_id}"
    published = write_steps(lake, steps, run_id)
    pending.update(s.cluster_id for s in steps)
    pending.update(metrics)
    report.batches += 1
    report.steps += sum(1 for s in steps if s.whole or "log_commit" in s.tables)
    report.lag_buckets += sum(s.tables[CACHE_LAG].num_rows for s in steps if CACHE_LAG in s.tables)
    for s in steps:
        if s.whole:
            report.whole += 1
            report.reasons.append(f"{s.cluster_id}: {s.reason}")
    report.batch_seconds.append(time.time() - t0)
    what = ", ".join(f"{s.cluster_id} " + ("replayed whole (" + str(s.reason) + ")" if s.whole else
                                           f"+{s.records} record(s)" + (f" ({s.reason})" if s.reason else "")
                                           if "log_commit" in s.tables else "metrics only")
                     + (f", cache_lag {s.tables[CACHE_LAG].num_rows} bucket(s)" + (" (computed whole)" if s.lag_whole else "")
                        if CACHE_LAG in s.tables else "")
                     for s in steps) or "no log rows"
    note = " (already written: a micro-batch run again)" if published is None else ""
    say(f"batch {batch_id}: {what}" + (f"; metrics of {', '.join(metrics)}" if metrics else "")
        + f"; published in {time.time() - t0:.2f} s (operator {t1 - t0:.2f} s, commits {time.time() - t1:.2f} s){note}")
