"""Arrow schemas of the six bronze tables (docs/design.md, "Bronze tables") and their offset buckets.

:data:`LOG_SCHEMA`, :data:`CONTROL_SCHEMA`, :data:`SNAPSHOT_SCHEMA`, :data:`QUARANTINE_SCHEMA`,
:data:`QUARANTINE_RAW_SCHEMA` and :data:`FILES_SCHEMA` are the column contracts of ``metadata_log``,
``metadata_control``, ``snapshot_records``, ``ingest_quarantine``, ``ingest_quarantine_raw`` and
``ingest_files``. The record columns come from the codec (:mod:`kraft_replay.codec.decode`); the
storage columns (cluster id, file name, offset bucket, snapshot id, ingest time) are added here.

A quarantined range is decoded as one row of :data:`DECODED_QUARANTINE_SCHEMA` (its bytes in ``raw``)
and written as two (docs/design.md, "Secrets"): its ``ingest_quarantine`` row, without the bytes, and
its ``ingest_quarantine_raw`` row, the bytes under :data:`QUARANTINE_KEY` — the bytes did not decode,
so no redaction reaches them, and they live in a table that is shown only when asked for.
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
    "QUARANTINE_RAW_SCHEMA",
    "QUARANTINE_KEY",
    "DECODED_QUARANTINE_SCHEMA",
    "FILES_SCHEMA",
    "BROKER_PROGRESS_SCHEMA",
    "QUORUM_REPLICATION_SCHEMA",
    "QUORUM_STATUS_SCHEMA",
    "METRICS_QUARANTINE_SCHEMA",
    "METRICS_TABLES",
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
    pa.field("ingested_at", TIMESTAMP),
])

#: What names one ``ingest_quarantine`` row: its range, its reason (one batch can give a row per reason
#: code) and its run (``ingested_at``: one value per ingest run). ``ingest_quarantine_raw`` rows join on it.
QUARANTINE_KEY = ("cluster_id", "source_file", "source_position", "reason_code", "ingested_at")

#: The bytes of each ``ingest_quarantine`` row that has any (replay's ``DIVERGENT_UNCOMMITTED`` rows have none).
QUARANTINE_RAW_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("source_file", pa.string()),
    pa.field("source_position", pa.int64()),
    pa.field("reason_code", pa.string()),
    pa.field("ingested_at", TIMESTAMP),
    pa.field("raw", pa.binary()),
])

#: A quarantine row as the decoders give it, before its bytes are split off
#: (:func:`kraft_replay.ingest.bronze.split_quarantine`).
DECODED_QUARANTINE_SCHEMA = pa.schema([*(f for f in QUARANTINE_SCHEMA if f.name != "ingested_at"),
                                       pa.field("raw", pa.binary()), QUARANTINE_SCHEMA.field("ingested_at")])

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

#: Samples of each broker's ``last-applied-record-offset`` / ``-timestamp`` (facts §9.1): the offset
#: of the newest image the broker published (-1: none yet) and that image's log time (null when -1).
BROKER_PROGRESS_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("broker_id", pa.int32()),
    pa.field("observed_at", TIMESTAMP),
    pa.field("applied_offset", pa.int64()),
    pa.field("applied_record_time", TIMESTAMP),
])

#: ``kafka-metadata-quorum describe --replication`` captures: each replica's fetch position in the
#: metadata log (not its applied image). Timestamps null where the tool printed -1.
QUORUM_REPLICATION_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("observed_at", TIMESTAMP),
    pa.field("node_id", pa.int32()),
    pa.field("directory_id", pa.string()),
    pa.field("log_end_offset", pa.int64()),
    pa.field("lag", pa.int64()),
    pa.field("last_fetch_time", TIMESTAMP),
    pa.field("last_caught_up_time", TIMESTAMP),
    pa.field("status", pa.string()),
    pa.field("source", pa.string()),
])

_REPLICA = pa.struct([
    pa.field("id", pa.int32()),
    pa.field("directory_id", pa.string()),          # Kafka 3.9 on (KIP-853)
    pa.field("endpoints", pa.list_(pa.string())),   # Kafka 3.9 on, voters: "CONTROLLER://host:port"
])

#: ``kafka-metadata-quorum describe --status`` captures: the quorum as the leader reported it. Null
#: where the tool printed -1 (unknown) or the capture lacks the line.
QUORUM_STATUS_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("observed_at", TIMESTAMP),
    pa.field("reported_cluster_id", pa.string()),    # ClusterId as printed
    pa.field("leader_id", pa.int32()),
    pa.field("leader_epoch", pa.int64()),
    pa.field("high_watermark", pa.int64()),          # the committed end: offsets below it are committed
    pa.field("max_follower_lag", pa.int64()),
    pa.field("max_follower_lag_time_ms", pa.int64()),
    pa.field("current_voters", pa.list_(_REPLICA)),
    pa.field("current_observers", pa.list_(_REPLICA)),
    pa.field("source", pa.string()),
])

#: Metric lines and samples not taken by ``ingest-metrics``, with the reason.
METRICS_QUARANTINE_SCHEMA = pa.schema([
    pa.field("cluster_id", pa.string()),
    pa.field("source", pa.string()),
    pa.field("line", pa.int64()),
    pa.field("reason_code", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("text", pa.string()),
    pa.field("ingested_at", TIMESTAMP),
])

#: The tables ``kraft-replay ingest-metrics`` writes, and the keys a re-ingested sample replaces.
METRICS_TABLES: dict[str, tuple[pa.Schema, list[str]]] = {
    "broker_progress": (BROKER_PROGRESS_SCHEMA, ["cluster_id", "broker_id", "observed_at"]),
    "quorum_replication": (QUORUM_REPLICATION_SCHEMA, ["cluster_id", "observed_at", "node_id"]),
    "quorum_status": (QUORUM_STATUS_SCHEMA, ["cluster_id", "observed_at"]),
    "metrics_quarantine": (METRICS_QUARANTINE_SCHEMA, ["cluster_id", "source", "line", "reason_code"]),
}

BRONZE_SCHEMAS: dict[str, pa.Schema] = {
    "metadata_log": LOG_SCHEMA,
    "metadata_control": CONTROL_SCHEMA,
    "snapshot_records": SNAPSHOT_SCHEMA,
    "ingest_quarantine": QUARANTINE_SCHEMA,
    "ingest_quarantine_raw": QUARANTINE_RAW_SCHEMA,
    "ingest_files": FILES_SCHEMA,
}


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A zero-row batch of ``schema`` (one per schema, shared: record batches are immutable)."""
    return _empty(schema)


@functools.lru_cache(maxsize=64)
def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
