"""Bronze Arrow schemas and the columnar decoder used inside ``mapInArrow`` (docs/design.md).

:data:`LOG_SCHEMA`, :data:`CONTROL_SCHEMA`, :data:`SNAPSHOT_SCHEMA`, :data:`QUARANTINE_SCHEMA` and
:data:`FILES_SCHEMA` are the column contracts of the bronze tables ``metadata_log``,
``metadata_control``, ``snapshot_records``, ``ingest_quarantine`` and ``ingest_files``.

:func:`decode_to_arrow` turns the bytes of a segment, snapshot or bootstrap file (or a batch-aligned
byte range of one) into four ``pyarrow.RecordBatch``es. Rules it applies:

* a data record of a segment becomes a ``metadata_log`` row at offset ``baseOffset + offsetDelta``;
  of a snapshot/bootstrap file a ``snapshot_records`` row (``position_in_snapshot`` = that offset);
* a control record becomes a ``metadata_control`` row (facts §3);
* a batch or record that fails to decode becomes an ``ingest_quarantine`` row with a reason code and
  its raw bytes; nothing is dropped. Data records must have a null key, no headers and a value
  (facts §1.7), otherwise they are quarantined as ``BAD_RECORD_FRAMING``.

Speed: runs of framed batches are classified with numpy and their records framed in lockstep (the
bulk path of :func:`decode_to_arrow`); their record values are decoded column-wise by
:mod:`kraft_replay.codec.columnar` where it handles the type and version, and ``payload_json`` is
rendered per payload column (:mod:`kraft_replay.codec.arrow_json`). Everything else is decoded row by
row, with decoded values memoised per call and, for values that decode cleanly, across calls in a
bounded cache. Every path gives exactly the rows of the general decoder (tests compare them).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.codec.arrow_json import record_json_arrow, supports
from kraft_replay.codec.arrow_payload import (
    CONTROL_FIELDS,
    PAYLOAD_COLUMN_BY_API_KEY,
    PAYLOAD_FIELDS,
    PAYLOAD_STRUCT_TYPES,
    build_struct_array,
)
from kraft_replay.codec.batch import HEADER_SIZE, Corruption, iter_batches
from kraft_replay.codec.columnar import ColumnarGroup, ColumnarValues, Reader, decode_values
from kraft_replay.codec.control import CONTROL_TYPES, ControlDecodeError, ControlRecord, decode_control_record
from kraft_replay.codec.files import FileKind
from kraft_replay.codec.jsonfmt import to_dump_json
from kraft_replay.codec.records import RecordDecodeError, decode_record_value
from kraft_replay.codec.schema import RECORD_TYPES, FieldSpec

__all__ = [
    "LOG_SCHEMA",
    "CONTROL_SCHEMA",
    "SNAPSHOT_SCHEMA",
    "QUARANTINE_SCHEMA",
    "FILES_SCHEMA",
    "BRONZE_SCHEMAS",
    "REASON_CODES",
    "OFFSET_BUCKET_SIZE",
    "ChunkStats",
    "DecodedChunk",
    "decode_to_arrow",
    "empty_batch",
]

OFFSET_BUCKET_SIZE = 1_000_000
TIMESTAMP = pa.timestamp("us", tz="UTC")

REASON_CODES = (
    "CRC_MISMATCH", "TRUNCATED_BATCH", "BAD_MAGIC", "CORRUPT_BATCH_LENGTH", "DECOMPRESSION_ERROR",
    "UNKNOWN_RECORD_TYPE", "UNSUPPORTED_RECORD_VERSION", "BAD_FRAME_VERSION", "RECORD_DECODE_ERROR",
    "TRAILING_BYTES", "UNKNOWN_CONTROL_TYPE", "BAD_RECORD_FRAMING", "TEXT_PARSE_ERROR",
)

_PAYLOAD = list(PAYLOAD_FIELDS)
_CONTROL_STRUCTS = list(CONTROL_FIELDS)

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
    *_PAYLOAD,
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
    *_CONTROL_STRUCTS,
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
    *_PAYLOAD,
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
    """A zero-row batch of ``schema``."""
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


@dataclass(slots=True)
class ChunkStats:
    """What one decoded byte range held. Offsets are log offsets for segments, in-file offsets for
    snapshots; ``first_offset``/``last_offset`` cover the well-formed batches (None if there were none)."""

    bytes: int = 0
    batches: int = 0
    records: int = 0
    data_records: int = 0
    control_records: int = 0
    quarantined: int = 0
    first_offset: int | None = None
    last_offset: int | None = None


@dataclass(slots=True)
class DecodedChunk:
    """The four bronze record batches decoded from one byte range, plus its :class:`ChunkStats`."""

    log: pa.RecordBatch
    control: pa.RecordBatch
    snapshot: pa.RecordBatch
    quarantine: pa.RecordBatch
    stats: ChunkStats = field(default_factory=ChunkStats)
    # bytes of the buffer decoded: ``len(buf)`` unless ``stop`` or ``at_eof=False`` ended the call early
    consumed: int = 0


def _const(value: Any, n: int, typ: pa.DataType) -> pa.Array:
    if value is None:
        return pa.nulls(n, typ)
    return pa.repeat(pa.scalar(value, typ), n)


def _ts(ms: list[int]) -> pa.Array:
    return pa.array(np.asarray(ms, dtype=np.int64) * 1000, TIMESTAMP)


class _Quarantine:
    __slots__ = ("pos", "length", "offset", "code", "reason", "raw")

    def __init__(self) -> None:
        self.pos: list[int] = []
        self.length: list[int] = []
        self.offset: list[int | None] = []
        self.code: list[str] = []
        self.reason: list[str] = []
        self.raw: list[bytes] = []

    def add(self, pos: int, length: int, offset: int | None, code: str, reason: str, raw: bytes) -> None:
        self.pos.append(pos)
        self.length.append(length)
        self.offset.append(offset)
        self.code.append(code)
        self.reason.append(reason)
        self.raw.append(raw)

    def batch(self, cluster_id: str, source_file: str, ingested_at: datetime) -> pa.RecordBatch:
        """The rows in file order (a batch re-decoded late by the bulk path added its rows last)."""
        n = len(self.pos)
        if any(a > b for a, b in zip(self.pos, self.pos[1:])):
            order = sorted(range(n), key=self.pos.__getitem__)
            for name in self.__slots__:
                col = getattr(self, name)
                setattr(self, name, [col[i] for i in order])
        cols = [
            _const(cluster_id, n, pa.string()),
            _const(source_file, n, pa.string()),
            pa.array(self.pos, pa.int64()),
            pa.array(self.length, pa.int64()),
            pa.array(self.offset, pa.int64()),
            pa.array(self.code, pa.string()),
            pa.array(self.reason, pa.string()),
            pa.array(self.raw, pa.binary()),
            pa.array([ingested_at] * n, TIMESTAMP),
        ]
        return pa.RecordBatch.from_arrays(cols, schema=QUARANTINE_SCHEMA)


def _json_value(f: FieldSpec, v: Any) -> Any:
    if v is None:
        return None
    if f.fields is not None:
        if f.is_array:
            return [_json_obj(f.fields, 0, e) for e in v]
        return _json_obj(f.fields, 0, v)
    if isinstance(v, (bytes, bytearray)):
        import base64

        return base64.b64encode(bytes(v)).decode("ascii")
    return v


def _json_obj(fields: tuple[FieldSpec, ...], version: int, data: dict[str, Any]) -> dict[str, Any]:
    return {f.json_name: _json_value(f, data.get(f.snake)) for f in fields if f.present_in(version)}


def control_json(rec: ControlRecord) -> str:
    """JSON of a control record value as the dump tool prints it after the control type: camelCase
    field names, every field of schema version 0 (e.g. ``{"version":0,"leaderId":1,...}``)."""
    import json

    schema = rec.control_type.schema
    return json.dumps(_json_obj(schema.fields, 0, rec.data), separators=(",", ":"))


def build_control_columns(records: list[ControlRecord]) -> list[pa.Array]:
    """Control struct columns aligned with ``CONTROL_FIELDS``: each row fills its type's column."""
    out = []
    for f in CONTROL_FIELDS:
        ctype = next(t for t in CONTROL_TYPES.values() if t.column == f.name)
        rows = [r.data if r.type_id == ctype.type_id else None for r in records]
        out.append(build_struct_array(ctype.schema, rows))
    return out


# Values up to this size are memoised (NoOp values are 4 bytes; big records are rarely repeated).
_MEMO_MAX_VALUE = 512
_MEMO_MAX_ENTRIES = 100_000


# Values that decoded cleanly, kept across calls (a worker decodes a file in 4 MiB pieces, and the same
# record values recur from piece to piece); emptied when full. Decoding is a pure function of the
# bytes, and nothing modifies a decoded record, so a cached entry gives exactly the rows a decode would.
_VALUE_CACHE: dict[bytes, tuple[Any, ...]] = {}
_VALUE_CACHE_MAX = 32_768  # about 50 MB at most (~1.5 KB an entry)


# payload column index per api key, and whether arrow_json renders a (type, version) of a type with a body
_PAYLOAD_INDEX = {k: [f.name for f in PAYLOAD_FIELDS].index(c) for k, c in PAYLOAD_COLUMN_BY_API_KEY.items()}
_COLUMN_JSON: dict[tuple[int, int], bool] = {}


def _column_json(api_key: int, version: int) -> bool:
    ok = _COLUMN_JSON.get((api_key, version))
    if ok is None:
        ok = _COLUMN_JSON[(api_key, version)] = api_key in _PAYLOAD_INDEX and supports(api_key, version)
    return ok


def _decode_value(value: bytes) -> tuple[Any, ...]:
    """``(True, api_key, version, tool_name, record_or_None, json)`` or ``(False, code, message)``.

    ``json`` is None when it is rendered later for the whole payload column at once
    (:func:`kraft_replay.codec.arrow_json.record_json_arrow`, same text as ``to_dump_json``): a record
    with a body whose type and version it supports and without unknown tagged fields."""
    hit = _VALUE_CACHE.get(value)
    if hit is None:
        hit = _decode_value_uncached(value)
        if hit[0] and len(value) <= _MEMO_MAX_VALUE:
            if len(_VALUE_CACHE) >= _VALUE_CACHE_MAX:
                _VALUE_CACHE.clear()
            _VALUE_CACHE[value] = hit
    return hit


def _decode_value_uncached(value: bytes) -> tuple[Any, ...]:
    try:
        rec = decode_record_value(value)
        rt = RECORD_TYPES[rec.api_key]
        if rt.has_body and _column_json(rec.api_key, rec.version) and "_unknown_tagged" not in rec.data:
            return (True, rec.api_key, rec.version, rt.tool_name, rec, None)
        return (True, rec.api_key, rec.version, rt.tool_name, rec if rt.has_body else None, to_dump_json(rec))
    except RecordDecodeError as exc:
        code = getattr(exc, "code", "RECORD_DECODE_ERROR")
        return (False, code if code in REASON_CODES else "RECORD_DECODE_ERROR", str(exc))
    except (ValueError, IndexError, KeyError, UnicodeDecodeError, OverflowError) as exc:
        return (False, "RECORD_DECODE_ERROR", f"{type(exc).__name__}: {exc}")


# a payload column is assembled from in-order slices (and null runs) when it has at most this many pieces,
# else spread over the rows with numpy (measured faster from a handful of pieces on)
_MAX_SLICES = 8


def _spread(a: pa.Array, at: np.ndarray, n: int) -> pa.Array:
    """Length-``n`` array with ``a[i]`` at row ``at[i]`` (``at`` ascending) and nulls elsewhere. Built
    with numpy from ``a``'s buffers: offsets of strings and lists are spread, their value buffers
    reused as they are (no gather of the values)."""
    if a.offset:
        a = pa.concat_arrays([a])
    m = len(a)
    t = a.type
    valid = np.zeros(n, dtype=bool)
    valid[at] = a.is_valid().to_numpy(zero_copy_only=False) if a.null_count else True
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    if pa.types.is_struct(t):
        children = [_spread(a.field(i), at, n) for i in range(t.num_fields)]
        return pa.Array.from_buffers(t, n, [bitmap], children=children)
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_list(t):
        off = np.frombuffer(a.buffers()[1], dtype=np.int32, count=m + 1)
        lens = np.zeros(n, dtype=np.int32)
        lens[at] = np.diff(off)
        new_off = np.empty(n + 1, dtype=np.int32)
        new_off[0] = off[0]
        np.cumsum(lens, out=new_off[1:])
        new_off[1:] += off[0]
        if pa.types.is_list(t):
            return pa.Array.from_buffers(t, n, [bitmap, pa.py_buffer(new_off)], children=[a.values])
        return pa.Array.from_buffers(t, n, [bitmap, pa.py_buffer(new_off), a.buffers()[2]])
    vals = (pc.fill_null(a, pa.scalar(False if pa.types.is_boolean(t) else 0, t)) if a.null_count else a).to_numpy(
        zero_copy_only=False)
    out = np.zeros(n, dtype=vals.dtype)
    out[at] = vals
    return pa.array(out, t, mask=~valid)


def _rows_of(dense: pa.Array, ri: np.ndarray) -> pa.Array | None:
    """Row ``j`` is ``dense[ri[j]]`` (null where ``ri[j] < 0``; None if every row is null): runs of
    consecutive values and the null runs between them are concatenated slices when there are few of
    them, else the values are spread over the rows (:func:`_spread`; after one ``take`` unless the
    rows hold ``dense`` in order)."""
    n = len(ri)
    valid = ri >= 0
    nz = np.flatnonzero(valid)
    if not len(nz):
        return None
    v = ri[nz]
    brk = np.empty(len(nz), dtype=bool)
    brk[0] = True
    brk[1:] = (np.diff(nz) != 1) | (np.diff(v) != 1)
    rs = np.flatnonzero(brk)
    if 2 * len(rs) + 1 > _MAX_SLICES:
        if len(v) != len(dense) or np.any(v != np.arange(len(v))):
            dense = dense.take(pa.array(v, pa.int64()))
        return _spread(dense, nz, n)
    pieces = []
    prev = 0
    for r0, r1 in zip(rs.tolist(), np.append(rs[1:], len(nz)).tolist()):
        at = int(nz[r0])
        if at > prev:
            pieces.append(pa.nulls(at - prev, dense.type))
        pieces.append(dense.slice(int(v[r0]), r1 - r0))
        prev = at + r1 - r0
    if prev < n:
        pieces.append(pa.nulls(n - prev, dense.type))
    return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)


def _payload_rows(uniq: list[tuple[Any, ...]], groups: list[ColumnarGroup], ridx: np.ndarray, n: int
                  ) -> tuple[pa.Array, list[pa.Array]]:
    """``payload_json`` of each decoded value and the payload columns of the ``n`` rows (row ``j``
    holds value ``ridx[j]``). The values are ``uniq`` (decoded row by row) followed by the values of
    each column-wise decoded group, in order. Each type's values form one dense struct array (the
    row-wise ones converted once); its column takes row ``j`` from it directly. ``payload_json`` is
    the row-wise text where ``_decode_value`` made it, else rendered per (type, version) from the
    dense arrays."""
    texts = [u[4] for u in uniq]
    nu = len(uniq)
    members: dict[int, list[int]] = {}
    for i, u in enumerate(uniq):
        if u[3] is not None:
            g = members.get(u[0])
            if g is None:
                members[u[0]] = g = []
            g.append(i)
    # per api key: dense parts and the value indexes they hold
    parts: dict[int, list[tuple[pa.Array, np.ndarray]]] = {}
    for key, rows in members.items():
        col = PAYLOAD_COLUMN_BY_API_KEY[key]
        dense = pa.array([uniq[i][3].data for i in rows], type=PAYLOAD_STRUCT_TYPES[col])
        by_version: dict[int, list[int]] = {}
        for j, i in enumerate(rows):
            if texts[i] is None:
                by_version.setdefault(uniq[i][1], []).append(j)
        for version, js in by_version.items():
            part = dense if len(js) == len(dense) else dense.take(pa.array(js, pa.int64()))
            for j, text in zip(js, record_json_arrow(key, version, part).to_pylist()):
                texts[rows[j]] = text
        parts.setdefault(key, []).append((dense, np.asarray(rows, dtype=np.int64)))
    json_parts = [pa.array(texts, pa.string())]
    at = nu
    for g in groups:
        k = len(g.rows)
        json_parts.append(record_json_arrow(g.api_key, g.version, g.payload, k))
        if g.payload is not None:
            parts.setdefault(g.api_key, []).append((g.payload, np.arange(at, at + k, dtype=np.int64)))
        at += k
    cols: list[pa.Array] = [pa.nulls(n, f.type) for f in PAYLOAD_FIELDS]
    for key, ps in parts.items():
        dense = ps[0][0] if len(ps) == 1 else pa.concat_arrays([d for d, _ in ps])
        pos = np.full(at, -1, dtype=np.int64)
        pos[np.concatenate([v for _, v in ps])] = np.arange(len(dense), dtype=np.int64)
        rows_col = _rows_of(dense, pos[ridx])
        if rows_col is not None:
            cols[_PAYLOAD_INDEX[key]] = rows_col
    json = json_parts[0] if len(json_parts) == 1 else pa.concat_arrays(json_parts)
    return json, cols


def _fast_records(buf: bytes, p: int, bend: int, count: int) -> list[tuple[int, int, int]] | None:
    """``(offset_delta, value start, value length)`` of a batch's records when they have KRaft's usual
    shape (facts §1.7: attributes 0, timestamp delta 0, null key, no headers, non-negative length,
    offset delta and value length in varints of at most four bytes); None for anything else, which the
    general record parser then handles."""
    out: list[tuple[int, int, int]] = []
    for _ in range(count):
        if p + 7 > bend:
            return None
        ln = buf[p]
        p += 1
        if ln & 0x80:
            ln, p = _uv4(buf, p - 1, bend)
        if ln & 1:
            return None
        body_end = p + (ln >> 1)
        if body_end > bend or body_end < p + 6 or buf[p] or buf[p + 1]:
            return None
        od = buf[p + 2]
        q = p + 3
        if od & 0x80:
            od, q = _uv4(buf, q - 1, body_end)
        if od & 1 or q + 2 > body_end or buf[q] != 1:
            return None
        vl = buf[q + 1]
        q += 2
        if vl & 0x80:
            vl, q = _uv4(buf, q - 1, body_end)
        if vl & 1:
            return None
        vend = q + (vl >> 1)
        if vend + 1 != body_end or buf[vend]:
            return None
        out.append((od >> 1, q, vend - q))
        p = body_end
    return out if p == bend else None


def _uv4(buf: bytes, p: int, end: int) -> tuple[int, int]:
    """Unsigned varint of at most four bytes at ``buf[p]`` ending before ``end``; ``(1, end)`` (an odd
    value, which every caller rejects) when longer or cut off."""
    v = 0
    for shift in (0, 7, 14, 21):
        if p >= end:
            return 1, end
        b = buf[p]
        p += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, p
    return 1, end


_HDR = struct.Struct(">qiibIhiqqqhii")
_HEAD17 = struct.Struct(">qiib")
_LEN = struct.Struct(">i")

# The bulk path (see decode_to_arrow) classifies runs of at least this many framed batches with numpy;
# shorter runs go batch by batch. Tests switch ``_BULK`` (bulk path), ``_COLUMNAR`` and ``_INLINE`` (the per-batch
# inline parser) off to compare with the general decoder.
_BULK_MIN_RUN = 16
_BULK_MAX_PIECE = 8192
_BULK = True
_INLINE = True
_COLUMNAR = True  # values of the bulk path decoded column-wise (codec.columnar); off: row by row

# The batch header (facts §1.1) as the bulk path reads it: bytes 0..60 of each batch.
_HEADER_BYTES = np.arange(HEADER_SIZE, dtype=np.int64)
_HEADER_DTYPE = np.dtype({
    "names": ["base", "epoch", "magic", "crc", "attr", "ldelta", "maxts", "count"],
    "formats": [">i8", ">i4", "u1", ">u4", ">i2", ">i4", ">i8", ">i4"],
    "offsets": [0, 12, 16, 17, 21, 23, 35, 57],
    "itemsize": HEADER_SIZE,
})
# smallest record of the usual shape: length, attributes, timestampDelta, offsetDelta, keyLength,
# valueLength and header count bytes
_MIN_RECORD = 7
# the lockstep framing goes on while at least this many batches still have records; the batches left
# then (a few long ones) are framed one by one
_LOCKSTEP_MIN = 64
_SAFE_OFFSET = 1 << 62
_TOOL_NAMES = pa.array([RECORD_TYPES[k].tool_name if k in RECORD_TYPES else None for k in range(max(RECORD_TYPES) + 1)],
                       pa.string())


def _frame_records(r: Reader, buf: bytes, start: np.ndarray, end: np.ndarray, count: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Frame the records of uncompressed batches whose records sections are ``buf[start[i]:end[i]]``
    holding ``count[i]`` records: ``(good, value_start, value_length, offset_delta)``, the last three
    per record in batch order (``count[i]`` slots per batch). ``good[i]`` is true when every record of
    batch ``i`` has KRaft's usual shape (facts §1.7: attributes 0, timestamp delta 0, null key, a value,
    no headers, varints of at most four bytes, records filling the section exactly); other batches
    are left to the per-batch decoder.

    Record ``k`` of every batch is read at once (the records of a batch follow one another); when few
    batches are left, the rest are framed one by one with :func:`_fast_records`."""
    nb = len(start)
    slot0 = np.cumsum(count) - count
    total = int(count.sum()) if nb else 0
    vs = np.zeros(total, dtype=np.int64)
    vl = np.zeros(total, dtype=np.int64)
    od = np.zeros(total, dtype=np.int64)
    good = np.ones(nb, dtype=bool)
    p_all = start.copy()
    k = 0
    while True:
        act = np.flatnonzero(good & (count > k))
        if len(act) < _LOCKSTEP_MIN:
            for b in act.tolist():
                spans = _fast_records(buf, int(p_all[b]), int(end[b]), int(count[b] - k))
                if spans is None:
                    good[b] = False
                    continue
                s = int(slot0[b]) + k
                for j, (d, a, m) in enumerate(spans):
                    od[s + j], vs[s + j], vl[s + j] = d, a, m
                p_all[b] = end[b]
            break
        p, e = p_all[act], end[act]
        ln, p, ok = r.uvarint(p, e)
        rend = p + (ln >> 1)
        ok &= ((ln & 1) == 0) & (rend <= e)
        g = r.gather(p, 2)
        ok &= (g[:, 0] == 0) & (g[:, 1] == 0)                  # attributes, timestamp delta
        d, p, ok2 = r.uvarint(p + 2, rend)
        ok &= ok2 & ((d & 1) == 0)
        ok &= r.gather(p, 1)[:, 0] == 1                        # key length -1: null key
        v, p, ok3 = r.uvarint(p + 1, rend)
        vend = p + (v >> 1)
        ok &= ok3 & ((v & 1) == 0) & (vend + 1 == rend)
        ok &= r.gather(vend, 1)[:, 0] == 0                     # no headers
        s = slot0[act] + k
        vs[s] = p
        vl[s] = v >> 1
        od[s] = d >> 1
        good[act] &= ok
        p_all[act] = rend
        k += 1
    good &= p_all == end
    return good, vs, vl, od


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
) -> DecodedChunk:
    """Decode a batch-aligned byte range of a KRaft file into the bronze Arrow batches.

    ``file_kind`` is ``segment``, ``snapshot`` or ``bootstrap``. Snapshot rows carry
    ``snapshot_end_offset``/``snapshot_epoch`` (bootstrap files default to 0/0). ``base_position`` is
    the file position of ``buf[0]``. Never raises on malformed bytes: failures become quarantine rows.

    Three paths give the same rows (same rules as :func:`kraft_replay.codec.batch.iter_batches`,
    CRC included):

    * bulk: the batch chain is walked first (only each batch's length); a run of framed batches
      (at least ``_BULK_MIN_RUN`` batches of >= 61 bytes, each inside ``buf``) has its headers
      gathered with numpy at once. A batch that is magic 2, uncompressed, not a control batch and
      whose CRC-32C verifies has its records framed in lockstep (record *k* of every batch at once,
      :func:`_frame_records`); when all its records have KRaft's usual shape (attributes 0, timestamp
      delta 0, null key, no headers, the records filling the batch) they become rows. Their values are
      decoded column-wise (:func:`kraft_replay.codec.columnar.decode_values`) or, where it declines,
      row by row (memoised); a batch holding a value that does not decode, and every other batch of
      the run, goes through the per-batch path. Rows are put back in batch order.
    * per-batch: uncompressed data batches of the usual shape are parsed inline;
    * general: everything else, and every malformed range, goes through ``iter_batches``.

    ``stop``: decode only the batches that start before ``buf[stop]`` (a batch starting before it is
    decoded whole, so it may run past ``stop``). ``at_eof=False`` says ``buf`` is not the end of the
    file: a batch that runs past the end of ``buf``, a short tail, or any range that ends the scan
    (``TRUNCATED_BATCH``/``CORRUPT_BATCH_LENGTH``) is then not decoded; the call stops in front of it so
    the caller can decode from there with more of the file. ``consumed`` of the result tells where
    decoding stopped (the next batch boundary, or ``len(buf)``).
    """
    kind = FileKind(file_kind)
    if kind not in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP):
        raise ValueError(f"decode_to_arrow: file_kind must be segment, snapshot or bootstrap, got {file_kind!r}")
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    is_log = kind is FileKind.SEGMENT
    if kind is FileKind.BOOTSTRAP:
        snapshot_end_offset = 0 if snapshot_end_offset is None else snapshot_end_offset
        snapshot_epoch = 0 if snapshot_epoch is None else snapshot_epoch
    if is_log:
        snapshot_end_offset = snapshot_epoch = None
    if ingested_at is None:
        ingested_at = datetime.now(timezone.utc)

    stats = ChunkStats(bytes=len(buf))
    q = _Quarantine()
    # data rows of the per-batch paths: per row the offset and the index of its decoded value; per
    # batch the batch fields
    r_off: list[int] = []
    r_idx: list[int] = []
    b_base: list[int] = []
    b_last: list[int] = []
    b_epoch: list[int] = []
    b_time: list[int] = []
    b_pos: list[int] = []
    b_rows: list[int] = []
    # data rows of the bulk path (one per batch): numpy arrays per run
    f_cols: list[tuple[np.ndarray, ...]] = []   # per row: (pos, offset, value start, value length, base, last, epoch, time)
    f_batches: list[tuple[np.ndarray, ...]] = []   # per batch: (pos, base, last, rows)
    uniq: list[tuple[Any, ...]] = []          # (api_key, version, tool_name, record_or_None, json)
    memo: dict[bytes, int] = {}
    bad_memo: dict[bytes, tuple[str, str]] = {}
    # control rows
    c_off: list[int] = []
    c_base: list[int] = []
    c_last: list[int] = []
    c_epoch: list[int] = []
    c_time: list[int] = []
    c_recs: list[ControlRecord] = []
    c_json: list[str] = []
    c_pos: list[int] = []

    first: int | None = None
    last: int | None = None
    nbatches = 0

    def learn(value: bytes) -> int:
        """Index in ``uniq`` of a cleanly decoding value (decoded and memoised on first sight), else -1."""
        i = memo.get(value)
        if i is not None:
            return i
        if value in bad_memo:
            return -1
        hit = _decode_value(value)
        if not hit[0]:
            if len(bad_memo) < 1000:
                bad_memo[value] = (hit[1], hit[2])
            return -1
        i = len(uniq)
        uniq.append(hit[1:])
        if len(value) <= _MEMO_MAX_VALUE and len(memo) < _MEMO_MAX_ENTRIES:
            memo[value] = i
        return i

    def add_data(base: int, blast: int, epoch: int, ts: int, bpos: int, recs: list[tuple[int, bytes]]) -> None:
        n0 = len(r_off)
        for od, value in recs:
            off = base + od
            i = learn(value)
            if i < 0:
                bad = bad_memo.get(value) or _decode_value(value)[1:]
                q.add(bpos, len(value), off, bad[0], f"record at offset {off}: {bad[1]}", value)
                continue
            r_off.append(off)
            r_idx.append(i)
        k = len(r_off) - n0
        if k:
            b_base.append(base)
            b_last.append(blast)
            b_epoch.append(epoch)
            b_time.append(ts)
            b_pos.append(bpos)
            b_rows.append(k)

    def add_general(item: Any) -> None:
        nonlocal first, last, nbatches
        if isinstance(item, Corruption):
            q.add(item.position, item.length, item.offset, item.reason_code, item.reason, item.raw)
            return
        nbatches += 1
        base = item.base_offset
        blast = base + item.last_offset_delta
        first = base if first is None or base < first else first
        last = blast if last is None or blast > last else last
        epoch, ts, bpos = item.partition_leader_epoch, item.max_timestamp, item.position
        if item.attributes & 0x20:
            for r in item.records:
                off = base + r.offset_delta
                try:
                    crec = decode_control_record(r.key, r.value)
                except ControlDecodeError as exc:
                    q.add(bpos, len(r.value or b""), off, exc.code, str(exc), bytes(r.value or b""))
                    continue
                c_off.append(off)
                c_base.append(base)
                c_last.append(blast)
                c_epoch.append(epoch)
                c_time.append(ts)
                c_recs.append(crec)
                c_json.append(control_json(crec))
                c_pos.append(bpos)
            return
        good: list[tuple[int, bytes]] = []
        for r in item.records:
            value = r.value
            if value is None or r.key is not None or r.headers:
                off = base + r.offset_delta
                why = "has a null value" if value is None else ("has a key" if r.key is not None else "has headers")
                q.add(bpos, len(value or b""), off, "BAD_RECORD_FRAMING",
                      f"data record at offset {off} {why}; metadata records have a null key, a value and no headers",
                      bytes(value or b""))
                continue
            good.append((r.offset_delta, value))
        add_data(base, blast, epoch, ts, bpos, good)

    end = len(buf)
    limit = end if stop is None else min(stop, end)
    unpack = _HDR.unpack_from
    crc = google_crc32c.value  # CRC-32C of facts §1.2 (kraft_replay.codec.crc), called directly in the hot loops
    inline = _INLINE

    def one(pos: int) -> tuple[int, bool]:
        """Decode the batch (or unframeable range) at ``pos``: ``(next position, go on)``."""
        nonlocal first, last, nbatches
        if inline and end - pos >= HEADER_SIZE:
            (base, blen, epoch, magic, stored, attrs, ldelta, _bts, maxts, _pid, _pep, _bseq, count) = unpack(buf, pos)
            size = blen + 12
            if magic == 2 and 61 <= size <= end - pos and not attrs & 0x27 and count >= 0:
                bend = pos + size
                if crc(buf[pos + 21 : bend]) == stored:
                    if count == 1:
                        # one record of KRaft's usual shape (see _fast_records), parsed in line
                        p = pos + 61
                        ln = buf[p]
                        vl = buf[p + 5] if p + 5 < bend else 0x80
                        if (not ln & 0x81 and p + 1 + (ln >> 1) == bend and not buf[p + 1] and not buf[p + 2]
                                and not buf[p + 3] & 0x81 and buf[p + 4] == 1 and not vl & 0x81
                                and p + 6 + (vl >> 1) == bend - 1 and not buf[bend - 1]):
                            nbatches += 1
                            blast = base + ldelta
                            if first is None or base < first:
                                first = base
                            if last is None or blast > last:
                                last = blast
                            add_data(base, blast, epoch, maxts, base_position + pos, [(buf[p + 3] >> 1, buf[p + 6 : bend - 1])])
                            return bend, True
                    spans = _fast_records(buf, pos + 61, bend, count)
                    if spans is not None:
                        recs = [(d, buf[a : a + m]) for d, a, m in spans]
                        nbatches += 1
                        blast = base + ldelta
                        if first is None or base < first:
                            first = base
                        if last is None or blast > last:
                            last = blast
                        add_data(base, blast, epoch, maxts, base_position + pos, recs)
                        return bend, True
        # anything unusual: the general decoder, one batch (or the rest of the data) at a time
        rest = end - pos
        if rest > 17:
            _b, blen, _e, magic = _HEAD17.unpack_from(buf, pos)
            whole = 12 + blen
            framed = blen >= 14 and not (magic == 2 and blen < 49) and whole <= rest
        else:
            framed = False
        if not framed:
            if not at_eof:
                return pos, False  # ends the scan here, or needs bytes past buf: the caller decodes on from pos
            piece = buf[pos:]
        else:
            piece = buf[pos:pos + whole] if whole < rest else buf[pos:]
        for item in iter_batches(piece, base_position + pos):
            add_general(item)
            if isinstance(item, Corruption):
                return pos + item.length, item.reason_code not in ("TRUNCATED_BATCH", "CORRUPT_BATCH_LENGTH")
            return pos + item.size, True
        return pos, False  # pragma: no cover - iter_batches always yields for non-empty input

    arr = np.frombuffer(buf, dtype=np.uint8)
    reader = Reader(arr)

    def bulk(pos0: int, sizes: list[int]) -> None:
        """The bulk path for a run of framed batches starting at ``pos0`` (see the docstring)."""
        z = np.array(sizes, dtype=np.int64)
        starts = np.cumsum(z)
        starts -= z
        starts += pos0
        h = arr[starts[:, None] + _HEADER_BYTES].view(_HEADER_DTYPE).ravel()
        cnt = h["count"].astype(np.int64)
        cand = np.flatnonzero((h["magic"] == 2) & (h["attr"] & 0x27 == 0) & (cnt >= 1)
                              & (cnt * _MIN_RECORD <= z - HEADER_SIZE)
                              & (np.abs(h["base"]) < _SAFE_OFFSET))  # offsets computed in int64 cannot overflow
        cs = starts[cand]
        crcs = [crc(buf[s + 21 : e]) for s, e in zip(cs.tolist(), (cs + z[cand]).tolist())]
        cand = cand[np.array(crcs, dtype=np.uint32) == h["crc"][cand]]
        good, vs, vl, od = _frame_records(reader, buf, starts[cand] + HEADER_SIZE, starts[cand] + z[cand], cnt[cand])
        fast = cand[good]
        if len(fast):
            hf = h[fast]
            k = cnt[fast]
            rows = np.repeat(good, cnt[cand])
            base = hf["base"].astype(np.int64)
            f_batches.append((starts[fast] + base_position, base, base + hf["ldelta"], k))
            f_cols.append((
                np.repeat(starts[fast] + base_position, k),
                np.repeat(base, k) + od[rows],
                vs[rows],
                vl[rows],
                np.repeat(base, k),
                np.repeat(base + hf["ldelta"], k),
                np.repeat(hf["epoch"].astype(np.int64), k),
                np.repeat(hf["maxts"].astype(np.int64), k),
            ))
        if len(fast) < len(z):
            slow = np.ones(len(z), dtype=bool)
            slow[fast] = False
            for s in starts[slow].tolist():
                one(s)

    pos = 0
    bulk_on = _BULK
    min_run = _BULK_MIN_RUN
    len_at = _LEN.unpack_from
    while pos < limit:
        if bulk_on:
            # walk the chain of framed batches (>= 61 bytes, inside buf) that start before limit
            sizes: list[int] = []
            add = sizes.append
            p = pos
            while p < limit and end - p >= 61:
                size = len_at(buf, p + 8)[0] + 12
                if size < 61 or size > end - p:
                    break
                add(size)
                p += size
            if len(sizes) >= min_run:
                # in pieces (bounded memory); the first ones small while the value memo fills up
                k, step = 0, 512
                while k < len(sizes):
                    part = sizes[k : k + step]
                    bulk(pos, part)
                    pos += sum(part)
                    k += step
                    step = min(2 * step, _BULK_MAX_PIECE)
                continue
            if sizes:
                for size in sizes:
                    one(pos)
                    pos += size
                continue
        pos, go_on = one(pos)
        if not go_on:
            break

    # rows of the bulk path: values decoded column-wise where possible, else row by row; a batch with
    # a value that does not decode goes through the per-batch path (which quarantines that record)
    groups: list[ColumnarGroup] = []
    f_vidx = np.zeros(0, dtype=np.int64)
    f_rel = np.zeros(0, dtype=bool)   # value index relative to the columnar groups (else into uniq)
    if f_cols:
        fc = [np.concatenate(c) for c in zip(*f_cols)]
        fb = [np.concatenate(c) for c in zip(*f_batches)]
        cv = decode_values(arr, fc[2], fc[3]) if _COLUMNAR else ColumnarValues(np.zeros(len(fc[2]), dtype=bool), [])
        groups = cv.groups
        f_vidx = np.empty(len(fc[0]), dtype=np.int64)
        at = 0
        for g in groups:
            f_vidx[g.rows] = at + np.arange(len(g.rows), dtype=np.int64)
            at += len(g.rows)
        f_rel = cv.ok
        rest = np.flatnonzero(~cv.ok)
        if len(rest):
            f_vidx[rest] = [learn(buf[s : s + k]) for s, k in zip(fc[2][rest].tolist(), fc[3][rest].tolist())]
        failed = (f_vidx < 0) & ~f_rel
        if failed.any():
            bad_pos = np.unique(fc[0][failed])
            keep_b = ~np.isin(fb[0], bad_pos)
            keep_r = ~np.isin(fc[0], bad_pos)
            fb = [c[keep_b] for c in fb]
            fc = [c[keep_r] for c in fc]
            f_vidx, f_rel = f_vidx[keep_r], f_rel[keep_r]
            for s in (bad_pos - base_position).tolist():
                one(s)
        if len(fb[0]):
            nbatches += len(fb[0])
            lo, hi = int(fb[1].min()), int(fb[2].max())
            first = lo if first is None or lo < first else first
            last = hi if last is None or hi > last else last
        f_cols = [(fc[0], fc[1], fc[4], fc[5], fc[6], fc[7])]
    nu = len(uniq)
    f_vidx = np.where(f_rel, f_vidx + nu, f_vidx)

    nf = sum(len(c[0]) for c in f_cols)
    n = len(r_off) + nf
    stats.batches = nbatches
    stats.bytes = pos
    stats.first_offset, stats.last_offset = first, last
    stats.data_records = n
    stats.control_records = len(c_off)
    stats.records = stats.data_records + stats.control_records
    stats.quarantined = len(q.pos)

    # per row: position, offset, value index, batch base/last offset, epoch, max timestamp
    counts = np.asarray(b_rows, dtype=np.int64)
    cols = [np.repeat(np.asarray(b_pos, dtype=np.int64), counts),
            np.asarray(r_off, dtype=np.int64),
            np.asarray(r_idx, dtype=np.int64),
            *(np.repeat(np.asarray(v, dtype=np.int64), counts) for v in (b_base, b_last, b_epoch, b_time))]
    if nf:
        fcols = [f_cols[0][0], f_cols[0][1], f_vidx, *f_cols[0][2:]]
        if r_off:  # both paths: back to batch order (a batch's rows keep their order)
            cols = [np.concatenate(c) for c in zip(cols, fcols)]
            order = np.argsort(cols[0], kind="stable")
            cols = [c[order] for c in cols]
        else:
            cols = fcols
    row_pos, offs, ridx, rbase, rlast, repoch, rtime = cols

    idx = pa.array(ridx, pa.int64())
    keys = np.concatenate([np.array([u[0] for u in uniq], dtype=np.int64),
                           *(np.full(len(g.rows), g.api_key, dtype=np.int64) for g in groups)])
    vers = np.concatenate([np.array([u[1] for u in uniq], dtype=np.int64),
                           *(np.full(len(g.rows), g.version, dtype=np.int64) for g in groups)])
    row_keys = keys[ridx]
    u_key = pa.array(row_keys.astype(np.int32), pa.int32())
    u_ver = pa.array(vers[ridx].astype(np.int32), pa.int32())
    u_type = _TOOL_NAMES.take(pa.array(row_keys, pa.int64()))
    u_json, payload = _payload_rows(uniq, groups, ridx, n)
    u_json = u_json.take(idx)
    times = pa.array(rtime * 1000, TIMESTAMP)
    tail = [u_json, _const(source_file, n, pa.string()), pa.array(row_pos, pa.int64())]
    typed = [u_type, u_key, u_ver]
    if is_log:
        log = pa.RecordBatch.from_arrays(
            [
                _const(cluster_id, n, pa.string()),
                pa.array(offs, pa.int64()),
                pa.array(offs // OFFSET_BUCKET_SIZE, pa.int64()),
                pa.array(rbase, pa.int64()),
                pa.array(rlast, pa.int64()),
                pa.array(repoch, pa.int32()),
                times,
                *typed,
                *payload,
                *tail,
            ],
            schema=LOG_SCHEMA,
        )
        snap = empty_batch(SNAPSHOT_SCHEMA)
    else:
        snap = pa.RecordBatch.from_arrays(
            [
                _const(cluster_id, n, pa.string()),
                _const(snapshot_end_offset, n, pa.int64()),
                _const(snapshot_epoch, n, pa.int32()),
                _const(kind.value, n, pa.string()),
                pa.array(offs, pa.int64()),
                pa.array(rbase, pa.int64()),
                times,
                *typed,
                *payload,
                *tail,
            ],
            schema=SNAPSHOT_SCHEMA,
        )
        log = empty_batch(LOG_SCHEMA)

    m = len(c_off)
    control = pa.RecordBatch.from_arrays(
        [
            _const(cluster_id, m, pa.string()),
            pa.array(c_off, pa.int64()),
            pa.array(c_base, pa.int64()),
            pa.array(c_last, pa.int64()),
            pa.array(c_epoch, pa.int32()),
            _ts(c_time),
            pa.array([c.name for c in c_recs], pa.string()),
            pa.array([c.type_id for c in c_recs], pa.int32()),
            pa.array([c.key_version for c in c_recs], pa.int32()),
            *build_control_columns(c_recs),
            pa.array(c_json, pa.string()),
            _const("log" if is_log else kind.value, m, pa.string()),
            _const(snapshot_end_offset, m, pa.int64()),
            _const(snapshot_epoch, m, pa.int32()),
            _const(source_file, m, pa.string()),
            pa.array(c_pos, pa.int64()),
        ],
        schema=CONTROL_SCHEMA,
    )
    return DecodedChunk(log, control, snap, q.batch(cluster_id, source_file, ingested_at), stats, pos)
