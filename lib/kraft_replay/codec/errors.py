"""Quarantine reason codes: why a byte range or a record could not be decoded.

Every failure the decoder reports (a :class:`kraft_replay.codec.batch.Corruption` from
``iter_batches``, a row of :func:`kraft_replay.codec.decode.decode_records`'s quarantine, a text
problem of the dump-log reader) carries one of these codes. The same table is in docs/design.md
(``ingest_quarantine``).
"""

from __future__ import annotations

__all__ = ["REASON_CODES"]

#: code -> what it means. Batch-level codes cover the batch's whole on-disk range; record-level codes
#: (``UNKNOWN_RECORD_TYPE`` … ``UNKNOWN_CONTROL_TYPE``, and ``OFFSET_OUT_OF_RANGE`` /
#: ``BAD_RECORD_FRAMING`` for one record) are merged into one row per batch and code.
REASON_CODES: dict[str, str] = {
    "CRC_MISMATCH": "the batch's stored CRC-32C differs from the CRC of its bytes [21, end) (facts §1.2)",
    "TRUNCATED_BATCH": "the data ends inside a batch, or fewer than 18 bytes remain (facts §1.6); the rest of the data",
    "BAD_MAGIC": "magic byte other than 2: a legacy record batch format KRaft never writes",
    "CORRUPT_BATCH_LENGTH": "a batchLength below a header, or implausible and past the end; the rest of the data",
    "BAD_RECORD_COUNT": "recordsCount negative, or more records than a KRaft batch (at most 8 MiB, facts §1.7) can hold",
    "OFFSET_OUT_OF_RANGE": "a base, last or record offset outside [0, 2^63 - 2^31)",
    "TIMESTAMP_OUT_OF_RANGE": "maxTimestamp outside the range of a Delta timestamp (years 0001-9999)",
    "DECOMPRESSION_ERROR": "the records section does not decompress, or decompresses past the cap (16 MiB: twice KRaft's largest batch)",
    "BAD_RECORD_FRAMING": "the records section does not follow facts §1.4, or a data record has a key, headers or no value",
    "TRAILING_BYTES": "bytes left after the declared records, a record value's body or a control key",
    "UNKNOWN_RECORD_TYPE": "a data record's api key is not a metadata record type",
    "UNSUPPORTED_RECORD_VERSION": "a record version outside the type's valid versions",
    "BAD_FRAME_VERSION": "a record value's frame version is not 1",
    "RECORD_DECODE_ERROR": "a record value or control value whose body does not decode",
    "UNKNOWN_CONTROL_TYPE": "a control record type that is not valid in the metadata log (transaction markers, unknown ids)",
    "TEXT_PARSE_ERROR": "dump-log text that cannot be read",
}
