"""``--segments-out``: the generated log as real KRaft files, encoded by the codec.

Layout written under the output directory (facts §0, §4)::

    meta.properties                         cluster.id, node.id, version
    bootstrap.checkpoint                    the bootstrap records (snapshot format)
    __cluster_metadata-0/<base:020d>.log    segments, rolled at ``log.segment_bytes``
    __cluster_metadata-0/<end:020d>-<epoch:010d>.checkpoint   one per planned snapshot

Segments are encoded on the workers with ``mapInArrow``, one task per million-offset bucket of the
batches' base offsets (so no batch is split between tasks). Each task streams its rows in Arrow
batches of ``ENCODE_ROWS`` rows, frames every record with ``encode_record_value`` (the codec's
records, never the whole bucket as dicts at once), keeps only the narrow ``(offset, base offset,
epoch, time, value bytes)`` rows, sorts those by offset, builds each batch as KRaft does (CreateTime,
no producer, timestamp = append time, leader epoch = Raft epoch; byte for byte ``build_batch``),
interleaves the log's control batches (LEADER_CHANGE) at their offsets and writes files, starting a
new file at each bucket and whenever a file reaches the size limit.

Where the rows come from: ``metadata_log`` is partitioned on disk by ``offset_bucket`` (offset div
1,000,000, by RECORD offset), so when ``log`` is a plain scan of Hive-partitioned Parquet files whose
row count matches the DataFrame's, each task reads its bucket's files itself with pyarrow, only the
columns it needs: no shuffle, and the JVM never converts the ~23 nested payload columns to Arrow.
A batch whose records straddle a bucket boundary has its first records in bucket ``b`` and the rest
in ``b + 1``; the task of ``b`` also takes the rows of ``b + 1``'s files whose batch starts below
``(b + 1) * 1,000,000``. Any other ``log`` goes through Spark: the records are encoded to the narrow
rows on a narrow dependency, and only those narrow rows are shuffled by bucket. Every task reports
how many rows it wrote; a total that differs from the log's row count is an error.

Snapshot files are small and are encoded on the driver from ``snapshot_records``: a SnapshotHeader
control batch at position 0, data batches from position 1, a SnapshotFooter control batch last,
every batch stamped with the snapshot's epoch.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kraft_replay.codec.arrow_payload import PAYLOAD_FIELDS, records_from_payload_columns
from kraft_replay.codec.batch import build_batch
from kraft_replay.codec.control import ControlRecord, encode_control_record
from kraft_replay.codec.crc import crc32c
from kraft_replay.codec.files import segment_name, snapshot_name
from kraft_replay.codec.records import encode_record_value
from kraft_replay.codec.varint import write_varint
from kraft_replay.generate.log import control_record
from kraft_replay.generate.plan import Plan
from kraft_replay.spark import session_conf

PARTITION_DIR = "__cluster_metadata-0"
BUCKET = 1_000_000
#: Rows per Arrow batch turned into records at once (bounds a task's Python objects).
ENCODE_ROWS = 32_768
_RESULT = pa.schema([("file", pa.string()), ("first_offset", pa.int64()), ("last_offset", pa.int64()),
                     ("size_bytes", pa.int64()), ("records", pa.int64())])
_RESULT_DDL = "file string, first_offset long, last_offset long, size_bytes long, records long"
#: The narrow rows between encoding a record and framing its batch.
_NARROW = pa.schema([("offset", pa.int64()), ("batch_base_offset", pa.int64()), ("batch_leader_epoch", pa.int32()),
                     ("time_ms", pa.int64()), ("value", pa.binary())])
_NARROW_DDL = "offset long, batch_base_offset long, batch_leader_epoch int, time_ms long, value binary"
_SCALAR_COLS = ["offset", "batch_base_offset", "batch_leader_epoch", "api_key", "record_version"]
_PAYLOAD_COLS = [f.name for f in PAYLOAD_FIELDS]

# ---- batch framing (byte for byte ``build_batch`` for a data batch) --------------------------

_HEAD = struct.Struct(">qiib")           # baseOffset, batchLength, partitionLeaderEpoch, magic
_CRC = struct.Struct(">I")
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_BATCH_OVERHEAD = 49                     # batchLength of a batch with an empty records section
_VARINT = [write_varint(i) for i in range(1 << 14)]


def _varint(n: int) -> bytes:
    return _VARINT[n] if n < 16384 else write_varint(n)


def frame_data_batch(values: list[bytes], base_offset: int, leader_epoch: int, timestamp_ms: int) -> bytes:
    """``build_batch(values, base_offset=..., leader_epoch=..., timestamp_ms=...)`` without the
    intermediate ``Record``/``RecordBatch`` objects: uncompressed, null keys, no headers,
    timestamp delta 0, offset delta = index, CreateTime, no producer."""
    if not values:
        raise ValueError("a batch needs at least one record")
    parts: list[bytes] = []
    append = parts.append
    for i, v in enumerate(values):
        vi = _varint(i)
        vl = _varint(len(v))
        append(_varint(4 + len(vi) + len(vl) + len(v)))   # attributes, ts delta, key, headers: 1 byte each
        append(b"\x00\x00")
        append(vi)
        append(b"\x01")
        append(vl)
        append(v)
        append(b"\x00")
    section = b"".join(parts)
    after_crc = _AFTER_CRC.pack(0, len(values) - 1, timestamp_ms, timestamp_ms, -1, -1, -1, len(values)) + section
    return (_HEAD.pack(base_offset, _BATCH_OVERHEAD + len(section), leader_epoch, 2)
            + _CRC.pack(crc32c(after_crc)) + after_crc)


def _encode_control(rec: ControlRecord) -> tuple[bytes, bytes]:
    return encode_control_record(rec)


# ---- records -> narrow rows ------------------------------------------------------------------

def _time_ms(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Epoch milliseconds of a timestamp column (floor, as Spark's ``unix_millis``)."""
    if pa.types.is_integer(col.type):
        return pc.cast(col, pa.int64())
    unit = col.type.unit
    raw = pc.cast(col, pa.timestamp(unit, col.type.tz)).cast(pa.int64())
    factor = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[unit]
    if factor is None:
        return pc.multiply(raw, 1000)
    if factor == 1:
        return raw
    arr = raw.to_numpy(zero_copy_only=False) if not isinstance(raw, pa.ChunkedArray) else raw.combine_chunks().to_numpy(
        zero_copy_only=False)
    return pa.array(np.floor_divide(arr, factor), pa.int64())


def encode_narrow(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    """Wide log rows (scalar columns, payload columns, ``time_ms``) -> narrow rows with each record's
    framed value (``encode_record_value``), in the input's row order."""
    recs = records_from_payload_columns(batch)
    values = pa.array([encode_record_value(r) for r in recs], pa.binary())  # type: ignore[arg-type]
    return pa.RecordBatch.from_arrays(
        [_plain(batch.column("offset"), pa.int64()), _plain(batch.column("batch_base_offset"), pa.int64()),
         _plain(batch.column("batch_leader_epoch"), pa.int32()), _plain(batch.column("time_ms"), pa.int64()), values],
        schema=_NARROW)


def _plain(col: Any, typ: pa.DataType) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return col if col.type == typ else pc.cast(col, typ)


# ---- narrow rows of buckets -> segment files -------------------------------------------------

def _write_units(narrow: pa.Table, controls: dict[int, list[tuple[int, int, int, bytes, bytes]]], out_dir: str,
                 segment_bytes: int) -> list[tuple[str, int, int, int, int]]:
    """Frame and write ``narrow`` (rows of whole batches, any order) with its buckets' control batches."""
    if narrow.num_rows == 0:
        return []
    narrow = narrow.take(pc.sort_indices(narrow, [("offset", "ascending")]))
    bases = narrow.column("batch_base_offset").to_numpy()
    starts = np.concatenate([[0], np.flatnonzero(np.diff(bases)) + 1])
    ends = np.concatenate([starts[1:], [len(bases)]])
    # control batches of the buckets present, by base offset
    pending = sorted((c for bucket in np.unique(bases // BUCKET).tolist() for c in controls.get(bucket, [])),
                     key=lambda c: c[0])
    epochs = narrow.column("batch_leader_epoch").to_numpy()
    times = narrow.column("time_ms").to_numpy()
    values_col = narrow.column("value")
    out: list[tuple[str, int, int, int, int]] = []
    state: dict[str, Any] = {"fh": None, "cur": None, "bucket": None}

    def emit(blob: bytes, base: int, last: int, n: int) -> None:
        fh, cur = state["fh"], state["cur"]
        if fh is None or state["bucket"] != base // BUCKET or cur[3] + len(blob) > segment_bytes:
            if fh is not None:
                fh.close()
                out.append(tuple(cur))  # type: ignore[arg-type]
            name = segment_name(base)
            state["fh"] = fh = open(os.path.join(out_dir, PARTITION_DIR, name), "wb")
            state["cur"] = cur = [name, base, last, 0, 0]
            state["bucket"] = base // BUCKET
        fh.write(blob)
        cur[2] = last
        cur[3] += len(blob)
        cur[4] += n

    ci = 0
    chunk = 0
    try:
        while chunk < len(starts):
            # a slice of whole batches of about ENCODE_ROWS rows, as Python bytes
            stop = int(np.searchsorted(starts, starts[chunk] + ENCODE_ROWS, side="left"))
            stop = max(stop, chunk + 1)
            lo, hi = int(starts[chunk]), int(ends[stop - 1])
            vals = values_col.slice(lo, hi - lo).to_pylist()
            for u in range(chunk, stop):
                s, e = int(starts[u]), int(ends[u])
                base = int(bases[s])
                while ci < len(pending) and pending[ci][0] < base:
                    cb, cepoch, ct, key, value = pending[ci]
                    emit(build_batch([value], base_offset=cb, leader_epoch=cepoch, timestamp_ms=ct, keys=[key],
                                     control=True), cb, cb, 0)
                    ci += 1
                emit(frame_data_batch(vals[s - lo:e - lo], base, int(epochs[s]), int(times[s])), base,
                     base + (e - s) - 1, e - s)
            chunk = stop
        while ci < len(pending):
            cb, cepoch, ct, key, value = pending[ci]
            emit(build_batch([value], base_offset=cb, leader_epoch=cepoch, timestamp_ms=ct, keys=[key], control=True),
                 cb, cb, 0)
            ci += 1
    finally:
        if state["fh"] is not None:
            state["fh"].close()
    if state["cur"] is not None:
        out.append(tuple(state["cur"]))  # type: ignore[arg-type]
    return out


def _result(rows: list[tuple[str, int, int, int, int]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([dict(zip(_RESULT.names, r)) for r in rows], schema=_RESULT)


# ---- path 1: each task reads its bucket's Parquet files ----------------------------------------

def _read_bucket_rows(path: str, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
    """Rows of one Parquet file whose batch base offset is in ``[lo, hi)``, in ENCODE_ROWS batches."""
    pf = pq.ParquetFile(path)
    names = set(pf.schema_arrow.names)
    missing = [c for c in (*_SCALAR_COLS, "append_time") if c not in names]
    if missing:
        raise ValueError(f"metadata_log file {path} has no column(s) {missing}; rewrite the table with generate")
    cols = [*_SCALAR_COLS, *[c for c in _PAYLOAD_COLS if c in names], "append_time"]
    for b in pf.iter_batches(batch_size=ENCODE_ROWS, columns=cols):
        base = b.column("batch_base_offset")
        keep = pc.and_(pc.greater_equal(base, lo), pc.less(base, hi))
        if not pc.all(keep).as_py():
            b = b.filter(keep)
        if b.num_rows:
            yield b


def _wide_with_time(b: pa.RecordBatch) -> pa.RecordBatch:
    i = b.schema.get_field_index("append_time")
    return b.set_column(i, "time_ms", _time_ms(b.column(i)))


def _bucket_reader(buckets: list[int], files: dict[int, list[str]], out_dir: str, segment_bytes: int,
                   controls: dict[int, list[tuple[int, int, int, bytes, bytes]]]):
    """The ``mapInArrow`` function of path 1: input rows are indexes into ``buckets``."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column("id").to_pylist():
                bucket = buckets[index]
                lo, hi = bucket * BUCKET, (bucket + 1) * BUCKET
                parts: list[pa.RecordBatch] = []
                for f in files.get(bucket, []):          # the bucket's own rows (minus a straddler's tail)
                    parts.extend(encode_narrow(_wide_with_time(b)) for b in _read_bucket_rows(f, lo, hi))
                for f in files.get(bucket + 1, []):      # the tail of a batch straddling into the next bucket
                    first = pq.read_table(f, columns=["batch_base_offset"]).column("batch_base_offset")
                    if len(first) and pc.min(first).as_py() < hi:
                        parts.extend(encode_narrow(_wide_with_time(b)) for b in _read_bucket_rows(f, lo, hi))
                narrow = pa.Table.from_batches(parts, schema=_NARROW)
                yield _result(_write_units(narrow, controls, out_dir, segment_bytes))

    return run


_BUCKET_DIR = re.compile(r"(?:^|/)offset_bucket=(-?\d+)/")
_CLUSTER_DIR = re.compile(r"(?:^|/)cluster_id=([^/]*)/")


def bucket_files(log: DataFrame, cluster_id: str) -> dict[int, list[str]] | None:
    """Local Parquet files of ``log`` per ``offset_bucket`` when it is a plain scan of Hive-partitioned
    files of ``cluster_id`` with exactly its row count (no deletion vectors, no filters on rows);
    else None."""
    try:
        paths = log.inputFiles()
    except Exception:  # noqa: BLE001 - not a file scan: take the Spark path
        return None
    if not paths:
        return None
    out: dict[int, list[str]] = {}
    rows = 0
    for p in paths:
        u = urlparse(p)
        if u.scheme not in ("", "file"):
            return None
        local = unquote(u.path)
        b, c = _BUCKET_DIR.search(local), _CLUSTER_DIR.search(local)
        if b is None or c is None:
            return None
        if unquote(c.group(1)) != cluster_id:
            continue
        rows += pq.ParquetFile(local).metadata.num_rows
        out.setdefault(int(b.group(1)), []).append(local)
    if rows != log.count():
        return None
    return out


# ---- path 2: Spark reads, the narrow rows are shuffled --------------------------------------

def _narrow_encoder(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for b in batches:
        for off in range(0, b.num_rows, ENCODE_ROWS):
            part = b.slice(off, ENCODE_ROWS)
            if part.num_rows:
                yield encode_narrow(part)


def _narrow_writer(out_dir: str, segment_bytes: int, controls: dict[int, list[tuple[int, int, int, bytes, bytes]]]):
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [b for b in batches if b.num_rows]
        if parts:
            yield _result(_write_units(pa.Table.from_batches(parts, schema=_NARROW), controls, out_dir,
                                       segment_bytes))

    return run


#: Spark's mapInArrow input with ``maxBytesPerBatch`` below Int.MaxValue calls ``ArrowWriter.sizeInBytes``
#: after every row, which walks every vector (``setValueCount`` on each nested list/struct): with the
#: ~150 nested payload vectors that is quadratic in the batch's rows. Int.MaxValue turns the check off;
#: batches are then bounded by rows only.
_WIDE_ARROW_CONF = {"spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
                    "spark.sql.execution.arrow.maxRecordsPerBatch": str(ENCODE_ROWS)}




def _spark_narrow(log: DataFrame) -> DataFrame:
    cols = [*_SCALAR_COLS, *_PAYLOAD_COLS]
    return (log.select(*cols, F.unix_millis("append_time").alias("time_ms"))
            .mapInArrow(_narrow_encoder, _NARROW_DDL))



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

    ``log`` is the cluster's ``metadata_log`` rows; ``snapshots`` are the plan's ``snapshot_records``
    rows (their batch layout is kept as written).
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
    out = str(root.resolve())
    files = bucket_files(log, sc.cluster_id)
    if files is not None:
        expected = sum(pq.ParquetFile(f).metadata.num_rows for fs in files.values() for f in fs)
        buckets = sorted(files)
        tasks = spark.range(len(buckets), numPartitions=max(1, len(buckets)))  # one bucket per task
        written = tasks.mapInArrow(_bucket_reader(buckets, files, out, sc.log.segment_bytes, controls),
                                   _RESULT_DDL).collect()
    else:
        expected = log.count()
        n_buckets = max(1, plan.total_records // BUCKET + 1)
        narrow = _spark_narrow(log)
        rows = (narrow.withColumn("_bucket", F.floor(F.col("batch_base_offset") / BUCKET))
                .repartition(n_buckets, "_bucket").drop("_bucket"))
        with session_conf(spark, _WIDE_ARROW_CONF):
            written = rows.mapInArrow(_narrow_writer(out, sc.log.segment_bytes, controls), _RESULT_DDL).collect()
    got = sum(r["records"] for r in written)
    if got != expected:
        raise RuntimeError(f"--segments-out {out_dir}: wrote {got:,} of the {expected:,} metadata_log records; "
                           "the segment files there are incomplete, rerun generate")
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
