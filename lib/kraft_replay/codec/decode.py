"""Bytes of a KRaft segment, snapshot or bootstrap file -> its records as Arrow (records level).

:func:`decode_records` turns a byte range of a file into three ``pyarrow.RecordBatch``es — data
records (:data:`DATA_SCHEMA`), control records (:data:`CONTROL_RECORDS_SCHEMA`) and quarantined
ranges (:data:`QUARANTINE_RANGES_SCHEMA`) — plus :class:`ChunkStats`. It knows bytes and records,
not storage: the bronze tables (cluster id, file name, offset buckets, snapshot columns) are built
from its result by :func:`kraft_replay.ingest.bronze.decode_to_arrow`.

Rules:

* a data record becomes a data row at offset ``baseOffset + offsetDelta`` (an in-file offset for
  snapshots), with its batch's base/last offset, leader epoch and maxTimestamp (``append_time``);
  data records must have a null key, a value and no headers (facts §1.7), else ``BAD_RECORD_FRAMING``;
* a control record (facts §3) becomes a control row;
* nothing is dropped and nothing raises, whatever the bytes: a range that cannot be decoded becomes
  a quarantine row with a reason code (:data:`kraft_replay.codec.errors.REASON_CODES`), its position,
  length, the batch's first offset where known, ``records`` (how many declared records the row stands
  for) and its raw bytes. A batch that fails as a whole gives one row covering its on-disk bytes;
  records of a batch that fail give one row per reason code, covering the batch's on-disk bytes (so
  the raw bytes of a row never exceed the batch's size on disk) with ``records`` = how many records
  it merges and ``offset`` = the first of them. The unframeable rest of the data is one row.

Stages (each a function below):

1. frame batches — :func:`kraft_replay.codec.batch.frame_batches`: where the chain of batches goes;
2. classify — with ``accelerate``, :func:`kraft_replay.codec.bulk.recognise` picks, in a run of at
   least ``_BULK_MIN_BATCHES`` framed batches, the batches it fully understands; every other batch
   goes to the general decoder;
3. decode — the general decoder (:func:`kraft_replay.codec.batch.decode_batch` and the record rules
   above) is the authority: it gives the rows or the quarantine reasons of its batches. Values of
   recognised batches are decoded column-wise by :mod:`kraft_replay.codec.columnar` where it
   recognises them, else row by row by :func:`kraft_replay.codec.records.decode_record_value` (the
   authority for values); a recognised batch holding a value that does not decode is handed to the
   general decoder, which quarantines that record;
4. assemble columns — rows back in batch order; each payload column laid out from its type's
   decoded values; ``payload_json`` rendered per payload column by
   :func:`kraft_replay.codec.arrow_json.record_json_arrow` where it supports the type (with
   ``accelerate``), else by :func:`kraft_replay.codec.jsonfmt.to_dump_json`.

``accelerate=False`` is the reference: the general decoder for every batch, values row by row,
``payload_json`` row by row. Both give the same result (tests/codec/test_decode_paths.py).

Cost is bounded: a batch holds at most :data:`~kraft_replay.codec.batch.MAX_BATCH_RECORDS` records
(a KRaft batch is at most 8 MiB), decompression is capped (16 MiB), quarantine rows are per batch
and reason, not per record.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.codec.arrow_json import record_json_arrow, supports
from kraft_replay.codec.arrow_payload import (
    CONTROL_FIELDS,
    PAYLOAD_COLUMN_BY_API_KEY,
    PAYLOAD_FIELDS,
    PAYLOAD_STRUCT_TYPES,
    build_control_columns,
    null_columns,
)
from kraft_replay.codec.batch import OFFSET_LIMIT, Corruption, RecordBatch, decode_batch, frame_batches, unframed
from kraft_replay.codec.bulk import Recognised, recognise
from kraft_replay.codec.columnar import ColumnarGroup, decode_values
from kraft_replay.codec.control import ControlDecodeError, ControlRecord, control_json, decode_control_record
from kraft_replay.codec.errors import REASON_CODES
from kraft_replay.codec.jsonfmt import to_dump_json
from kraft_replay.codec.records import RecordDecodeError, decode_record_value
from kraft_replay.codec.schema import RECORD_TYPES

__all__ = [
    "TIMESTAMP",
    "DATA_SCHEMA",
    "CONTROL_RECORDS_SCHEMA",
    "QUARANTINE_RANGES_SCHEMA",
    "ChunkStats",
    "DecodedRecords",
    "decode_records",
]

TIMESTAMP = pa.timestamp("us", tz="UTC")

#: Data records: one row per record, offsets of the file (log offsets, or in-file offsets of a snapshot).
DATA_SCHEMA = pa.schema([
    pa.field("offset", pa.int64()),
    pa.field("batch_base_offset", pa.int64()),
    pa.field("batch_last_offset", pa.int64()),
    pa.field("batch_leader_epoch", pa.int32()),
    pa.field("append_time", TIMESTAMP),
    pa.field("record_type", pa.string()),
    pa.field("api_key", pa.int32()),
    pa.field("record_version", pa.int32()),
    *PAYLOAD_FIELDS,
    pa.field("payload_json", pa.string()),
    pa.field("source_position", pa.int64()),
])

#: Control records (facts §3).
CONTROL_RECORDS_SCHEMA = pa.schema([
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
    pa.field("source_position", pa.int64()),
])

#: Quarantined ranges of the input (see the module docstring).
QUARANTINE_RANGES_SCHEMA = pa.schema([
    pa.field("source_position", pa.int64()),
    pa.field("length", pa.int64()),
    pa.field("offset", pa.int64()),
    pa.field("records", pa.int64()),
    pa.field("reason_code", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("raw", pa.binary()),
])

# A run of fewer framed batches goes to the general decoder whole (the accelerator's numpy calls have
# a fixed cost of some hundred microseconds).
_BULK_MIN_BATCHES = 16
# Row-wise decoded values up to this size are memoised per call (NoOp values are 4 bytes; big records
# are rarely repeated); at most this many distinct values, and this many distinct bad values.
_MEMO_MAX_VALUE = 512
_MEMO_MAX_ENTRIES = 100_000
_BAD_MEMO_MAX = 1000
# A payload column is assembled from in-order slices (and null runs) when it has at most this many
# pieces, else spread over the rows with numpy (measured faster from a handful of pieces on).
_MAX_SLICES = 8

_PAYLOAD_INDEX = {k: [f.name for f in PAYLOAD_FIELDS].index(c) for k, c in PAYLOAD_COLUMN_BY_API_KEY.items()}
_TOOL_NAMES = pa.array([RECORD_TYPES[k].tool_name if k in RECORD_TYPES else None for k in range(max(RECORD_TYPES) + 1)],
                       pa.string())


@dataclass(slots=True)
class ChunkStats:
    """What one decoded byte range held. Offsets are log offsets for segments, in-file offsets for
    snapshots; ``first_offset``/``last_offset`` cover the well-formed batches (None if there were none).
    ``quarantined`` counts quarantine rows, ``quarantined_records`` the declared records they stand for
    (rows without a known count add 0), ``quarantined_bytes`` the input bytes they cover (each once)."""

    bytes: int = 0
    batches: int = 0
    records: int = 0
    data_records: int = 0
    control_records: int = 0
    quarantined: int = 0
    quarantined_records: int = 0
    quarantined_bytes: int = 0
    first_offset: int | None = None
    last_offset: int | None = None


@dataclass(slots=True)
class DecodedRecords:
    """The records of one byte range: ``data``, ``control`` and ``quarantine`` batches and their stats.
    ``consumed``: bytes of the buffer decoded (``len(buf)`` unless ``stop``/``at_eof=False`` ended early)."""

    data: pa.RecordBatch
    control: pa.RecordBatch
    quarantine: pa.RecordBatch
    stats: ChunkStats = field(default_factory=ChunkStats)
    consumed: int = 0


def decode_records(
    buf: bytes,
    *,
    base_position: int = 0,
    stop: int | None = None,
    at_eof: bool = True,
    accelerate: bool = True,
    row_budget: int | None = None,
) -> DecodedRecords:
    """Decode the batches of ``buf`` (a batch-aligned byte range of a KRaft file) into Arrow records.

    ``base_position`` is the file position of ``buf[0]`` (positions in the result are file positions).
    ``stop``: decode only the batches that start before ``buf[stop]`` (such a batch is decoded whole, so
    it may run past ``stop``). ``at_eof=False`` says ``buf`` is not the end of the file: where the bytes
    cannot be framed (a batch running past the end of ``buf``, a short tail, a corrupt length) the call
    stops in front of them instead of quarantining them, and ``consumed`` says where, so the caller can
    decode on from there with more of the file. ``accelerate=False``: the reference path only (module
    docstring). ``row_budget``: stop after the batch at which the general decoder has given this many
    rows and quarantined records (``consumed`` says where; at least one batch is decoded) — a caller
    that decodes on from ``consumed`` keeps its memory bounded even where compressed batches hold far
    more records than bytes (the rows of the other batches are bounded by the input's size). Never
    raises on any bytes.
    """
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    d = _Decoder(buf, base_position, accelerate)
    # 1. frame batches
    sizes, framed_end = frame_batches(buf, 0, stop)
    starts = np.zeros(len(sizes), dtype=np.int64)
    if sizes:
        z = np.asarray(sizes, dtype=np.int64)
        np.cumsum(z[:-1], out=starts[1:])
    n = len(sizes)
    # 2. classify: the accelerator takes the batches it fully recognises, the general decoder the rest
    general = np.ones(n, dtype=bool)
    if accelerate and n >= _BULK_MIN_BATCHES:
        rec = recognise(buf, d.arr, starts, np.asarray(sizes, dtype=np.int64))
        # 3a. decode the values of the recognised batches (one holding a value that does not decode is
        # handed back to the general decoder)
        rec = d.add_recognised(rec, starts)
        general[rec.batch] = False
    # 3b. decode every other batch with the general decoder, up to the row budget
    cut = n
    for i in np.flatnonzero(general).tolist():
        d.add_general(int(starts[i]), sizes[i])
        if row_budget is not None and i + 1 < n and d.general_rows() >= row_budget:
            cut = i + 1
            break
    limit = len(buf) if stop is None else min(stop, len(buf))
    if cut < n:
        d.drop_recognised_from(cut)
        consumed = int(starts[cut])
    elif framed_end < limit and at_eof:
        d.quarantine.add_corruption(unframed(buf, framed_end, base_position))
        consumed = len(buf)
    else:
        consumed = framed_end
    # 4. assemble columns
    return d.result(consumed)


# ---------------------------------------------------------------------------------------------
# values (row by row: the authority)
# ---------------------------------------------------------------------------------------------

def _decode_value(value: bytes, column_json: bool) -> tuple[Any, ...]:
    """``(True, api_key, version, tool_name, record_or_None, json_or_None)`` or ``(False, code, message)``.

    ``json`` is None when ``column_json`` and the assembly renders it for the whole payload column
    (a record with a body whose type and version :func:`record_json_arrow` supports, without unknown
    tagged fields; same text as ``to_dump_json``)."""
    try:
        rec = decode_record_value(value)
        rt = RECORD_TYPES[rec.api_key]
        if (column_json and rt.has_body and supports(rec.api_key, rec.version)
                and "_unknown_tagged" not in rec.data):
            return (True, rec.api_key, rec.version, rt.tool_name, rec, None)
        return (True, rec.api_key, rec.version, rt.tool_name, rec if rt.has_body else None, to_dump_json(rec))
    except RecordDecodeError as exc:
        code = exc.code if exc.code in REASON_CODES else "RECORD_DECODE_ERROR"
        return (False, code, str(exc))
    except (ValueError, IndexError, KeyError, OverflowError) as exc:
        return (False, "RECORD_DECODE_ERROR", f"{type(exc).__name__}: {exc}")


class _Values:
    """Record values decoded row by row, each distinct (small) value once per call. ``entries[i]`` is
    ``(api_key, version, tool_name, record_or_None, json_or_None)``."""

    def __init__(self, column_json: bool) -> None:
        self.column_json = column_json
        self.entries: list[tuple[Any, ...]] = []
        self._memo: dict[bytes, int] = {}
        self._bad: dict[bytes, tuple[str, str]] = {}

    def index(self, value: bytes) -> int:
        """Index in ``entries`` of a value that decodes cleanly, else -1 (:meth:`error` says why)."""
        i = self._memo.get(value)
        if i is not None:
            return i
        if value in self._bad:
            return -1
        hit = _decode_value(value, self.column_json)
        if not hit[0]:
            if len(self._bad) < _BAD_MEMO_MAX:
                self._bad[value] = (hit[1], hit[2])
            return -1
        i = len(self.entries)
        self.entries.append(hit[1:])
        if len(value) <= _MEMO_MAX_VALUE and len(self._memo) < _MEMO_MAX_ENTRIES:
            self._memo[value] = i
        return i

    def error(self, value: bytes) -> tuple[str, str]:
        bad = self._bad.get(value)
        return bad if bad is not None else _decode_value(value, self.column_json)[1:]


# ---------------------------------------------------------------------------------------------
# quarantine
# ---------------------------------------------------------------------------------------------

class _Quarantine:
    """Quarantine rows (see the module docstring)."""

    __slots__ = ("pos", "length", "offset", "records", "code", "reason", "raw", "record_total")

    def __init__(self) -> None:
        self.record_total = 0     # sum of ``records`` (unknown counts as 0)
        self.pos: list[int] = []
        self.length: list[int] = []
        self.offset: list[int | None] = []
        self.records: list[int | None] = []
        self.code: list[str] = []
        self.reason: list[str] = []
        self.raw: list[bytes] = []

    def add(self, pos: int, length: int, offset: int | None, records: int | None, code: str, reason: str,
            raw: bytes) -> None:
        self.pos.append(pos)
        self.length.append(length)
        self.offset.append(offset)
        self.records.append(records)
        self.record_total += records or 0
        self.code.append(code)
        self.reason.append(reason)
        self.raw.append(raw)

    def add_corruption(self, c: Corruption) -> None:
        self.add(c.position, c.length, c.offset, c.records, c.reason_code, c.reason, c.raw)

    def covered_bytes(self) -> int:
        """Bytes covered by the rows, each byte once."""
        total, reach = 0, None
        for a, n in sorted(zip(self.pos, self.length)):
            b = a + n
            if reach is None or a >= reach:
                total += n
                reach = b
            elif b > reach:
                total += b - reach
                reach = b
        return total

    def batch(self) -> pa.RecordBatch:
        """The rows in file order (the general decoder adds the rows of batches the accelerator handed
        over after those of the batches it decoded first)."""
        n = len(self.pos)
        if not n:
            return _empty(QUARANTINE_RANGES_SCHEMA)
        if any(a > b for a, b in zip(self.pos, self.pos[1:])):
            order = sorted(range(n), key=self.pos.__getitem__)
            for name in ("pos", "length", "offset", "records", "code", "reason", "raw"):
                col = getattr(self, name)
                setattr(self, name, [col[i] for i in order])
        return pa.RecordBatch.from_arrays([
            pa.array(self.pos, pa.int64()),
            pa.array(self.length, pa.int64()),
            pa.array(self.offset, pa.int64()),
            pa.array(self.records, pa.int64()),
            pa.array(self.code, pa.string()),
            pa.array(self.reason, pa.string()),
            pa.array(self.raw, pa.binary()),
        ], schema=QUARANTINE_RANGES_SCHEMA)


class _RecordFailures:
    """Failed records of one batch, merged per reason code: ``code -> [count, first offset, first reason]``."""

    __slots__ = ("by_code",)

    def __init__(self) -> None:
        self.by_code: dict[str, list[Any]] = {}

    def add(self, code: str, offset: int, reason: str) -> None:
        e = self.by_code.get(code)
        if e is None:
            self.by_code[code] = [1, offset, reason]
        else:
            e[0] += 1

    def flush(self, q: _Quarantine, batch: RecordBatch, raw: bytes) -> None:
        for code, (count, offset, reason) in self.by_code.items():
            what = f"record at offset {offset}" if count == 1 else f"{count} records, the first at offset {offset}"
            q.add(batch.position, batch.size, offset, count, code, f"{what}: {reason}", raw)


# ---------------------------------------------------------------------------------------------
# the decoder: rows of both paths, then the columns
# ---------------------------------------------------------------------------------------------

class _Decoder:
    def __init__(self, buf: bytes, base_position: int, accelerate: bool) -> None:
        self.buf = buf
        self.arr = np.frombuffer(buf, dtype=np.uint8)
        self.base_position = base_position
        self.values = _Values(column_json=accelerate)
        self.quarantine = _Quarantine()
        self.batches = 0
        self.first: int | None = None
        self.last: int | None = None
        # data rows of the general decoder: per batch its fields and row count, per row offset and value index
        self.g_batch: list[tuple[int, int, int, int, int, int]] = []   # (pos, base, last, epoch, time, rows)
        self.g_offset: list[int] = []
        self.g_value: list[int] = []
        # data rows of recognised batches, and the column-wise decoded value groups they refer to
        self.fast: Recognised | None = None
        self.fast_starts = np.zeros(0, dtype=np.int64)
        self.fast_value = np.zeros(0, dtype=np.int64)     # index into values.entries, or into the groups
        self.fast_in_group = np.zeros(0, dtype=bool)
        self.groups: list[ColumnarGroup] = []
        # control rows
        self.c_rows: list[tuple[int, int, int, int, int, int]] = []    # (offset, base, last, epoch, time, pos)
        self.c_recs: list[ControlRecord] = []
        self.c_json: list[str] = []

    def general_rows(self) -> int:
        """Rows and quarantined records the general decoder has given so far."""
        return len(self.g_offset) + len(self.c_rows) + self.quarantine.record_total

    def _note_batch(self, base: int, last: int) -> None:
        self.batches += 1
        if self.first is None or base < self.first:
            self.first = base
        if self.last is None or last > self.last:
            self.last = last

    # -- the general decoder (the authority) ---------------------------------------------------

    def add_general(self, pos: int, size: int) -> None:
        """Decode the framed batch at ``buf[pos:pos + size]``: its rows, or its quarantine rows."""
        item = decode_batch(self.buf, pos, size, self.base_position)
        if isinstance(item, Corruption):
            self.quarantine.add_corruption(item)
            return
        self._note_batch(item.base_offset, item.last_offset)
        failures = _RecordFailures()
        if item.is_control:
            self._control_records(item, failures)
        else:
            self._data_records(item, failures)
        if failures.by_code:
            failures.flush(self.quarantine, item, self.buf[pos:pos + size])

    def _control_records(self, b: RecordBatch, failures: _RecordFailures) -> None:
        base, last, epoch, ts, pos = b.base_offset, b.last_offset, b.partition_leader_epoch, b.max_timestamp, b.position
        for r in b.records:
            off = base + r.offset_delta
            if not 0 <= off < OFFSET_LIMIT:
                failures.add("OFFSET_OUT_OF_RANGE", off, f"offset {off} outside [0, 2^63 - 2^31)")
                continue
            try:
                crec = decode_control_record(r.key, r.value)
                text = control_json(crec)
            except ControlDecodeError as exc:
                failures.add(exc.code, off, str(exc))
                continue
            except (ValueError, TypeError) as exc:
                failures.add("RECORD_DECODE_ERROR", off, f"{type(exc).__name__}: {exc}")
                continue
            self.c_rows.append((off, base, last, epoch, ts, pos))
            self.c_recs.append(crec)
            self.c_json.append(text)

    def _data_records(self, b: RecordBatch, failures: _RecordFailures) -> None:
        base = b.base_offset
        n0 = len(self.g_offset)
        for r in b.records:
            off = base + r.offset_delta
            value = r.value
            if not 0 <= off < OFFSET_LIMIT:
                failures.add("OFFSET_OUT_OF_RANGE", off, f"offset {off} outside [0, 2^63 - 2^31)")
                continue
            if value is None or r.key is not None or r.headers:
                why = "has a null value" if value is None else ("has a key" if r.key is not None else "has headers")
                failures.add("BAD_RECORD_FRAMING", off,
                             f"data record {why}; metadata records have a null key, a value and no headers")
                continue
            i = self.values.index(value)
            if i < 0:
                code, why = self.values.error(value)
                failures.add(code, off, why)
                continue
            self.g_offset.append(off)
            self.g_value.append(i)
        k = len(self.g_offset) - n0
        if k:
            self.g_batch.append((b.position, base, b.last_offset, b.partition_leader_epoch, b.max_timestamp, k))

    # -- the accelerator's batches ---------------------------------------------------------------

    def add_recognised(self, rec: Recognised, starts: np.ndarray) -> Recognised:
        """Decode the values of the recognised batches (column-wise where :mod:`codec.columnar`
        recognises them, else row by row) and keep their rows; returns the batches kept (a batch with a
        value that does not decode is left out: the general decoder then quarantines that record)."""
        n = len(rec.offset)
        self.fast_starts = starts
        if not n:
            return rec
        cv = decode_values(self.arr, rec.value_start, rec.value_length)
        vidx = np.empty(n, dtype=np.int64)
        at = 0
        for g in cv.groups:
            vidx[g.rows] = at + np.arange(len(g.rows), dtype=np.int64)
            at += len(g.rows)
        rest = np.flatnonzero(~cv.ok)
        if len(rest):
            buf, index = self.buf, self.values.index
            vidx[rest] = [index(buf[s:s + k]) for s, k in
                          zip(rec.value_start[rest].tolist(), rec.value_length[rest].tolist())]
        self.groups = cv.groups
        self.fast, self.fast_value, self.fast_in_group = rec, vidx, cv.ok
        failed = (vidx < 0) & ~cv.ok
        if failed.any():
            self._drop_recognised(np.unique(np.repeat(rec.batch, rec.rows)[failed]))
        return self.fast

    def drop_recognised_from(self, cut: int) -> None:
        """Forget the recognised batches from batch ``cut`` on (the call stops in front of them)."""
        if self.fast is not None:
            self._drop_recognised(self.fast.batch[self.fast.batch >= cut])

    def _drop_recognised(self, batches: np.ndarray) -> None:
        rec = self.fast
        if rec is None or not len(batches):
            return
        keep = ~np.isin(np.repeat(rec.batch, rec.rows), batches)
        self.fast = rec.without(batches)
        self.fast_value, self.fast_in_group = self.fast_value[keep], self.fast_in_group[keep]

    # -- 4. assemble columns -----------------------------------------------------------------------

    def result(self, consumed: int) -> DecodedRecords:
        rec = self.fast
        if rec is not None and len(rec.batch):
            self.batches += len(rec.batch)
            lo, hi = int(rec.base.min()), int(rec.last.max())
            self.first = lo if self.first is None else min(self.first, lo)
            self.last = hi if self.last is None else max(self.last, hi)
        data = self._data_batch()
        control = self._control_batch()
        q = self.quarantine
        stats = ChunkStats(
            bytes=consumed,
            batches=self.batches,
            data_records=data.num_rows,
            control_records=control.num_rows,
            records=data.num_rows + control.num_rows,
            quarantined=len(q.pos),
            quarantined_records=q.record_total,
            quarantined_bytes=q.covered_bytes(),
            first_offset=self.first,
            last_offset=self.last,
        )
        return DecodedRecords(data, control, q.batch(), stats, consumed)

    def _data_batch(self) -> pa.RecordBatch:
        if not self.g_offset and (self.fast is None or not len(self.fast.offset)):
            return _empty(DATA_SCHEMA)
        nu = len(self.values.entries)
        counts = np.asarray([b[5] for b in self.g_batch], dtype=np.int64)
        per_batch = np.asarray([b[:5] for b in self.g_batch], dtype=np.int64).reshape(-1, 5)
        cols = [np.repeat(per_batch[:, 0], counts),                         # position
                np.asarray(self.g_offset, dtype=np.int64),
                np.asarray(self.g_value, dtype=np.int64),
                *(np.repeat(per_batch[:, j], counts) for j in (1, 2, 3, 4))]  # base, last, epoch, time
        rec = self.fast
        if rec is not None and len(rec.offset):
            fast_pos = np.repeat(self.fast_starts[rec.batch] + self.base_position, rec.rows)
            fast = [fast_pos, rec.offset, np.where(self.fast_in_group, self.fast_value + nu, self.fast_value),
                    *(np.repeat(a, rec.rows) for a in (rec.base, rec.last, rec.epoch, rec.max_timestamp))]
            if len(cols[1]):  # both paths: back to batch order (a batch's rows keep their order)
                cols = [np.concatenate(c) for c in zip(cols, fast)]
                order = np.argsort(cols[0], kind="stable")
                cols = [c[order] for c in cols]
            else:
                cols = fast
        row_pos, offs, ridx, rbase, rlast, repoch, rtime = cols
        n = len(offs)
        groups = self.groups
        entries = self.values.entries
        keys = np.concatenate([np.array([u[0] for u in entries], dtype=np.int64),
                               *(np.full(len(g.rows), g.api_key, dtype=np.int64) for g in groups)])
        vers = np.concatenate([np.array([u[1] for u in entries], dtype=np.int64),
                               *(np.full(len(g.rows), g.version, dtype=np.int64) for g in groups)])
        row_keys = keys[ridx]
        json, payload = _payload_rows(entries, groups, ridx, n)
        return pa.RecordBatch.from_arrays([
            pa.array(offs, pa.int64()),
            pa.array(rbase, pa.int64()),
            pa.array(rlast, pa.int64()),
            pa.array(repoch, pa.int32()),
            pa.array(rtime * 1000, TIMESTAMP),
            _TOOL_NAMES.take(pa.array(row_keys, pa.int64())),
            pa.array(row_keys.astype(np.int32), pa.int32()),
            pa.array(vers[ridx].astype(np.int32), pa.int32()),
            *payload,
            json.take(pa.array(ridx, pa.int64())),
            pa.array(row_pos, pa.int64()),
        ], schema=DATA_SCHEMA)

    def _control_batch(self) -> pa.RecordBatch:
        if not self.c_rows:
            return _empty(CONTROL_RECORDS_SCHEMA)
        rows = np.asarray(self.c_rows, dtype=np.int64).reshape(-1, 6)
        recs = self.c_recs
        return pa.RecordBatch.from_arrays([
            pa.array(rows[:, 0], pa.int64()),
            pa.array(rows[:, 1], pa.int64()),
            pa.array(rows[:, 2], pa.int64()),
            pa.array(rows[:, 3], pa.int32()),
            pa.array(rows[:, 4] * 1000, TIMESTAMP),
            pa.array([c.name for c in recs], pa.string()),
            pa.array([c.type_id for c in recs], pa.int32()),
            pa.array([c.key_version for c in recs], pa.int32()),
            *build_control_columns(recs),
            pa.array(self.c_json, pa.string()),
            pa.array(rows[:, 5], pa.int64()),
        ], schema=CONTROL_RECORDS_SCHEMA)


@functools.lru_cache(maxsize=8)
def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


# ---------------------------------------------------------------------------------------------
# payload columns
# ---------------------------------------------------------------------------------------------

def _payload_rows(entries: list[tuple[Any, ...]], groups: list[ColumnarGroup], ridx: np.ndarray, n: int
                  ) -> tuple[pa.Array, list[pa.Array]]:
    """``payload_json`` of each decoded value and the payload columns of the ``n`` rows (row ``j``
    holds value ``ridx[j]``). The values are ``entries`` (decoded row by row) followed by the values of
    each column-wise decoded group, in order. Each type's values form one dense struct array (the
    row-wise ones converted once); its column takes row ``j`` from it directly. ``payload_json`` is
    the row-wise text where :func:`_decode_value` made it, else rendered per (type, version) from the
    dense arrays."""
    texts = [u[4] for u in entries]
    nu = len(entries)
    members: dict[int, list[int]] = {}
    for i, u in enumerate(entries):
        if u[3] is not None:
            members.setdefault(u[0], []).append(i)
    parts: dict[int, list[tuple[pa.Array, np.ndarray]]] = {}   # per api key: dense parts and the value indexes they hold
    for key, rows in members.items():
        col = PAYLOAD_COLUMN_BY_API_KEY[key]
        dense = pa.array([entries[i][3].data for i in rows], type=PAYLOAD_STRUCT_TYPES[col])
        by_version: dict[int, list[int]] = {}
        for j, i in enumerate(rows):
            if texts[i] is None:
                by_version.setdefault(entries[i][1], []).append(j)
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
    cols = null_columns([f.type for f in PAYLOAD_FIELDS], n)
    for key, ps in parts.items():
        dense = ps[0][0] if len(ps) == 1 else pa.concat_arrays([d for d, _ in ps])
        pos = np.full(at, -1, dtype=np.int64)
        pos[np.concatenate([v for _, v in ps])] = np.arange(len(dense), dtype=np.int64)
        rows_col = rows_of(dense, pos[ridx])
        if rows_col is not None:
            cols[_PAYLOAD_INDEX[key]] = rows_col
    json = json_parts[0] if len(json_parts) == 1 else pa.concat_arrays(json_parts)
    return json, cols


def rows_of(dense: pa.Array, ri: np.ndarray, max_slices: int = _MAX_SLICES) -> pa.Array | None:
    """Row ``j`` is ``dense[ri[j]]`` (null where ``ri[j] < 0``; None if every row is null): runs of
    consecutive values and the null runs between them are concatenated slices when there are at most
    ``max_slices`` pieces, else the values are spread over the rows (:func:`_spread`; after one
    ``take`` unless the rows hold ``dense`` in order). Both layouts give equal arrays."""
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
    if 2 * len(rs) + 1 > max_slices:
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
