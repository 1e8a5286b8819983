"""``--segments-out``: the generated log as real KRaft files, encoded by the codec.

Layout written under the output directory (facts §0, §4)::

    meta.properties                         cluster.id, node.id, version
    bootstrap.checkpoint                    the bootstrap records (snapshot format)
    __cluster_metadata-0/<base:020d>.log    segments, rolled at ``log.segment_bytes``
    __cluster_metadata-0/<end:020d>-<epoch:010d>.checkpoint   one per planned snapshot

Segments are encoded on the workers with ``mapInArrow``: rows are grouped by the million-offset
bucket of their batch's base offset (so no batch is split between tasks), each task sorts its
buckets, frames every record with ``encode_record_value``, builds each batch as KRaft does
(``build_batch``: CreateTime, no producer, timestamp = append time, leader epoch = Raft epoch),
interleaves the log's control batches (LEADER_CHANGE) at their offsets and writes files, starting a
new file at each bucket and whenever a file reaches the size limit. Snapshot files are small and
are encoded on the driver from ``snapshot_records``: a SnapshotHeader control batch at position 0,
data batches from position 1, a SnapshotFooter control batch last, every batch stamped with the
snapshot's epoch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kraft_replay.codec.arrow_payload import PAYLOAD_FIELDS, records_from_payload_columns
from kraft_replay.codec.batch import build_batch
from kraft_replay.codec.control import ControlRecord, encode_control_record
from kraft_replay.codec.files import segment_name, snapshot_name
from kraft_replay.codec.records import encode_record_value
from kraft_replay.generate.log import control_record
from kraft_replay.generate.plan import Plan

PARTITION_DIR = "__cluster_metadata-0"
BUCKET = 1_000_000
_RESULT = pa.schema([("file", pa.string()), ("first_offset", pa.int64()), ("last_offset", pa.int64()),
                     ("size_bytes", pa.int64())])


def _encode_control(rec: ControlRecord) -> tuple[bytes, bytes]:
    return encode_control_record(rec)


def _segment_writer(out_dir: str, segment_bytes: int, controls: dict[int, list[tuple[int, int, int, bytes, bytes]]]):
    """The ``mapInArrow`` function: encode and write the segments of the buckets it receives."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not tables:
            return
        table = pa.concat_tables(tables).sort_by([("offset", "ascending")])
        recs = records_from_payload_columns(table)
        offsets = table.column("offset").to_pylist()
        bases = table.column("batch_base_offset").to_pylist()
        epochs = table.column("batch_leader_epoch").to_pylist()
        times = table.column("time_ms").to_pylist()
        # (base offset, epoch, time, [values], keys or None)
        units: list[tuple[int, int, int, list[bytes], list[bytes] | None]] = []
        i = 0
        n = len(offsets)
        while i < n:
            base = bases[i]
            j = i
            values = []
            while j < n and bases[j] == base:
                values.append(encode_record_value(recs[j]))  # type: ignore[arg-type]
                j += 1
            units.append((base, epochs[i], times[i], values, None))
            i = j
        buckets = {b // BUCKET for b, *_ in units}
        for bucket in buckets:
            for base, epoch, t, key, value in controls.get(bucket, []):
                units.append((base, epoch, t, [value], [key]))
        units.sort(key=lambda u: u[0])
        out: list[tuple[str, int, int, int]] = []
        fh = None
        cur: list[Any] = []
        cur_bucket = None
        for base, epoch, t, values, keys in units:
            blob = build_batch(values, base_offset=base, leader_epoch=epoch, timestamp_ms=t, keys=keys,
                               control=keys is not None)
            last = base + len(values) - 1
            if fh is None or cur_bucket != base // BUCKET or cur[3] + len(blob) > segment_bytes:
                if fh is not None:
                    fh.close()
                    out.append(tuple(cur))  # type: ignore[arg-type]
                name = segment_name(base)
                fh = open(os.path.join(out_dir, PARTITION_DIR, name), "wb")
                cur = [name, base, last, 0]
                cur_bucket = base // BUCKET
            fh.write(blob)
            cur[2] = last
            cur[3] += len(blob)
        if fh is not None:
            fh.close()
            out.append(tuple(cur))  # type: ignore[arg-type]
        yield pa.RecordBatch.from_pylist([dict(zip(_RESULT.names, r)) for r in out], schema=_RESULT)

    return run


def _write_checkpoint(path: Path, rows: list[dict[str, Any]], epoch: int, time_ms: int) -> None:
    """A snapshot-format file: header control batch, data batches, footer control batch."""
    table = pa.Table.from_pylist(rows)
    recs = records_from_payload_columns(table)
    positions = [r["position_in_snapshot"] for r in rows]
    bases = [r["batch_base_offset"] for r in rows]
    hk, hv = _encode_control(control_record("SNAPSHOT_HEADER", {"version": 0, "last_contained_log_timestamp": time_ms}))
    parts = [build_batch([hv], base_offset=0, leader_epoch=epoch, timestamp_ms=time_ms, keys=[hk], control=True)]
    order = sorted(range(len(rows)), key=lambda k: positions[k])
    i = 0
    while i < len(order):
        base = bases[order[i]]
        vals = []
        while i < len(order) and bases[order[i]] == base:
            vals.append(encode_record_value(recs[order[i]]))  # type: ignore[arg-type]
            i += 1
        parts.append(build_batch(vals, base_offset=base, leader_epoch=epoch, timestamp_ms=time_ms))
    fk, fv = _encode_control(control_record("SNAPSHOT_FOOTER", {"version": 0}))
    parts.append(build_batch([fv], base_offset=len(rows) + 1, leader_epoch=epoch, timestamp_ms=time_ms, keys=[fk],
                             control=True))
    path.write_bytes(b"".join(parts))


def write_segments(spark: SparkSession, plan: Plan, log: DataFrame, snapshots: DataFrame, out_dir: str) -> list[str]:
    """Write the log, its snapshots and the bootstrap checkpoint as real files; returns the file names.

    ``snapshots`` are the plan's ``snapshot_records`` rows (their batch layout is kept as written).
    """
    root = Path(out_dir)
    (root / PARTITION_DIR).mkdir(parents=True, exist_ok=True)
    sc = plan.scenario
    (root / "meta.properties").write_text(
        f"cluster.id={sc.cluster_id}\nnode.id={sc.controller_ids[0]}\nversion=1\n")
    controls: dict[int, list[tuple[int, int, int, bytes, bytes]]] = {}
    for b in plan.batches:
        if b.control is not None:
            key, value = _encode_control(control_record(*b.control))
            controls.setdefault(b.base_offset // BUCKET, []).append((b.base_offset, b.epoch, b.time_ms, key, value))
    cols = ["offset", "batch_base_offset", "batch_leader_epoch", "api_key", "record_version",
            *[f.name for f in PAYLOAD_FIELDS]]
    n_buckets = max(1, plan.total_records // BUCKET + 1)
    rows = (log.select(*cols, F.unix_millis("append_time").alias("time_ms"))
            .withColumn("_bucket", F.floor(F.col("batch_base_offset") / BUCKET))
            .repartition(n_buckets, "_bucket").drop("_bucket"))
    written = rows.mapInArrow(_segment_writer(str(root.resolve()), sc.log.segment_bytes, controls),
                              "file string, first_offset long, last_offset long, size_bytes long").collect()
    names = sorted(r["file"] for r in written)
    # snapshots and bootstrap checkpoint (small: encoded on the driver)
    snap_cols = ["snapshot_end_offset", "snapshot_epoch", "snapshot_kind", "position_in_snapshot", "batch_base_offset",
                 "api_key", "record_version", *[f.name for f in PAYLOAD_FIELDS]]
    snap_rows = snapshots.select(*snap_cols, F.unix_millis("append_time").alias("time_ms")).toArrow().to_pylist()
    groups: dict[tuple[int, int, str], list[dict[str, Any]]] = {}
    for r in snap_rows:
        groups.setdefault((r["snapshot_end_offset"], r["snapshot_epoch"], r["snapshot_kind"]), []).append(r)
    for (end, epoch, kind), rows_ in sorted(groups.items()):
        time_ms = rows_[0]["time_ms"]
        if kind == "bootstrap":
            path = root / "bootstrap.checkpoint"
        else:
            path = root / PARTITION_DIR / snapshot_name(end, epoch)
        _write_checkpoint(path, rows_, epoch, time_ms)
        names.append(path.name)
    return names
