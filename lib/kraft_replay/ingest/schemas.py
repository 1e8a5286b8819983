"""Arrow schemas of the five bronze tables (docs/design.md, "Bronze tables") and their offset buckets.

:data:`LOG_SCHEMA`, :data:`CONTROL_SCHEMA`, :data:`SNAPSHOT_SCHEMA`, :data:`QUARANTINE_SCHEMA` and
:data:`FILES_SCHEMA` are the column contracts of ``metadata_log``, ``metadata_control``,
``snapshot_records``, ``ingest_quarantine`` and ``ingest_files``. The record columns come from the
codec (:mod:`kraft_replay.codec.decode`); the storage columns (cluster id, file name, offset bucket,
snapshot id, ingest time) are added here.
"""

from __future__ import annotations

import functools

import pyarrow as pa

from kraft_replay.codec.arrow_payload import CONTROL_FIELDS, PAYLOAD_FIELDS
from kraft_replay.codec.decode import TIMESTAMP

__all__ = [
    "LOG_SCHEMA",
    "CONTROL_SCHEMA",
    "SNAPSHOT_SCHEMA",
    "QUARANTINE_SCHEMA",
    "FILES_SCHEMA",
    "BRONZE_SCHEMAS",
    "OFFSET_BUCKET_SIZE",
    "TIMESTAMP",
    "empty_batch",
]

#: ``metadata_log.offset_bucket`` = offset div this (a partition column: replay scans prune on it).
OFFSET_BUCKET_SIZE = 1_000_000

LOG_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("offset", pa.int64()),
    pa.field("offset_bucket", pa.int64()),
    pa.field("batch_base_offset", pa.int64()),
    pa.field("batch_last_offset", pa.int64()),
    pa.field("batch_leader_epoch", pa.int32()),
    pa.field("append_time", TIMESTAMP),
    pa.field("record_type", pa.string()),
    pa.field("api_key", pa.int32()),
    pa.field("record_version", pa.int32()),
    *PAYLOAD_FIELDS,
    pa.field("payload_json", pa.string()),
    pa.field("source_file", pa.string()),
    pa.field("source_position", pa.int64()),
])

CONTROL_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("offset", pa.int64()),
    pa.field("batch_base_offset", pa.int64()),
    pa.field("batch_last_offset", pa.int64()),
    pa.field("batch_leader_epoch", pa.int32()),
    pa.field("append_time", TIMESTAMP),
    pa.field("control_type", pa.string()),
    pa.field("control_type_id", pa.int32()),
    pa.field("key_version", pa.int32()),
    *CONTROL_FIELDS,
    pa.field("payload_json", pa.string()),
    pa.field("source_kind", pa.string()),
    pa.field("snapshot_end_offset", pa.int64()),
    pa.field("snapshot_epoch", pa.int32()),
    pa.field("source_file", pa.string()),
    pa.field("source_position", pa.int64()),
])

SNAPSHOT_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("snapshot_end_offset", pa.int64()),
    pa.field("snapshot_epoch", pa.int32()),
    pa.field("snapshot_kind", pa.string()),
    pa.field("position_in_snapshot", pa.int64()),
    pa.field("batch_base_offset", pa.int64()),
    pa.field("append_time", TIMESTAMP),
    pa.field("record_type", pa.string()),
    pa.field("api_key", pa.int32()),
    pa.field("record_version", pa.int32()),
    *PAYLOAD_FIELDS,
    pa.field("payload_json", pa.string()),
    pa.field("source_file", pa.string()),
    pa.field("source_position", pa.int64()),
])

QUARANTINE_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("source_file", pa.string()),
    pa.field("source_position", pa.int64()),
    pa.field("length", pa.int64()),
    pa.field("offset", pa.int64()),
    pa.field("records", pa.int64()),    # declared records the range stands for (null: not known)
    pa.field("reason_code", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("raw", pa.binary()),
    pa.field("ingested_at", TIMESTAMP),
])

FILES_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("source_file", pa.string()),
    pa.field("source_path", pa.string()),
    pa.field("file_kind", pa.string()),
    pa.field("size_bytes", pa.int64()),
    pa.field("sha256", pa.string()),
    pa.field("first_offset", pa.int64()),
    pa.field("last_offset", pa.int64()),
    pa.field("batches", pa.int64()),
    pa.field("records", pa.int64()),
    pa.field("quarantined", pa.int64()),
    pa.field("ingested_at", TIMESTAMP),
    pa.field("run_id", pa.string()),
])

BRONZE_SCHEMAS: dict[str, pa.Schema] = {
    "metadata_log": LOG_SCHEMA,
    "metadata_control": CONTROL_SCHEMA,
    "snapshot_records": SNAPSHOT_SCHEMA,
    "ingest_quarantine": QUARANTINE_SCHEMA,
    "ingest_files": FILES_SCHEMA,
}


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A zero-row batch of ``schema`` (one per schema, shared: record batches are immutable)."""
    return _empty(schema)


@functools.lru_cache(maxsize=64)
def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
