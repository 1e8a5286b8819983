"""Bytes of a KRaft file -> rows of the bronze tables, as Arrow (used by ingest inside ``mapInArrow``).

:func:`decode_to_arrow` is :func:`kraft_replay.codec.decode.decode_records` (records, control
records and quarantined ranges of a byte range, never raising) plus the storage columns of the
bronze tables (:mod:`kraft_replay.ingest.schemas`):

* a data record of a segment becomes a ``metadata_log`` row (``offset_bucket`` = offset div
  :data:`OFFSET_BUCKET_SIZE`); of a snapshot or bootstrap file a ``snapshot_records`` row
  (``position_in_snapshot`` = its in-file offset, ``snapshot_end_offset``/``snapshot_epoch`` of the
  file, ``snapshot_kind``);
* a control record becomes a ``metadata_control`` row (``source_kind`` log / snapshot / bootstrap);
* a quarantined range becomes a quarantine row with its bytes (:data:`DECODED_QUARANTINE_SCHEMA`),
  written as an ``ingest_quarantine`` row and an ``ingest_quarantine_raw`` row
  (:func:`split_quarantine`);
* every row carries ``cluster_id`` and ``source_file``; quarantine rows ``ingested_at``.

:func:`redact_chunk` is the one redaction step of every path into bronze (segments, snapshots,
``bootstrap.checkpoint`` and dump-log text, batch or ``--follow``): the record batches of a chunk with
their credential material fingerprinted (:func:`kraft_replay.codec.secrets.redact_records`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from kraft_replay.codec.decode import ChunkStats, DecodedRecords, decode_records
from kraft_replay.codec.files import FileKind
from kraft_replay.codec.secrets import redact_records
from kraft_replay.ingest.schemas import (
    CONTROL_SCHEMA,
    DECODED_QUARANTINE_SCHEMA,
    LOG_SCHEMA,
    OFFSET_BUCKET_SIZE,
    QUARANTINE_RAW_SCHEMA,
    QUARANTINE_SCHEMA,
    SNAPSHOT_SCHEMA,
    TIMESTAMP,
    empty_batch,
)

__all__ = ["ChunkStats", "DecodedChunk", "decode_to_arrow", "bronze_batches", "redact_chunk", "split_quarantine"]


@dataclass(slots=True)
class DecodedChunk:
    """The bronze record batches decoded from one byte range, plus its :class:`ChunkStats`
    (``quarantine``: :data:`DECODED_QUARANTINE_SCHEMA`, the bytes not yet split off)."""

    log: pa.RecordBatch
    control: pa.RecordBatch
    snapshot: pa.RecordBatch
    quarantine: pa.RecordBatch
    stats: ChunkStats = field(default_factory=ChunkStats)
    # bytes of the buffer decoded: ``len(buf)`` unless ``stop`` or ``at_eof=False`` ended the call early
    consumed: int = 0


def decode_to_arrow(
    buf: bytes,
    *,
    cluster_id: str,
    source_file: str,
    file_kind: str,
    base_position: int = 0,
    snapshot_end_offset: int | None = None,
    snapshot_epoch: int | None = None,
    ingested_at: datetime | None = None,
    stop: int | None = None,
    at_eof: bool = True,
    accelerate: bool = True,
    row_budget: int | None = None,
) -> DecodedChunk:
    """Decode a byte range of a KRaft file into the bronze Arrow batches.

    ``file_kind`` is ``segment``, ``snapshot`` or ``bootstrap``. Snapshot rows carry
    ``snapshot_end_offset``/``snapshot_epoch`` (bootstrap files default to 0/0). ``base_position`` is
    the file position of ``buf[0]``. ``stop``, ``at_eof``, ``accelerate`` and ``row_budget`` are those
    of :func:`kraft_replay.codec.decode.decode_records` (``consumed`` of the result says where decoding
    stopped; ``accelerate=False`` is the reference path). Never raises on malformed bytes: failures
    become quarantine rows.
    """
    kind = FileKind(file_kind)
    if kind not in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP):
        raise ValueError(f"decode_to_arrow: file_kind must be segment, snapshot or bootstrap, got {file_kind!r}")
    records = decode_records(buf, base_position=base_position, stop=stop, at_eof=at_eof, accelerate=accelerate,
                             row_budget=row_budget)
    return bronze_batches(records, cluster_id=cluster_id, source_file=source_file, file_kind=kind,
                          snapshot_end_offset=snapshot_end_offset, snapshot_epoch=snapshot_epoch,
                          ingested_at=ingested_at)


def bronze_batches(records: DecodedRecords, *, cluster_id: str, source_file: str, file_kind: FileKind,
                   snapshot_end_offset: int | None = None, snapshot_epoch: int | None = None,
                   ingested_at: datetime | None = None) -> DecodedChunk:
    """The bronze batches of decoded records of a file of ``file_kind`` (see the module docstring)."""
    is_log = file_kind is FileKind.SEGMENT
    if file_kind is FileKind.BOOTSTRAP:
        snapshot_end_offset = 0 if snapshot_end_offset is None else snapshot_end_offset
        snapshot_epoch = 0 if snapshot_epoch is None else snapshot_epoch
    if is_log:
        snapshot_end_offset = snapshot_epoch = None
    if ingested_at is None:
        ingested_at = datetime.now(timezone.utc)
    data, ctrl, q = records.data, records.control, records.quarantine
    n = data.num_rows
    common = {"cluster_id": _const(cluster_id, n, pa.string()), "source_file": _const(source_file, n, pa.string())}
    if is_log:
        offs = data.column("offset")
        bucket = pa.array(offs.to_numpy() // OFFSET_BUCKET_SIZE, pa.int64())
        log = _select(LOG_SCHEMA, data, {**common, "offset_bucket": bucket})
        snap = empty_batch(SNAPSHOT_SCHEMA)
    else:
        snap = _select(SNAPSHOT_SCHEMA, data, {
            **common,
            "snapshot_end_offset": _const(snapshot_end_offset, n, pa.int64()),
            "snapshot_epoch": _const(snapshot_epoch, n, pa.int32()),
            "snapshot_kind": _const(file_kind.value, n, pa.string()),
            "position_in_snapshot": data.column("offset"),
        })
        log = empty_batch(LOG_SCHEMA)
    m = ctrl.num_rows
    control = _select(CONTROL_SCHEMA, ctrl, {
        "cluster_id": _const(cluster_id, m, pa.string()),
        "source_file": _const(source_file, m, pa.string()),
        "source_kind": _const("log" if is_log else file_kind.value, m, pa.string()),
        "snapshot_end_offset": _const(snapshot_end_offset, m, pa.int64()),
        "snapshot_epoch": _const(snapshot_epoch, m, pa.int32()),
    })
    k = q.num_rows
    quarantine = _select(DECODED_QUARANTINE_SCHEMA, q, {
        "cluster_id": _const(cluster_id, k, pa.string()),
        "source_file": _const(source_file, k, pa.string()),
        "ingested_at": _const(ingested_at, k, TIMESTAMP),
    })
    return DecodedChunk(log, control, snap, quarantine, records.stats, records.consumed)


def redact_chunk(chunk: DecodedChunk, key: bytes | None) -> DecodedChunk:
    """Kafka-kraft-facts §12: ``chunk`` with the SCRAM key material and sensitive config values of its
    ``metadata_log`` and ``snapshot_records`` rows replaced by fingerprints under ``key`` (the lake
    key); ``key`` None (``--keep-secrets``) keeps them as decoded."""
    if key is None:
        return chunk
    return dataclasses.replace(chunk, log=redact_records(chunk.log, key), snapshot=redact_records(chunk.snapshot, key))


def split_quarantine(decoded: pa.RecordBatch) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """Docs/design.md "Secrets": decoded quarantine rows as their ``ingest_quarantine`` rows (no bytes)
    and their ``ingest_quarantine_raw`` rows (the bytes of each row that has any, under
    :data:`~kraft_replay.ingest.schemas.QUARANTINE_KEY`)."""
    if not decoded.num_rows:
        return empty_batch(QUARANTINE_SCHEMA), empty_batch(QUARANTINE_RAW_SCHEMA)
    rows = _select(QUARANTINE_SCHEMA, decoded, {})
    raw = _select(QUARANTINE_RAW_SCHEMA, decoded, {})
    if raw.column("raw").null_count:
        raw = raw.filter(raw.column("raw").is_valid())
    return rows, raw


def _const(value: Any, n: int, typ: pa.DataType) -> pa.Array:
    if value is None:
        return pa.nulls(n, typ)
    return pa.repeat(pa.scalar(value, typ), n)


def _select(schema: pa.Schema, batch: pa.RecordBatch, extra: dict[str, pa.Array]) -> pa.RecordBatch:
    """A batch of ``schema``: each column from ``extra`` if named there, else ``batch``'s column of that name."""
    cols = [extra[f.name] if f.name in extra else batch.column(f.name) for f in schema]
    return pa.RecordBatch.from_arrays(cols, schema=schema)
