"""Record batch format v2 ("magic 2"): decode, encode, boundary scan (facts §1).

Rules implemented here:

* Batch header (§1.1): 61 big-endian bytes; a batch occupies ``12 + batchLength`` bytes.
* CRC (§1.2): CRC-32C over ``[21, 12 + batchLength)``; a mismatch quarantines the batch.
* Attributes (§1.3): codec bits 0-2, timestamp type bit 3, transactional bit 4, control bit 5,
  delete-horizon bit 6; the records section is decompressed with the real codec, bounded.
* Records (§1.4): zigzag varint length, attributes, timestamp delta, offset delta, key, value,
  headers; every record must consume exactly its declared length, and nothing may follow the
  declared number of records.
* Reading a segment (§1.6): stop when 17 or fewer bytes remain or when the declared batch runs past
  the end (Kafka's log recovery treats that tail as end of data); here the tail is reported as a
  :class:`Corruption` with ``TRUNCATED_BATCH`` so nothing is dropped silently. A batchLength below 14
  is ``CORRUPT_BATCH_LENGTH``.
* Values that the bronze tables could not hold faithfully are refused, never wrapped:
  recordsCount negative or above :data:`MAX_BATCH_RECORDS` (``BAD_RECORD_COUNT``; a KRaft batch is at
  most 8 MiB, §1.7, and a record takes at least 7 bytes, §1.4), a base or last offset outside
  ``[0, OFFSET_LIMIT)`` (``OFFSET_OUT_OF_RANGE``; the base offset is not covered by the CRC) and a
  maxTimestamp outside the years 0001-9999 of a Delta timestamp (``TIMESTAMP_OUT_OF_RANGE``).

:func:`frame_batches` is the one batch-framing routine (where the chain of batches goes, from the
17-byte heads only); :func:`iter_batches`, :func:`scan_batch_headers`, :func:`batch_cuts` and the
Arrow decoder build on it. :func:`iter_batches` yields :class:`RecordBatch` or :class:`Corruption`;
:func:`encode_batch` is its exact inverse for uncompressed batches (compressed ones re-encode to
equivalent, not identical, bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kraft_replay.codec.compression import DEFAULT_LIMIT, Compression, DecompressionError, compress, decompress
from kraft_replay.codec.crc import CRC_START, crc32c
from kraft_replay.codec.varint import VarintError, read_varint, read_varlong, write_varint, write_varlong

__all__ = [
    "Corruption",
    "Record",
    "RecordBatch",
    "BatchHeader",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "MAX_BATCH_RECORDS",
    "OFFSET_LIMIT",
    "MIN_TIMESTAMP_MS",
    "MAX_TIMESTAMP_MS",
    "batch_problem",
    "frame_batches",
    "unframed",
    "encode_batch",
    "build_batch",
    "iter_batches",
    "scan_batch_headers",
    "batch_cuts",
    "parse_records",
    "encode_records",
    "decode_batch",
]

LOG_OVERHEAD = 12          # baseOffset + batchLength
HEADER_UP_TO_MAGIC = 17    # baseOffset, batchLength, partitionLeaderEpoch, magic
HEADER_SIZE = 61
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a batch with no records section at all
# facts §1.6: a batchLength below 14 is reported as corrupt. Between 14 and 48 the header itself is
# incomplete, which is also reported as a corrupt length here.
KAFKA_MIN_BATCH_LENGTH = 14
# A declared batch larger than this that runs past the end of the data is called a corrupt length
# rather than a truncated tail (KRaft writes batches of at most 8 MiB).
MAX_PLAUSIBLE_BATCH = 64 * 1024 * 1024
# facts §1.7: KRaft writes batches of at most 8 MiB; a record takes at least 7 bytes (§1.4: length,
# attributes, timestampDelta, offsetDelta, keyLength, valueLength and headersCount, one byte each). A
# batch declaring more records than that cannot come from KRaft (and would let a small compressed batch
# stand for tens of millions of rows).
MAX_KRAFT_BATCH_BYTES = 8 * 1024 * 1024
MIN_RECORD_SIZE = 7
MAX_BATCH_RECORDS = (MAX_KRAFT_BATCH_BYTES - HEADER_SIZE) // MIN_RECORD_SIZE
# Offsets are non-negative int64; a base offset below this limit cannot overflow int64 when an int32
# offset delta is added to it.
OFFSET_LIMIT = (1 << 63) - (1 << 31)
# A Delta (and Spark) timestamp holds 0001-01-01T00:00:00 .. 9999-12-31T23:59:59.999999 UTC.
MIN_TIMESTAMP_MS = -62_135_596_800_000
MAX_TIMESTAMP_MS = 253_402_300_799_999

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

_HEAD = struct.Struct(">qiib")                 # offset 0..16
_REST = struct.Struct(">Ihiqqqhii")            # offset 17..60: crc, attributes .. recordsCount
_FULL = struct.Struct(">qiibIhiqqqhii")         # the whole 61-byte header
_LEN_ONLY = struct.Struct(">i")


@dataclass(slots=True)
class Record:
    """One record of a batch (facts §1.4). ``headers`` are ``(key, value)`` with ``value`` possibly None
    (a tuple: records without headers, nearly all, share the empty one)."""

    value: bytes | None
    offset_delta: int = 0
    timestamp_delta: int = 0
    key: bytes | None = None
    attributes: int = 0
    headers: Sequence[tuple[str, bytes | None]] = ()
    # byte position of the record's length varint inside the (uncompressed) records section
    position: int = 0


@dataclass(slots=True)
class RecordBatch:
    """A decoded v2 batch. ``position``/``size`` locate it in the buffer (plus ``base_position``)."""

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    records: list[Record]
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    magic: int = 2
    crc: int = 0
    position: int = 0
    size: int = 0

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0


@dataclass(slots=True)
class Corruption:
    """A byte range that could not be decoded: where, how long, why, and the raw bytes. ``records`` is
    the record count a framed v2 batch declares (None when negative, and for other ranges)."""

    position: int
    length: int
    reason_code: str
    reason: str
    offset: int | None
    raw: bytes
    records: int | None = None


@dataclass(slots=True, frozen=True)
class BatchHeader:
    """The first 17 bytes of a batch plus its place in the buffer (from :func:`scan_batch_headers`)."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length


class _Framing(ValueError):
    """Internal: a records section that does not follow §1.4."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def parse_records(data: bytes, count: int) -> list[Record]:
    """Parse ``count`` records from an uncompressed records section (facts §1.4).

    Raises ``_Framing`` (a ``ValueError`` with ``code``) when a record's length does not match what
    it holds, a length is negative where it must not be, the data ends early, or bytes are left over.
    """
    out: list[Record] = []
    end = len(data)
    pos = 0
    n = 0
    try:
        while n < count:
            if pos >= end:
                raise _Framing("BAD_RECORD_FRAMING", f"records section ends after {n} of {count} records")
            start = pos
            length, pos = read_varint(data, pos)
            if length < 0:
                raise _Framing("BAD_RECORD_FRAMING", f"record {n}: negative length {length}")
            body_start = pos
            body_end = pos + length
            if body_end > end:
                raise _Framing("BAD_RECORD_FRAMING", f"record {n}: length {length} runs past the records section")
            attributes = data[pos]
            pos += 1
            ts_delta, pos = read_varlong(data, pos)
            off_delta, pos = read_varint(data, pos)
            klen, pos = read_varint(data, pos)
            if klen < -1:
                raise _Framing("BAD_RECORD_FRAMING", f"record {n}: invalid key length {klen}")
            if klen >= 0:
                key = data[pos : pos + klen]
                pos += klen
            else:
                key = None
            vlen, pos = read_varint(data, pos)
            if vlen < -1:
                raise _Framing("BAD_RECORD_FRAMING", f"record {n}: invalid value length {vlen}")
            if vlen >= 0:
                value = data[pos : pos + vlen]
                pos += vlen
            else:
                value = None
            if pos > body_end:
                raise _Framing("BAD_RECORD_FRAMING", f"record {n}: key/value run past the record's length {length}")
            hcount, pos = read_varint(data, pos)
            if hcount < 0:
                raise _Framing("BAD_RECORD_FRAMING", f"record {n}: negative header count {hcount}")
            headers: Sequence[tuple[str, bytes | None]] = ()
            if hcount:
                headers = pairs = []
                for _ in range(hcount):
                    if pos >= body_end:
                        raise _Framing("BAD_RECORD_FRAMING", f"record {n}: headers run past the record's length")
                    hk, pos = read_varint(data, pos)
                    if hk < 0:
                        raise _Framing("BAD_RECORD_FRAMING", f"record {n}: negative header key length {hk}")
                    hkey = data[pos : pos + hk].decode("utf-8")
                    pos += hk
                    hv, pos = read_varint(data, pos)
                    if hv < -1:
                        raise _Framing("BAD_RECORD_FRAMING", f"record {n}: invalid header value length {hv}")
                    if hv >= 0:
                        hval: bytes | None = data[pos : pos + hv]
                        pos += hv
                    else:
                        hval = None
                    pairs.append((hkey, hval))
            if pos != body_end:
                raise _Framing(
                    "BAD_RECORD_FRAMING",
                    f"record {n}: declared length {length} but its fields take {pos - body_start} bytes",
                )
            out.append(Record(value, off_delta, ts_delta, key, attributes, headers, start))
            n += 1
    except (IndexError, VarintError, UnicodeDecodeError) as exc:
        raise _Framing("BAD_RECORD_FRAMING", f"record {n}: {exc or 'data ends inside the record'}") from None
    if pos != end:
        raise _Framing("TRAILING_BYTES", f"{end - pos} bytes left after the batch's {count} records")
    return out


def batch_problem(count: int, base_offset: int, last_offset_delta: int, max_timestamp: int) -> tuple[str, str] | None:
    """``(reason code, reason)`` when a CRC-valid batch header holds a value the decoder refuses (see
    the module docstring), else None."""
    if count < 0 or count > MAX_BATCH_RECORDS:
        return "BAD_RECORD_COUNT", (f"record count {count} is negative" if count < 0 else
                                    f"record count {count} exceeds the {MAX_BATCH_RECORDS} records an 8 MiB KRaft batch can hold")
    last = base_offset + last_offset_delta
    if not 0 <= base_offset < OFFSET_LIMIT or not 0 <= last < OFFSET_LIMIT:
        return "OFFSET_OUT_OF_RANGE", f"base offset {base_offset} / last offset {last} outside [0, 2^63 - 2^31)"
    if not MIN_TIMESTAMP_MS <= max_timestamp <= MAX_TIMESTAMP_MS:
        return "TIMESTAMP_OUT_OF_RANGE", f"maxTimestamp {max_timestamp} ms is outside the years 0001-9999 of a timestamp"
    return None


def _decode_one(buf: bytes, pos: int, size: int, base_position: int, limit: int) -> RecordBatch | Corruption:
    (base_offset, batch_length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid, pepoch, bseq, count) = _FULL.unpack_from(buf, pos)
    end = pos + size

    def bad(code: str, reason: str) -> Corruption:
        return Corruption(base_position + pos, size, code, reason, base_offset, bytes(buf[pos:end]),
                          count if count >= 0 else None)

    actual = crc32c(buf[pos + CRC_START : end])
    if actual != crc:
        return bad("CRC_MISMATCH", f"stored CRC-32C {crc:#010x} but the batch hashes to {actual:#010x}")
    if not (0 <= count <= MAX_BATCH_RECORDS and 0 <= base_offset < OFFSET_LIMIT
            and 0 <= base_offset + last_delta < OFFSET_LIMIT and MIN_TIMESTAMP_MS <= max_ts <= MAX_TIMESTAMP_MS):
        # the rule of batch_problem, checked in line (one batch at a time is the general decoder's hot loop)
        return bad(*batch_problem(count, base_offset, last_delta, max_ts))  # type: ignore[misc]
    section = buf[pos + HEADER_SIZE : end]
    codec = attributes & ATTR_COMPRESSION_MASK
    if codec:
        try:
            section = decompress(codec, section, limit)
        except DecompressionError as exc:
            return bad("DECOMPRESSION_ERROR", str(exc))
    try:
        records = parse_records(section, count)
    except _Framing as exc:
        return bad(exc.code, str(exc))
    return RecordBatch(base_offset, epoch, attributes, last_delta, base_ts, max_ts, records, pid, pepoch, bseq, magic, crc, base_position + pos, size)


def frame_batches(buf: bytes | memoryview, pos: int = 0, stop: int | None = None,
                  max_batches: int | None = None) -> tuple[list[int], int]:
    """Walk the chain of framed batches from ``pos`` reading only their heads (facts §1.6).

    A batch is framed when more than 17 bytes remain, its batchLength is at least 14 (at least 49,
    a whole header, for magic 2) and it ends inside ``buf``. Returns the sizes of the consecutive framed
    batches that start before ``stop`` (at most ``max_batches`` of them) and the position after them.
    When that position is before ``stop`` (or the end) and ``max_batches`` did not end the walk, the
    bytes from there on cannot be framed: :func:`unframed` says why.

    This loop is the decoder's hottest Python code (one iteration per batch, most batches of a
    metadata log are one ~80-byte record): it reads the length alone and the magic byte only for a
    length below a whole header."""
    sizes: list[int] = []
    add = sizes.append
    end = len(buf)
    limit = end if stop is None else min(stop, end)
    unpack = _LEN_ONLY.unpack_from
    # a batch takes at least 26 bytes, so this bounds the number of batches
    for _ in range(max_batches if max_batches is not None else (end - pos) // (LOG_OVERHEAD + KAFKA_MIN_BATCH_LENGTH) + 1):
        if pos >= limit or end - pos <= HEADER_UP_TO_MAGIC:
            break
        size = unpack(buf, pos + 8)[0] + LOG_OVERHEAD
        if size > end - pos or (size < HEADER_SIZE and (size < LOG_OVERHEAD + KAFKA_MIN_BATCH_LENGTH or buf[pos + 16] == 2)):
            break
        add(size)
        pos += size
    return sizes, pos


def unframed(buf: bytes, pos: int, base_position: int = 0) -> Corruption:
    """The bytes from ``pos`` to the end of ``buf``, where :func:`frame_batches` stopped, as one
    corruption: ``TRUNCATED_BATCH`` (a short tail, or a batch running past the end: log recovery stops
    there) or ``CORRUPT_BATCH_LENGTH`` (a length below a header, or implausible and past the end)."""
    remaining = len(buf) - pos
    raw = bytes(buf[pos:])
    if remaining <= HEADER_UP_TO_MAGIC:
        off = int.from_bytes(buf[pos : pos + 8], "big", signed=True) if remaining >= 8 else None
        return Corruption(base_position + pos, remaining, "TRUNCATED_BATCH",
                          f"{remaining} trailing bytes, too few for a batch header (log recovery stops here)", off, raw)
    base_offset, batch_length, _epoch, magic = _HEAD.unpack_from(buf, pos)
    if batch_length < KAFKA_MIN_BATCH_LENGTH or (magic == 2 and batch_length < MIN_BATCH_LENGTH):
        return Corruption(base_position + pos, remaining, "CORRUPT_BATCH_LENGTH",
                          f"batch length {batch_length} is smaller than a batch header; the rest of the data cannot be framed",
                          base_offset, raw)
    if batch_length > MAX_PLAUSIBLE_BATCH:
        return Corruption(base_position + pos, remaining, "CORRUPT_BATCH_LENGTH",
                          f"batch length {batch_length} is implausible and runs past the end of the data", base_offset, raw)
    return Corruption(base_position + pos, remaining, "TRUNCATED_BATCH",
                      f"batch declares {LOG_OVERHEAD + batch_length} bytes but only {remaining} remain (log recovery stops here)",
                      base_offset, raw)


def decode_batch(buf: bytes, pos: int, size: int, base_position: int = 0, *,
                 decompress_limit: int = DEFAULT_LIMIT) -> RecordBatch | Corruption:
    """The framed batch ``buf[pos : pos + size]`` (from :func:`frame_batches`) decoded, or why not."""
    if buf[pos + 16] != 2:
        base_offset = int.from_bytes(buf[pos : pos + 8], "big", signed=True)
        return Corruption(base_position + pos, size, "BAD_MAGIC",
                          f"magic byte {buf[pos + 16]}: only record batch format v2 is supported", base_offset,
                          bytes(buf[pos : pos + size]))
    return _decode_one(buf, pos, size, base_position, decompress_limit)


def iter_batches(
    buf: bytes, base_position: int = 0, *, decompress_limit: int = DEFAULT_LIMIT
) -> Iterator[RecordBatch | Corruption]:
    """Yield every batch of ``buf`` in order, or a :class:`Corruption` for each range that fails.

    Positions are reported as ``base_position + index in buf`` (so a byte range of a file reports
    file positions). A corrupt batch whose length is plausible is skipped and reading continues with
    the next batch; a truncated tail or an impossible length ends the scan, and the remaining bytes
    are reported as one corruption (facts §1.6). Never raises on malformed input.
    """
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    end = len(buf)
    pos = 0
    while pos < end:
        sizes, _ = frame_batches(buf, pos, max_batches=4096)
        for size in sizes:
            if buf[pos + 16] == 2:
                yield _decode_one(buf, pos, size, base_position, decompress_limit)
            else:
                yield decode_batch(buf, pos, size, base_position)    # BAD_MAGIC
            pos += size
        if not sizes and pos < end:
            yield unframed(buf, pos, base_position)
            return


def scan_batch_headers(buf: bytes | memoryview, base_position: int = 0) -> tuple[list[BatchHeader], int]:
    """Walk the batch boundaries of ``buf`` reading only each 17-byte header (no CRC, no records).

    Returns ``(headers, consumed)``: the framed batches (:func:`frame_batches`) and the number of bytes
    they cover; any bytes after ``consumed`` are a truncated or corrupt tail (facts §1.6).
    """
    sizes, consumed = frame_batches(buf)
    out: list[BatchHeader] = []
    pos = 0
    for size in sizes:
        base_offset, batch_length, epoch, magic = _HEAD.unpack_from(buf, pos)
        out.append(BatchHeader(base_position + pos, base_offset, batch_length, epoch, magic))
        pos += size
    return out, consumed


def encode_records(records: Sequence[Record]) -> bytes:
    """Serialise records into an uncompressed records section (inverse of :func:`parse_records`)."""
    parts: list[bytes] = []
    for r in records:
        body = [bytes((r.attributes & 0xFF,)), write_varlong(r.timestamp_delta), write_varint(r.offset_delta)]
        if r.key is None:
            body.append(b"\x01")
        else:
            body.append(write_varint(len(r.key)))
            body.append(bytes(r.key))
        if r.value is None:
            body.append(b"\x01")
        else:
            body.append(write_varint(len(r.value)))
            body.append(bytes(r.value))
        body.append(write_varint(len(r.headers)))
        for hk, hv in r.headers:
            kb = hk.encode("utf-8")
            body.append(write_varint(len(kb)))
            body.append(kb)
            if hv is None:
                body.append(b"\x01")
            else:
                body.append(write_varint(len(hv)))
                body.append(bytes(hv))
        blob = b"".join(body)
        parts.append(write_varint(len(blob)))
        parts.append(blob)
    return b"".join(parts)


def encode_batch(batch: RecordBatch) -> bytes:
    """Serialise a :class:`RecordBatch` (inverse of :func:`iter_batches`); the CRC is recomputed.

    An uncompressed batch decoded from bytes re-encodes to exactly those bytes. A compressed one is
    re-compressed with this project's codec settings.
    """
    section = encode_records(batch.records)
    codec = batch.attributes & ATTR_COMPRESSION_MASK
    if codec:
        section = compress(codec, section)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(section)
    after_crc = _REST.pack(
        0, batch.attributes, batch.last_offset_delta, batch.base_timestamp, batch.max_timestamp,
        batch.producer_id, batch.producer_epoch, batch.base_sequence, len(batch.records),
    )[4:] + section
    crc = crc32c(after_crc)
    head = _HEAD.pack(batch.base_offset, batch_length, batch.partition_leader_epoch, batch.magic)
    return head + struct.pack(">I", crc) + after_crc


def build_batch(
    values: Sequence[bytes],
    *,
    base_offset: int,
    leader_epoch: int,
    timestamp_ms: int,
    compression: int = Compression.NONE,
    keys: Sequence[bytes | None] | None = None,
    control: bool = False,
) -> bytes:
    """Encode a batch the way KRaft writes one (facts §1.7): CreateTime, no producer, one record per
    value with offset delta = index, timestamp delta 0, null key (or ``keys`` for control batches), no
    headers, base and max timestamp both ``timestamp_ms``.
    """
    if not values:
        raise ValueError("a batch needs at least one record")
    if keys is not None and len(keys) != len(values):
        raise ValueError("keys and values must have the same length")
    records = [Record(v, i, 0, keys[i] if keys is not None else None) for i, v in enumerate(values)]
    attributes = (int(compression) & ATTR_COMPRESSION_MASK) | (ATTR_CONTROL if control else 0)
    batch = RecordBatch(base_offset, leader_epoch, attributes, len(values) - 1, timestamp_ms, timestamp_ms, records)
    return encode_batch(batch)


def batch_cuts(buf: bytes, every: int) -> list[int]:
    """Batch-aligned positions in ``buf`` roughly every ``every`` bytes (excluding 0 and the end).

    Walks the batch chain with :func:`frame_batches` (a bounded number of batches at a time) and keeps
    only the cut points; stops at a truncated or corrupt tail (which then stays in the last piece).
    """
    cuts: list[int] = []
    end = len(buf)
    pos = 0
    nxt = every
    while True:
        sizes, _ = frame_batches(buf, pos, max_batches=65536)
        if not sizes:
            return cuts
        for size in sizes:
            pos += size
            if pos >= nxt and pos < end:
                cuts.append(pos)
                nxt = pos + every
