"""Hostile inputs made from real Kafka files, and the checker of the decoder's promise (issue 15).

The decoder promises: it never raises on malformed bytes, and everything it cannot decode lands in
quarantine. This module makes inputs the way an attacker would and checks that promise on each one.
It is shared by ``tests/fuzz/test_fuzz_hostile.py`` (bounded, hypothesis) and ``bench/fuzz.py`` (the
campaign of a million inputs).

Inputs (:func:`make_case`, deterministic from a ``random.Random``-like source; hypothesis's
``st.randoms()`` works, so examples shrink): a window of 1-48 consecutive batches of a real segment,
snapshot or bootstrap file (a batch over 8 KiB is usually cut down to a CRC-valid batch of a slice of
its records: "pieces of them"), then

* **CRC-valid semantic mutations** (:data:`SEMANTIC`, on a batch decoded into :class:`Batch` /
  :class:`Rec` and re-encoded with the CRC-32C recomputed, so the batch passes the CRC check):
  recordsCount off by one or extreme, records section cut short or emptied, records dropped or
  duplicated, record length / offset delta / timestamp delta fields changed, over-long (non-canonical)
  varints, record attributes, keys on data records, null/empty/cut/retyped values, headers, trailing
  bytes, lastOffsetDelta / baseTimestamp / maxTimestamp / producer fields, batch attributes (timestamp
  type, transactional, control bit, delete horizon, unknown codec ids), the records section
  recompressed with gzip, snappy, lz4 or zstd (:mod:`kraft_replay.codec.compression`) and then
  possibly cut or corrupted, amplification batches (thousands of records, mostly compressed), and the
  header fields outside the CRC (baseOffset near 2^63-1 or negative, leader epoch, magic);
* **raw mutations** (:data:`RAW`, on the bytes): bit flips, byte sets, truncations, inserted /
  deleted / duplicated runs, extreme batchLength / baseOffset / lastOffsetDelta / recordsCount /
  maxTimestamp / attributes fields with or without the CRC recomputed.

The checker (:func:`check`) decodes each input with ``kraft_replay.ingest.bronze.decode_to_arrow``
three ways — accelerated, reference (``accelerate=False``) and split (the production loop of
``kraft_replay.ingest.pipeline._decode_range`` with small pieces) — and states every broken rule as
``"<class>: <detail>"``; see :func:`check` for the accounting rule.
"""

from __future__ import annotations

import base64
import bisect
import dataclasses
import functools
import json
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from kraft_replay.codec.batch import Corruption, iter_batches
from kraft_replay.codec.compression import compress
from kraft_replay.codec.crc import crc32c
from kraft_replay.codec.errors import REASON_CODES
from kraft_replay.codec.files import FileKind, classify
from kraft_replay.ingest.bronze import decode_to_arrow as DECODE

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
INT32_MAX = (1 << 31) - 1
INT32_MIN = -(1 << 31)
# largest / smallest millisecond timestamp whose microseconds fit an int64 (append_time is in us)
MAX_MS = INT64_MAX // 1000
MIN_MS = -(-INT64_MIN // 1000)

HEADER_SIZE = 61
_HDR = struct.Struct(">qiibIhiqqqhii")  # facts §1.1: the whole 61-byte header
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount (bytes 21..60)
# byte offset, struct format and CRC coverage of each header field (facts §1.1, §1.2)
FIELDS: dict[str, tuple[int, str, bool]] = {
    "base_offset": (0, ">q", False),
    "batch_length": (8, ">i", False),
    "leader_epoch": (12, ">i", False),
    "magic": (16, ">b", False),
    "crc": (17, ">I", False),
    "attributes": (21, ">h", True),
    "last_offset_delta": (23, ">i", True),
    "base_timestamp": (27, ">q", True),
    "max_timestamp": (35, ">q", True),
    "producer_id": (43, ">q", True),
    "producer_epoch": (51, ">h", True),
    "base_sequence": (53, ">i", True),
    "records_count": (57, ">i", True),
}

I64 = [0, 1, -1, 2, INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MAX - 3, INT64_MIN + 1, 1 << 62, -(1 << 62),
       1 << 53, 1 << 32, 1 << 31, 10 ** 16, 10 ** 16 + 1, 10 ** 18, MAX_MS, MAX_MS + 1, MIN_MS, MIN_MS - 1,
       1_700_000_000_000]
I32 = [0, 1, -1, 2, INT32_MAX, INT32_MIN, INT32_MAX - 1, INT32_MIN + 1, 13, 14, 48, 49, 50, 60, 61, 62, 127, 128,
       255, 256, 1 << 16, 1 << 24, 1 << 30]
I16 = [0, 1, -1, 2, 0x7FFF, -0x8000, 0x7F, 0x80, 0xFF, 0x100]
I8 = [0, 1, 2, 3, -1, 0x7F, -0x80]


# ----------------------------------------------------------------------------------------- varints

def zigzag(n: int) -> int:
    """Zigzag mapping of facts §1.5 for any Python int (equals ``(n << 1) ^ (n >> 63)`` in range)."""
    return n << 1 if n >= 0 else ((-n) << 1) - 1


def uvarint(u: int, pad: int = 0) -> bytes:
    """Unsigned varint of ``u`` (any size); ``pad`` extra zero groups make a non-canonical, over-long
    encoding of the same value (``0x81 0x80 0x00`` for 1 with ``pad=2``)."""
    groups = []
    while True:
        groups.append(u & 0x7F)
        u >>= 7
        if not u:
            break
    groups += [0] * pad
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


def svarint(n: int, pad: int = 0) -> bytes:
    return uvarint(zigzag(n), pad)


# ------------------------------------------------------------------------------- editable batches

@dataclass
class Rec:
    """One record (facts §1.4) with every field free, even inconsistent ones. ``length`` None: the
    body's real length; ``pad``: per field (``length``, ``ts``, ``off``, ``klen``, ``vlen``,
    ``hcount``) extra varint bytes; ``extra``: bytes at the end of the body, inside the length."""

    attributes: int = 0
    ts_delta: int = 0
    off_delta: int = 0
    key: bytes | None = None
    value: bytes | None = b""
    headers: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    length: int | None = None
    header_count: int | None = None
    pad: dict[str, int] = field(default_factory=dict)
    extra: bytes = b""

    def encode(self) -> bytes:
        p = self.pad.get
        body = [bytes((self.attributes & 0xFF,)), svarint(self.ts_delta, p("ts", 0)), svarint(self.off_delta, p("off", 0))]
        body.append(svarint(-1, p("klen", 0)) if self.key is None else svarint(len(self.key), p("klen", 0)) + self.key)
        body.append(svarint(-1, p("vlen", 0)) if self.value is None else svarint(len(self.value), p("vlen", 0)) + self.value)
        body.append(svarint(len(self.headers) if self.header_count is None else self.header_count, p("hcount", 0)))
        for hk, hv in self.headers:
            body.append(svarint(len(hk)) + hk)
            body.append(svarint(-1) if hv is None else svarint(len(hv)) + hv)
        body.append(self.extra)
        blob = b"".join(body)
        return svarint(len(blob) if self.length is None else self.length, p("length", 0)) + blob


@dataclass
class Batch:
    """A v2 batch (facts §1.1) with every field free. ``count`` None: ``len(records)``; ``section``
    replaces the encoded records (before compression); ``compress_with`` None: compress with the
    codec of ``attributes`` when it is 1-4 (else the section is left as it is); ``cut``/``flip``:
    applied to the final (compressed) section; ``crc``/``batch_length`` None: computed."""

    base_offset: int
    leader_epoch: int
    magic: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Rec]
    count: int | None = None
    tail: bytes = b""
    section: bytes | None = None
    compress_with: int | None = None
    cut: int | None = None
    flip: int | None = None
    crc: int | None = None
    batch_length: int | None = None

    @classmethod
    def parse(cls, raw: bytes) -> Batch | None:
        """The batch of ``raw`` (one well-formed batch), or None if it does not decode."""
        items = list(iter_batches(raw))
        if len(items) != 1 or isinstance(items[0], Corruption):
            return None
        b = items[0]
        recs = [Rec(r.attributes, r.timestamp_delta, r.offset_delta, r.key, r.value,
                    [(k.encode("utf-8"), v) for k, v in r.headers]) for r in b.records]
        return cls(b.base_offset, b.partition_leader_epoch, b.magic, b.attributes, b.last_offset_delta,
                   b.base_timestamp, b.max_timestamp, b.producer_id, b.producer_epoch, b.base_sequence, recs)

    def plain_section(self) -> bytes:
        return (b"".join(r.encode() for r in self.records) + self.tail) if self.section is None else self.section

    def encode(self) -> bytes:
        sec = self.plain_section()
        codec = self.attributes & 0x07 if self.compress_with is None else self.compress_with
        if 1 <= codec <= 4:
            sec = compress(codec, sec)
        if self.cut is not None:
            sec = sec[: self.cut]
        if self.flip is not None and sec:
            b = bytearray(sec)
            b[self.flip % len(b)] ^= 1 << (self.flip % 8)
            sec = bytes(b)
        after = _AFTER_CRC.pack(_s16(self.attributes), _s32(self.last_offset_delta), _s64(self.base_timestamp),
                                _s64(self.max_timestamp), _s64(self.producer_id), _s16(self.producer_epoch),
                                _s32(self.base_sequence), _s32(len(self.records) if self.count is None else self.count)) + sec
        crc = crc32c(after) if self.crc is None else self.crc
        blen = len(after) + 4 + 4 + 1 if self.batch_length is None else self.batch_length  # epoch, magic, crc
        return struct.pack(">qiibI", _s64(self.base_offset), _s32(blen), _s32(self.leader_epoch), _s8(self.magic), crc) + after


def _wrap(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _s8(v: int) -> int:
    return _wrap(v, 8)


def _s16(v: int) -> int:
    return _wrap(v, 16)


def _s32(v: int) -> int:
    return _wrap(v, 32)


def _s64(v: int) -> int:
    return _wrap(v, 64)


# --------------------------------------------------------------------------------- framing / files

def frame(buf: bytes) -> tuple[list[tuple[int, int]], int]:
    """The batch chain of ``buf`` (facts §1.6 and the project's length rule): ``([(pos, size)...],
    tail)``. From position 0: 17 or fewer bytes left, a batchLength below 14 (below 49 with magic 2)
    or a batch running past the end ends the chain; ``[tail, len(buf))`` is then unframeable."""
    n = len(buf)
    out = []
    p = 0
    while n - p > 17:
        blen = int.from_bytes(buf[p + 8 : p + 12], "big", signed=True)
        magic = buf[p + 16]
        if blen < 14 or (magic == 2 and blen < 49) or 12 + blen > n - p:
            break
        out.append((p, 12 + blen))
        p += 12 + blen
    return out, p


@dataclass(frozen=True)
class Source:
    """A real KRaft file and where its batches start."""

    name: str
    data: bytes
    file_kind: str
    snapshot_end_offset: int | None
    snapshot_epoch: int | None
    starts: tuple[int, ...]  # batch positions, then the end of the chain


def load_sources(directory: Path, names: list[str] | None = None) -> list[Source]:
    """Every segment, snapshot and bootstrap file of ``directory`` (names containing one of
    ``names``, if given), read in memory (they are only read, never copied anywhere)."""
    out = []
    for path in sorted(Path(directory).iterdir()):
        info = classify(path.name)
        if info.kind not in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP):
            continue
        if names and not any(s in path.name for s in names):
            continue
        data = path.read_bytes()
        framed, tail = frame(data)
        starts = tuple(p for p, _ in framed) + (tail,)
        out.append(Source(path.name, data, info.kind.value, info.end_offset if info.kind is FileKind.SNAPSHOT else None,
                          info.epoch if info.kind is FileKind.SNAPSHOT else None, starts))
    return out


# ------------------------------------------------------------------------------------------ cases

@dataclass
class Case:
    """One hostile input: the bytes, how to decode them, how the split decode cuts them, and what
    was done to make them (for the report)."""

    buf: bytes
    file_kind: str = "segment"
    snapshot_end_offset: int | None = None
    snapshot_epoch: int | None = None
    base_position: int = 0
    piece: int = 1 << 20      # split decode: bytes each call owns (``stop``) ...
    slack: int = 0            # ... and bytes read past them (``_decode_range``'s slack)
    source: str = ""
    steps: list[str] = field(default_factory=list)

    def decode_kwargs(self) -> dict[str, Any]:
        return dict(cluster_id="fuzz", source_file=self.source or "fuzz.log", file_kind=self.file_kind,
                    snapshot_end_offset=self.snapshot_end_offset, snapshot_epoch=self.snapshot_epoch, ingested_at=AT)

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["buf"] = base64.b64encode(self.buf).decode("ascii")
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Case:
        d = json.loads(text)
        d["buf"] = base64.b64decode(d["buf"])
        return cls(**d)


AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _pick(rng: Any, weighted: list[tuple[Any, float]]) -> Any:
    total = sum(w for _, w in weighted)
    x = rng.random() * total
    for item, w in weighted:
        x -= w
        if x < 0:
            return item
    return weighted[-1][0]


def _small(rng: Any, lo: int, hi: int) -> int:
    """An int in [lo, hi], small ones more likely."""
    span = hi - lo
    k = rng.randint(0, 3)
    return lo + rng.randint(0, max(0, min(span, (1, 4, 16, span)[k])))


# ---------------------------------------------------------------------------- semantic mutations
# Each takes (rng, batch, ctx) and edits the batch; the CRC is recomputed on encode unless a mutator
# sets one. ``ctx()`` gives the values of the window's other records.

def _rec(rng: Any, b: Batch) -> Rec | None:
    return b.records[rng.randint(0, len(b.records) - 1)] if b.records else None


def s_count(rng: Any, b: Batch, ctx: Any) -> str:
    n = len(b.records)
    b.count = rng.choice([n + 1, n - 1, n + _small(rng, 2, 5000), 0, -1, INT32_MAX, INT32_MIN, 2 * n + 1,
                          _s32(rng.getrandbits(32))])
    return f"recordsCount {n} -> {b.count}"


def s_cut_section(rng: Any, b: Batch, ctx: Any) -> str:
    sec = b.plain_section()
    k = 0 if rng.random() < 0.35 else rng.randint(0, max(0, len(sec) - 1))
    b.count = len(b.records) if b.count is None else b.count
    b.section = sec[:k]
    return f"records section cut to {k} of {len(sec)} bytes (count {b.count})"


def s_drop_records(rng: Any, b: Batch, ctx: Any) -> str:
    n = len(b.records)
    if not n:
        return s_cut_section(rng, b, ctx)
    k = rng.randint(1, n)
    b.count = n if b.count is None else b.count
    at = rng.randint(0, n - k)
    del b.records[at : at + k]
    return f"{k} of {n} records dropped, count kept at {b.count}"


def s_dup_records(rng: Any, b: Batch, ctx: Any) -> str:
    if not b.records:
        return s_count(rng, b, ctx)
    r = _rec(rng, b)
    k = _small(rng, 1, 200)
    keep_count = rng.random() < 0.5
    if keep_count:
        b.count = len(b.records) if b.count is None else b.count
    i = b.records.index(r)
    b.records[i:i] = [dataclasses.replace(r) for _ in range(k)]
    return f"record duplicated {k} times" + (" (count kept)" if keep_count else "")


def s_rec_length(rng: Any, b: Batch, ctx: Any) -> str:
    r = _rec(rng, b)
    if r is None:
        return s_count(rng, b, ctx)
    true = len(dataclasses.replace(r, length=0, pad={**r.pad, "length": 0}).encode()) - 1  # the body's length
    r.length = rng.choice([true + 1, true - 1, true + _small(rng, 2, 100), max(0, true - _small(rng, 2, 20)), 0, -1,
                           -2, INT32_MAX, INT32_MIN, 1 << 40])
    return f"record length -> {r.length}"


def s_offset_delta(rng: Any, b: Batch, ctx: Any) -> str:
    r = _rec(rng, b)
    if r is None:
        return s_count(rng, b, ctx)
    r.off_delta = rng.choice([-1, -2, INT32_MAX, INT32_MIN, 1 << 31, 1 << 40, -(1 << 40), r.off_delta + 1,
                              r.off_delta - 1, 0, rng.randint(-1000, 1000), b.last_offset_delta + 1])
    return f"offsetDelta -> {r.off_delta}"


def s_offsets_shuffle(rng: Any, b: Batch, ctx: Any) -> str:
    if len(b.records) < 2:
        return s_offset_delta(rng, b, ctx)
    ds = [r.off_delta for r in b.records]
    how = rng.randint(0, 2)
    if how == 0:
        ds.reverse()
    elif how == 1:
        ds = [ds[0]] * len(ds)
    else:
        ds = [d * 1000 for d in ds]
    for r, d in zip(b.records, ds):
        r.off_delta = d
    return f"offset deltas {('reversed', 'all equal', 'x1000')[how]}"


def s_timestamps(rng: Any, b: Batch, ctx: Any) -> str:
    what = rng.randint(0, 3)
    v = rng.choice(I64 + [_s64(rng.getrandbits(64)), 10 ** 16 + rng.randint(0, 10 ** 17)])
    if what == 0:
        b.max_timestamp = v
        return f"maxTimestamp -> {v}"
    if what == 1:
        b.base_timestamp = v
        return f"baseTimestamp -> {v}"
    if what == 2:
        b.base_timestamp = b.max_timestamp = v
        return f"base and max timestamp -> {v}"
    r = _rec(rng, b)
    if r is None:
        b.max_timestamp = v
        return f"maxTimestamp -> {v}"
    r.ts_delta = rng.choice([v, 1 << 63, 1 << 64, -(1 << 64)])
    return f"timestampDelta -> {r.ts_delta}"


def s_last_offset_delta(rng: Any, b: Batch, ctx: Any) -> str:
    n = len(b.records)
    b.last_offset_delta = rng.choice([n, n - 2, -1, -2, INT32_MAX, INT32_MIN, 0, _s32(rng.getrandbits(32)), 1 << 20])
    return f"lastOffsetDelta -> {b.last_offset_delta}"


def s_batch_attributes(rng: Any, b: Batch, ctx: Any) -> str:
    a = b.attributes
    op = rng.randint(0, 7)
    if op == 0:
        b.attributes = a ^ 0x08          # timestamp type
    elif op == 1:
        b.attributes = a ^ 0x10          # transactional
    elif op == 2:
        b.attributes = a ^ 0x20          # control bit
    elif op == 3:
        b.attributes = a ^ 0x40          # delete horizon
    elif op == 4:
        b.attributes = (a & ~0x07) | rng.randint(5, 7)   # unknown codec id
    elif op == 5:
        b.attributes = (a & ~0x07) | rng.randint(1, 4)   # says compressed, section left plain
        b.compress_with = 0
    elif op == 6:
        b.attributes = a | rng.choice([0x80, 0x100, 0x4000, -0x8000])
    else:
        b.attributes = rng.choice(I16 + [rng.randint(-0x8000, 0x7FFF)])
    return f"attributes {a:#x} -> {b.attributes:#x}"


def s_compress(rng: Any, b: Batch, ctx: Any) -> str:
    codec = rng.randint(1, 4)
    b.attributes = (b.attributes & ~0x07) | codec
    b.compress_with = None
    what = f"records recompressed with codec {codec}"
    roll = rng.random()
    if roll < 0.25:
        sec_len = len(compress(codec, b.plain_section()))
        b.cut = rng.randint(0, max(0, sec_len - 1))
        what += f", compressed section cut to {b.cut} of {sec_len} bytes"
    elif roll < 0.5:
        b.flip = rng.getrandbits(20)
        what += f", compressed bit {b.flip % 8} of byte #{b.flip} flipped"
    elif roll < 0.6:
        b.tail = rng.randbytes(_small(rng, 1, 8))
        what += f", {len(b.tail)} trailing bytes inside"
    return what


def s_rec_attributes(rng: Any, b: Batch, ctx: Any) -> str:
    r = _rec(rng, b)
    if r is None:
        return s_count(rng, b, ctx)
    r.attributes = rng.choice([1, 0x80, 0xFF, rng.randint(0, 255)])
    return f"record attributes -> {r.attributes:#x}"


def s_key(rng: Any, b: Batch, ctx: Any) -> str:
    r = _rec(rng, b)
    if r is None:
        return s_count(rng, b, ctx)
    if b.attributes & 0x20:
        r.key = rng.choice([None, b"", b"\x00\x00", b"\xff\xff\x00\x03", b"\x00\x00\x00\x00", b"\x00\x00\x00\x01",
                            b"\x00\x00\x7f\xff", b"\x00\x05\x00\x02", (r.key or b"") + b"\x00", rng.randbytes(4)])
    else:
        r.key = rng.choice([b"", b"k", rng.randbytes(_small(rng, 1, 40))])
    return f"key -> {r.key!r}"


_FRAME_EDITS = [b"\x00", b"\x02", b"\x7f", b"\x01\x06\x00", b"\x01\x0d\x00", b"\x01\x10\x00", b"\x01\x63\x00",
                b"\x01\xff\xff\x03\x00", b"\x01\x14\x7f", b"\x01\x14\xff\xff\x03", b"\x01\x03\x09"]


def s_value(rng: Any, b: Batch, ctx: Any) -> str:
    r = _rec(rng, b)
    if r is None:
        return s_count(rng, b, ctx)
    v = r.value or b""
    op = rng.randint(0, 8)
    if op == 0:
        r.value = None
    elif op == 1:
        r.value = b""
    elif op == 2:
        r.value = v[: rng.randint(0, max(0, len(v) - 1))]
    elif op == 3:
        r.value = v + rng.randbytes(_small(rng, 1, 8))
    elif op == 4:
        r.value = rng.randbytes(_small(rng, 1, 64))
    elif op == 5:  # frame version / api key / record version changed
        e = rng.choice(_FRAME_EDITS)
        r.value = e + v[3:] if len(e) >= 3 else e + v[1:]
    elif op == 6:  # a value of another record of the window (other type, or a control value)
        others = ctx()
        r.value = rng.choice(others) if others else b"\x01\x14\x00\x00"
    elif op == 7 and v:
        bv = bytearray(v)
        for _ in range(_small(rng, 1, 4)):
            bv[rng.randint(0, len(bv) - 1)] = rng.choice([0, 0xFF, 0x80, 0x7F, rng.randint(0, 255)])
        r.value = bytes(bv)
    else:
        r.value = b"\x01\x14\x00\x00"  # a clean NoOpRecord
    return f"value op {op} -> {len(r.value) if r.value is not None else None} bytes"


def s_headers(rng: Any, b: Batch, ctx: Any) -> str:
    r = _rec(rng, b)
    if r is None:
        return s_count(rng, b, ctx)
    if rng.random() < 0.3:
        r.header_count = rng.choice([-1, -2, 1, 2, INT32_MAX, INT32_MIN])
        return f"header count -> {r.header_count}"
    r.headers = [(rng.choice([b"h", b"", b"\xff\xfe", rng.randbytes(3)]), rng.choice([None, b"", b"v"]))
                 for _ in range(_small(rng, 1, 3))]
    return f"{len(r.headers)} headers added"


def s_overlong(rng: Any, b: Batch, ctx: Any) -> str:
    r = _rec(rng, b)
    if r is None:
        return s_count(rng, b, ctx)
    f = rng.choice(["length", "ts", "off", "klen", "vlen", "hcount"])
    r.pad[f] = rng.choice([1, 1, 2, 3, 4, 5, 9, 10])
    return f"{f} varint over-long by {r.pad[f]} bytes"


def s_extra(rng: Any, b: Batch, ctx: Any) -> str:
    if rng.random() < 0.5 and b.records:
        r = _rec(rng, b)
        r.extra = rng.randbytes(_small(rng, 1, 6))
        return f"{len(r.extra)} bytes inside a record after its headers"
    b.tail = rng.choice([b"\x00", rng.randbytes(_small(rng, 1, 16)), b.records[0].encode() if b.records else b"\x00"])
    return f"{len(b.tail)} bytes after the last record"


def s_producer(rng: Any, b: Batch, ctx: Any) -> str:
    b.producer_id = rng.choice(I64)
    b.producer_epoch = rng.choice(I16)
    b.base_sequence = rng.choice(I32)
    return "producer fields"


def s_amplify(rng: Any, b: Batch, ctx: Any) -> str:
    """Thousands of tiny records in one batch (mostly compressed: a few hundred bytes on disk)."""
    n = rng.choice([50, 300, 1000, 3000, 10_000, 10_000, 30_000])
    value = rng.choice([b"", None, b"\x01\x14\x00\x00", b"\x01", b"\x00\x14\x00\x00"])
    b.records = []
    v = b"\x01" if value is None else svarint(len(value)) + value
    if rng.random() < 0.5:  # every offset delta 0: compresses to almost nothing
        body = b"\x00\x00\x00\x01" + v + b"\x00"
        b.section = (svarint(len(body)) + body) * n
    else:
        b.section = b"".join(svarint(len(body)) + body for body in (b"\x00\x00" + d + b"\x01" + v + b"\x00"
                                                                    for d in _deltas(n)))
    b.last_offset_delta = n - 1
    b.count = n
    if rng.random() < 0.15:
        b.attributes &= ~0x07
    else:
        b.attributes = (b.attributes & ~0x07) | rng.choice([1, 1, 2, 3, 4])
    b.compress_with = None
    return f"{n} records of value {value!r}, codec {b.attributes & 7}"


@functools.lru_cache(maxsize=4)
def _deltas(n: int) -> list[bytes]:
    """Offset deltas 0..n-1 as varints."""
    return [svarint(i) for i in range(n)]


def s_base_offset(rng: Any, b: Batch, ctx: Any) -> str:
    """baseOffset is outside the CRC: any value keeps the batch CRC-valid."""
    n = max(1, len(b.records))
    b.base_offset = rng.choice([INT64_MAX, INT64_MAX - rng.randint(0, n), INT64_MAX - n + 1, INT64_MIN, -1, -n,
                                INT64_MIN + rng.randint(0, n), 1 << 62, -(rng.getrandbits(40) + 1), (1 << 63) - 1_000_000])
    return f"baseOffset -> {b.base_offset}"


def s_epoch_magic(rng: Any, b: Batch, ctx: Any) -> str:
    """partitionLeaderEpoch and magic are outside the CRC."""
    if rng.random() < 0.5:
        b.leader_epoch = rng.choice(I32)
        return f"leader epoch -> {b.leader_epoch}"
    b.magic = rng.choice([0, 1, 3, -1, 0x7F])
    return f"magic -> {b.magic}"


SEMANTIC = {
    "count": (s_count, 6), "cut_section": (s_cut_section, 6), "drop_records": (s_drop_records, 3),
    "dup_records": (s_dup_records, 2), "rec_length": (s_rec_length, 4), "offset_delta": (s_offset_delta, 4),
    "offsets_shuffle": (s_offsets_shuffle, 1), "timestamps": (s_timestamps, 5), "last_offset_delta": (s_last_offset_delta, 3),
    "batch_attributes": (s_batch_attributes, 4), "compress": (s_compress, 6), "rec_attributes": (s_rec_attributes, 1),
    "key": (s_key, 3), "value": (s_value, 6), "headers": (s_headers, 2), "overlong": (s_overlong, 3), "extra": (s_extra, 3),
    "producer": (s_producer, 1), "amplify": (s_amplify, 0.6), "base_offset": (s_base_offset, 5),
    "epoch_magic": (s_epoch_magic, 2),
}


# ---------------------------------------------------------------------------------- raw mutations
# Each takes (rng, bytearray) and edits it in place (no CRC recomputed unless said so).

def _a_batch(rng: Any, buf: bytearray) -> tuple[int, int] | None:
    framed, _ = frame(bytes(buf))
    return framed[rng.randint(0, len(framed) - 1)] if framed else None


def r_flip(rng: Any, buf: bytearray) -> str:
    k = _small(rng, 1, 8)
    for _ in range(k):
        if buf:
            buf[rng.randint(0, len(buf) - 1)] ^= 1 << rng.randint(0, 7)
    return f"{k} bit flips"


def r_set(rng: Any, buf: bytearray) -> str:
    k = _small(rng, 1, 4)
    for _ in range(k):
        if buf:
            buf[rng.randint(0, len(buf) - 1)] = rng.choice([0, 0xFF, 0x7F, 0x80, 0x01, 0x02, rng.randint(0, 255)])
    return f"{k} bytes set"


def r_truncate(rng: Any, buf: bytearray) -> str:
    framed, _ = frame(bytes(buf))
    if framed and rng.random() < 0.5:  # near a batch boundary
        p, s = framed[rng.randint(0, len(framed) - 1)]
        cut = max(0, min(len(buf), p + s + rng.randint(-70, 20)))
    else:
        cut = rng.randint(0, len(buf))
    del buf[cut:]
    return f"truncated at {cut}"


def r_insert(rng: Any, buf: bytearray) -> str:
    at = rng.randint(0, len(buf))
    k = _small(rng, 1, 64)
    run = rng.choice([rng.randbytes(k), b"\x00" * k, b"\xff" * k, bytes(buf[at : at + k])])
    buf[at:at] = run
    return f"{len(run)} bytes inserted at {at}"


def r_delete(rng: Any, buf: bytearray) -> str:
    at = rng.randint(0, max(0, len(buf) - 1))
    k = _small(rng, 1, 64)
    del buf[at : at + k]
    return f"{k} bytes deleted at {at}"


def r_splice(rng: Any, buf: bytearray) -> str:
    if len(buf) < 2:
        return r_insert(rng, buf)
    a = rng.randint(0, len(buf) - 1)
    k = _small(rng, 1, 200)
    piece = bytes(buf[a : a + k])
    at = rng.randint(0, len(buf))
    if rng.random() < 0.5:
        buf[at : at + len(piece)] = piece
        return f"{len(piece)} bytes from {a} copied over {at}"
    buf[at:at] = piece
    return f"{len(piece)} bytes from {a} inserted at {at}"


def r_field(rng: Any, buf: bytearray) -> str:
    """An extreme header field; the CRC recomputed (half the time) when the field is covered by it."""
    hit = _a_batch(rng, buf)
    if hit is None:
        return r_flip(rng, buf)
    p, size = hit
    name = _pick(rng, [("batch_length", 4), ("base_offset", 3), ("last_offset_delta", 3), ("records_count", 3),
                       ("max_timestamp", 3), ("attributes", 1), ("base_timestamp", 1), ("magic", 1), ("leader_epoch", 1)])
    off, fmt, covered = FIELDS[name]
    if name == "batch_length":
        v = rng.choice(I32 + [size - 12 + d for d in (-1, 1, -2, 2, 64, -49, 1000, 1 << 20)])
    elif fmt == ">q":
        v = rng.choice(I64)
    elif fmt == ">i":
        v = rng.choice(I32)
    elif fmt == ">h":
        v = rng.choice(I16)
    else:
        v = rng.choice(I8)
    if p + off + struct.calcsize(fmt) > len(buf):
        return r_flip(rng, buf)
    v = _wrap(v, 8 * struct.calcsize(fmt))
    struct.pack_into(fmt, buf, p + off, v)
    fix = covered and rng.random() < 0.5
    if fix:
        struct.pack_into(">I", buf, p + 17, crc32c(bytes(buf[p + 21 : p + size])))
    return f"{name} of the batch at {p} -> {v}" + (" (CRC recomputed)" if fix else "")


RAW = {
    "flip": (r_flip, 4), "set": (r_set, 2), "truncate": (r_truncate, 3), "insert": (r_insert, 2),
    "delete": (r_delete, 2), "splice": (r_splice, 1), "field": (r_field, 5),
}


# ------------------------------------------------------------------------------------- the maker

_BIG_BATCH = 8 * 1024


def _window(rng: Any, src: Source) -> tuple[int, int]:
    nb = len(src.starts) - 1
    k = _pick(rng, [(rng.randint(1, 4), 0.55), (rng.randint(5, 15), 0.2), (rng.randint(16, 48), 0.25)])
    k = min(k, nb)
    i = rng.randint(0, nb - k)
    return i, i + k


_PARSED: dict[tuple[str, int], Batch | None] = {}  # big batches of the real files, parsed once


def _piece_of(rng: Any, src: Source, k: int) -> tuple[Batch | None, str]:
    """Big batch ``k`` of ``src`` cut down to a CRC-valid batch of a slice of its records (offset
    deltas renumbered)."""
    key = (src.name, k)
    if key not in _PARSED:
        _PARSED[key] = Batch.parse(src.data[src.starts[k] : src.starts[k + 1]])
    whole = _PARSED[key]
    if whole is None or not whole.records:
        return None, ""
    n = len(whole.records)
    m = _small(rng, 1, min(n, 40))
    at = rng.randint(0, n - m)
    recs = [dataclasses.replace(r, off_delta=j, headers=list(r.headers), pad={}) for j, r in enumerate(whole.records[at : at + m])]
    return dataclasses.replace(whole, records=recs, last_offset_delta=m - 1), f"records {at}..{at + m - 1} of {n} as one batch"


def make_case(rng: Any, sources: list[Source], semantic: bool = True, raw: bool = True) -> Case:
    """A hostile input from a random window of a random real file (see the module docstring);
    ``semantic``/``raw``: which kinds of mutation may be applied (at least one is)."""
    src = _pick(rng, [(s, 3.0 if s.file_kind == "segment" else 1.0) for s in sources])
    i, j = _window(rng, src)
    raws = [src.data[src.starts[k] : src.starts[k + 1]] for k in range(i, j)]
    steps = [f"{src.name} batches {i}..{j - 1} ({src.starts[j] - src.starts[i]} bytes at {src.starts[i]})"]
    edited: dict[int, Batch] = {}

    def batch(k: int) -> Batch | None:
        if k not in edited:
            b = Batch.parse(raws[k])
            if b is None:
                return None
            edited[k] = b
        return edited[k]

    for k, one in enumerate(raws):
        if len(one) > _BIG_BATCH and rng.random() < 0.9:
            b, what = _piece_of(rng, src, i + k)
            if b is not None:
                edited[k] = b
                steps.append(f"batch {i + k}: {what}")
    n_sem = _pick(rng, [(0, 0.3), (1, 0.45), (2, 0.17), (3, 0.08)]) if semantic else 0
    if semantic and not raw:
        n_sem = max(1, n_sem)
    for _ in range(n_sem):
        k = len(raws) - 1 if rng.random() < 0.35 else rng.randint(0, len(raws) - 1)  # the buffer's last batch often
        b = batch(k)
        if b is None:
            continue
        name = _pick(rng, [(nm, w) for nm, (_, w) in SEMANTIC.items()])

        def others(k: int = k) -> list[bytes]:
            """Values of the window's other (small) batches."""
            bs = [batch(x) for x in range(len(raws)) if x != k and len(raws[x]) <= _BIG_BATCH]
            return [r.value for o in bs if o is not None for r in o.records if r.value]

        steps.append(f"batch {i + k}: {name}: " + SEMANTIC[name][0](rng, b, others))
    buf = bytearray(b"".join(edited[k].encode() if k in edited else raws[k] for k in range(len(raws))))
    n_raw = _pick(rng, [(0, 0.55), (1, 0.3), (2, 0.1), (3, 0.05)]) if raw else 0
    if n_sem == 0 and n_raw == 0 and not edited and raw:
        n_raw = 1
    for _ in range(n_raw):
        name = _pick(rng, [(nm, w) for nm, (_, w) in RAW.items()])
        steps.append(f"raw {name}: " + RAW[name][0](rng, buf))
    buf = bytes(buf)
    # the split decode: a quarter in one call (the accelerated whole decode), else a cut inside the
    # input, mostly in its second half (the first call still holds a run of batches); the read past
    # the cut mostly holds the rest (as production's 256 KiB do), else it is short and may be retried
    hi = max(1, len(buf) - 1)
    roll = rng.random()
    piece = len(buf) if roll < 0.25 else rng.randint(max(1, hi // 2), hi) if roll < 0.75 else rng.randint(1, hi)
    slack = len(buf) if rng.random() < 0.6 else rng.choice([0, 1, rng.randint(0, 200), rng.randint(0, 4096)])
    return Case(buf, src.file_kind, src.snapshot_end_offset, src.snapshot_epoch, src.starts[i], piece, slack,
                src.name, steps)


# ----------------------------------------------------------------------------------- the decoder

DECODER_NAME = "kraft_replay.ingest.bronze.decode_to_arrow"


def split_decode(case: Case, accelerate: bool = True) -> list[Any]:
    """The chunks of ``kraft_replay.ingest.pipeline._decode_range`` over the whole input (a task
    owning ``[0, len)`` and reading ``piece + slack`` bytes at a time, ``stop=piece``,
    ``at_eof`` only when the read reaches the end; a call that consumes nothing is retried with a
    longer read), with the case's small ``piece``/``slack`` instead of 4 MiB / 256 KiB."""
    buf, end = case.buf, len(case.buf)
    kw = case.decode_kwargs()
    out = []
    pos, slack = 0, case.slack
    calls = 0
    while pos < end:
        piece = min(case.piece, end - pos)
        hi = min(end, pos + piece + slack)
        eof = hi >= end
        c = DECODE(buf[pos:hi], base_position=case.base_position + pos, stop=piece, at_eof=eof, accelerate=accelerate, **kw)
        calls += 1
        if calls > 4 * end + 64:
            raise RuntimeError("split decode does not progress")
        if c.consumed == 0:
            if eof:
                raise RuntimeError(f"split decode: nothing consumed at {pos} with at_eof=True")
            slack = 2 * (piece + slack)
            continue
        slack = case.slack
        out.append(c)
        pos += c.consumed
    return out


# ----------------------------------------------------------------------------------- the checker

_ROW_TABLES = ("log", "control", "snapshot")


def _col(batch: pa.RecordBatch, name: str) -> list:
    return batch.column(name).to_pylist() if name in batch.schema.names else [None] * batch.num_rows


def _header(buf: bytes, p: int, size: int) -> dict[str, Any]:
    """Fields of the batch at ``p`` (Python ints) and whether its CRC-32C verifies."""
    h: dict[str, Any] = {"magic": buf[p + 16]}
    if size >= HEADER_SIZE:
        (h["base"], _, h["epoch"], _, crc, h["attrs"], h["ldelta"], _, h["maxts"], _, _, _, h["count"]) = _HDR.unpack_from(buf, p)
        h["crc_ok"] = crc32c(buf[p + 21 : p + size]) == crc
    else:
        h["crc_ok"] = False
    # declared records: known when the batch is a CRC-valid v2 batch with a non-negative count
    h["declared"] = h["count"] if h["magic"] == 2 and h["crc_ok"] and h["count"] >= 0 else None
    return h


def accounting(case: Case, chunk: Any, label: str = "") -> list[str]:
    """Problems of one decode of the whole input (see :func:`check` for the rules)."""
    buf, base = case.buf, case.base_position
    n = len(buf)
    framed, tail = frame(buf)
    probs: list[str] = []
    where = f" [{label}]" if label else ""
    starts = [p for p, _ in framed]
    heads = {p: _header(buf, p, s) for p, s in framed}
    sizes = dict(framed)

    def batch_of(pos: int) -> int | None:
        """The framed batch holding input position ``pos``, or None (the tail / outside the input)."""
        k = bisect.bisect_right(starts, pos) - 1
        return starts[k] if k >= 0 and pos < starts[k] + sizes[starts[k]] else None

    # decoded rows per batch start
    rows: Counter = Counter()
    for t in _ROW_TABLES:
        rb = getattr(chunk, t)
        if not rb.num_rows:
            continue
        pos_col = _col(rb, "source_position")
        for p in pos_col:
            rows[p - base] += 1
        probs += _values(case, t, rb, heads, where)
    for p, k in rows.items():
        if p not in heads:
            probs.append(f"accounting (rows): {k} decoded rows at position {base + p}, which is not the start of a framed batch{where}")
    # quarantine rows
    q = chunk.quarantine
    qpos = [p - base for p in _col(q, "source_position")]
    qlen = _col(q, "length")
    qraw = _col(q, "raw")
    qcode = _col(q, "reason_code")
    qrec = _col(q, "records")
    by_batch: dict[int, list[int]] = {}
    in_tail: list[int] = []
    for i, (p, ln, code) in enumerate(zip(qpos, qlen, qcode)):
        if code not in REASON_CODES:
            probs.append(f"accounting (bytes): quarantine reason code {code!r} is not one of REASON_CODES{where}")
        if ln is None or ln < 0 or qraw[i] is None or len(qraw[i]) != ln:
            probs.append(f"accounting (bytes): quarantine row at {base + p}: length {ln} but {None if qraw[i] is None else len(qraw[i])} raw bytes{where}")
            continue
        if p >= tail and tail < n:
            in_tail.append(i)
            continue
        s = batch_of(p)
        if s is None or p + ln > s + sizes[s]:
            probs.append(f"accounting (bytes): quarantine row [{base + p}, {base + p + ln}) is not inside one framed batch "
                         f"nor the unframeable tail at {base + tail}{where}")
            continue
        by_batch.setdefault(s, []).append(i)
    # every framed batch: its declared records are decoded rows or counted by its quarantine rows
    for p, size in framed:
        h = heads[p]
        qs = by_batch.get(p, [])
        got = rows.get(p, 0)
        declared = h["declared"]
        whole = [i for i in qs if qpos[i] == p and qlen[i] == size]
        codes = Counter(qcode[i] for i in qs)
        if any(k > 1 for k in codes.values()):
            probs.append(f"amplification: {len(qs)} quarantine rows for the batch at {base + p} ({size} bytes, "
                         f"{declared} declared records, reasons {dict(codes)}); one row per bad range and reason{where}")
        for i in whole:
            if qraw[i] != buf[p : p + size]:
                probs.append(f"accounting (bytes): raw bytes of the quarantine row of the batch at {base + p} are not the batch{where}")
        if declared is None:
            if got:
                why = "its CRC-32C fails" if h["magic"] == 2 and size >= HEADER_SIZE else f"magic {h['magic']}"
                probs.append(f"accounting (rows): {got} rows decoded from the batch at {base + p} although {why}{where}")
            if len(whole) != 1:
                probs.append(f"accounting (bytes): the undecodable batch at {base + p} ({size} bytes) is not covered by one "
                             f"quarantine row of its whole range{where}")
            continue
        counted = [qrec[i] for i in qs]
        if any(c is None or c < 0 for c in counted):
            probs.append(f"accounting (records): quarantine row of the CRC-valid batch at {base + p} has records {counted}, "
                         f"its declared count is {declared}{where}")
            continue
        quarantined = sum(counted)
        if got + quarantined != declared:
            probs.append(f"accounting (records): batch at {base + p} declares {declared} records; {got} decoded + "
                         f"{quarantined} quarantined{where}")
    # the unframeable tail: tiled by quarantine rows
    if tail < n:
        spans = sorted((qpos[i], qlen[i]) for i in in_tail)
        at = tail
        for p, ln in spans:
            if p != at:
                break
            at = p + ln
        if at != n or not spans:
            probs.append(f"accounting (bytes): unframeable bytes [{base + tail}, {base + n}) are not tiled by quarantine rows "
                         f"(rows there: {[(base + p, ln) for p, ln in spans][:4]}){where}")
        elif any(qrec[i] is not None and qrec[i] < 0 for i in in_tail):
            probs.append(f"accounting (records): negative records count on the tail's quarantine row{where}")
    # statistics
    st = chunk.stats
    nrows = sum(getattr(chunk, t).num_rows for t in _ROW_TABLES)
    if st.records != nrows:
        probs.append(f"accounting (stats): stats.records {st.records} but {nrows} rows{where}")
    if st.quarantined != q.num_rows:
        probs.append(f"accounting (stats): stats.quarantined {st.quarantined} but {q.num_rows} quarantine rows{where}")
    total = sum(r for r in qrec if r is not None)
    if st.quarantined_records != total:
        probs.append(f"accounting (stats): stats.quarantined_records {st.quarantined_records} but the rows sum to {total}{where}")
    if chunk.consumed != n:
        probs.append(f"accounting (stats): consumed {chunk.consumed} of {n} bytes at the end of the file{where}")
    return probs


def _values(case: Case, table: str, rb: pa.RecordBatch, heads: dict[int, dict[str, Any]], where: str) -> list[str]:
    """Decoded rows against the header of their batch: nothing wrapped, nothing negative."""
    base = case.base_position
    probs: list[str] = []
    pos = _col(rb, "source_position")
    off = _col(rb, "offset" if table != "snapshot" else "position_in_snapshot")
    bbase = _col(rb, "batch_base_offset")
    blast = _col(rb, "batch_last_offset") if table != "snapshot" else None
    epoch = _col(rb, "batch_leader_epoch") if table != "snapshot" else None
    bucket = _col(rb, "offset_bucket") if table == "log" else None
    times = rb.column("append_time").cast(pa.int64()).to_pylist()
    seen: dict[str, str] = {}  # one problem per kind and table is enough
    for j in range(rb.num_rows):
        h = heads.get(pos[j] - base)
        if h is None or "base" not in h:
            continue  # reported by the accounting
        bad = []
        if off[j] is None or off[j] < 0 or h["base"] < 0:
            bad.append(("negative offset", f"offset {off[j]} from baseOffset {h['base']}"))
        if times[j] != h["maxts"] * 1000:
            bad.append(("append_time", f"append_time {times[j]} us but maxTimestamp is {h['maxts']} ms"))
        if bbase[j] != h["base"]:
            bad.append(("batch offsets", f"batch_base_offset {bbase[j]} != baseOffset {h['base']}"))
        if blast is not None and blast[j] != h["base"] + h["ldelta"]:
            bad.append(("batch offsets", f"batch_last_offset {blast[j]} != {h['base']} + {h['ldelta']}"))
        if epoch is not None and epoch[j] != h["epoch"]:
            bad.append(("batch offsets", f"batch_leader_epoch {epoch[j]} != {h['epoch']}"))
        if bucket is not None and off[j] is not None and bucket[j] != off[j] // 1_000_000:
            bad.append(("batch offsets", f"offset_bucket {bucket[j]} for offset {off[j]}"))
        for kind, text in bad:
            seen.setdefault(kind, f"wrong value ({kind}): {table} row of the batch at {pos[j]}: {text}{where}")
    return list(seen.values())


def _diff(a: Any, b: Any, what: str) -> list[str]:
    """Differences between two decodes (DecodedChunk, or lists of chunks for the split decode); with an
    empty ``what``, only whether there is one (empty list: none)."""
    probs = []
    for t in (*_ROW_TABLES, "quarantine"):
        if isinstance(a, list):
            ta = pa.Table.from_batches([getattr(c, t) for c in a], schema=getattr(b, t).schema) if a else None
        else:
            ta = pa.Table.from_batches([getattr(a, t)])
        tb = pa.Table.from_batches([getattr(b, t)])
        if ta is None:
            if tb.num_rows:
                probs.append(f"{what}: no chunks but {tb.num_rows} {t} rows")
            continue
        if ta.schema != tb.schema:
            probs.append(f"{what}: {t} schemas differ")
            continue
        if ta.num_rows != tb.num_rows:
            probs.append(f"{what}: {ta.num_rows} vs {tb.num_rows} {t} rows")
            continue
        if not ta.equals(tb):
            cols = [nm for nm in ta.column_names if not ta.column(nm).equals(tb.column(nm))]
            probs.append(f"{what}: {t} rows differ in {cols[:5]}")
    sb = _stats_sum([b])
    sa = _stats_sum(a if isinstance(a, list) else [a]) if a != [] else {k: None if k.endswith("_offset") else 0 for k in sb}
    if sa != sb:
        keys = [k for k in sa if sa[k] != sb.get(k)]
        probs.append(f"{what}: stats differ in {keys}: {[sa[k] for k in keys]} vs {[sb.get(k) for k in keys]}")
    return probs


def _stats_sum(chunks: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in chunks:
        for f in dataclasses.fields(c.stats):
            v = getattr(c.stats, f.name)
            if f.name == "first_offset":
                out[f.name] = v if out.get(f.name) is None else (out[f.name] if v is None else min(v, out[f.name]))
            elif f.name == "last_offset":
                out[f.name] = v if out.get(f.name) is None else (out[f.name] if v is None else max(v, out[f.name]))
            else:
                out[f.name] = out.get(f.name, 0) + (v or 0)
    out["consumed"] = sum(c.consumed for c in chunks)
    return out


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:160]}"


def check(case: Case, timings: list[float] | None = None, full: bool = False) -> list[str]:
    """Every broken promise of the decoder on ``case``, as ``"<class>: <detail>"`` (empty: none).

    The input is decoded three ways: accelerated (``accelerate=True``), reference
    (``accelerate=False``) and split (:func:`split_decode`, accelerated). Classes and rules:

    * ``uncaught <Error>``: a decode raised.
    * ``accounting (rows|records|bytes|stats)`` (checked on the reference decode and, when it
      differs, on the accelerated one). The
      input is framed as facts §1.6 says (:func:`frame`): from byte 0, a batch occupies
      ``12 + batchLength`` bytes; 17 or fewer bytes left, a batchLength below 14 (below 49 with magic
      2) or a batch running past the end end the chain, and ``[tail, end)`` is the unframeable tail.
      A framed batch's *declared records* are its recordsCount when it is a magic-2 batch of at
      least 61 bytes whose CRC-32C verifies and whose count is >= 0; otherwise they are unknown.
      Rows belong to a batch by ``source_position`` (input position + ``base_position``):

      - every decoded row (log, control, snapshot) is at the start of a framed batch;
      - every quarantine row lies inside one framed batch or inside the tail, has a known reason
        code and ``len(raw) == length``; a row covering a whole batch holds its bytes;
      - a batch with known declared records D: decoded rows + the ``records`` of its quarantine
        rows (none null) = D;
      - a batch with unknown declared records: no decoded rows, and one quarantine row covers
        exactly its range (its ``records`` is not checked);
      - the tail is tiled exactly by quarantine rows;
      - ``stats.records`` = decoded rows, ``stats.quarantined`` = quarantine rows,
        ``stats.quarantined_records`` = the sum of ``records``, ``consumed`` = the input length.
    * ``amplification``: two quarantine rows of one framed batch with the same reason code (the
      contract: one row per bad batch range and reason, not per record).
    * ``wrong value (negative offset)``: a decoded row whose offset or batch baseOffset is negative;
      ``wrong value (append_time)``: ``append_time`` is not exactly maxTimestamp ms in us (a
      maxTimestamp whose microseconds do not fit an int64 cannot be a row); ``wrong value (batch
      offsets)``: ``batch_base_offset`` / ``batch_last_offset`` (baseOffset + lastOffsetDelta,
      exact) / ``batch_leader_epoch`` / ``offset_bucket`` is not the header's value.
    * ``accelerated != reference``: the four batches or the statistics of the accelerated whole
      decode differ from the reference's.
    * ``split != whole``: the concatenated chunks of the split decode differ from the whole decode
      (rows, statistics summed), or the split loop does not progress.

    ``full=False`` (the campaign) saves a decode: the split decode (accelerated: the production loop;
    a quarter of the cases make it one call, the accelerated whole decode) is compared with the
    reference, and only when they differ (or one raised) is the accelerated whole decode run to say
    which of the two rules broke. ``full=True`` always decodes all three ways.

    ``timings`` receives the duration of the split decode (all its calls, seconds).
    """
    kw = case.decode_kwargs()
    probs: list[str] = []
    ref = acc = chunks = None
    try:
        ref = DECODE(case.buf, base_position=case.base_position, accelerate=False, **kw)
    except Exception as exc:  # noqa: BLE001 - the promise is that nothing escapes
        probs.append(f"uncaught {type(exc).__name__}: reference decode: {_short(exc)}")
    if ref is not None:
        probs += accounting(case, ref, "reference")
    t0 = time.perf_counter()
    try:
        chunks = split_decode(case)
    except Exception as exc:  # noqa: BLE001
        if isinstance(exc, RuntimeError) and str(exc).startswith("split decode"):
            probs.append(f"split != whole: {exc}")
        else:
            probs.append(f"uncaught {type(exc).__name__}: split decode: {_short(exc)}")
    if timings is not None:
        timings.append(time.perf_counter() - t0)
    if full or chunks is None or ref is None or _diff(chunks, ref, ""):
        try:
            acc = DECODE(case.buf, base_position=case.base_position, accelerate=True, **kw)
        except Exception as exc:  # noqa: BLE001
            probs.append(f"uncaught {type(exc).__name__}: accelerated decode: {_short(exc)}")
    if acc is not None:
        d = _diff(acc, ref, "accelerated != reference") if ref is not None else []
        probs += d
        if d or ref is None:
            probs += accounting(case, acc, "accelerated")
    whole = acc if acc is not None else ref
    if chunks is not None and whole is not None:
        probs += _diff(chunks, whole, "split != whole")
    return probs


def problem_class(problem: str) -> str:
    return problem.split(":", 1)[0]


def classes(problems: list[str]) -> list[str]:
    return sorted({problem_class(p) for p in problems})


# ---------------------------------------------------------------------------- regression examples

def _real_batch(sources: list[Source], want_records: int, kind: str = "segment") -> tuple[Source, int, Batch]:
    """The first batch of a ``kind`` file with ``want_records`` records (exactly; data batch)."""
    for s in sources:
        if s.file_kind != kind:
            continue
        for k in range(len(s.starts) - 1):
            raw = s.data[s.starts[k] : s.starts[k + 1]]
            if int.from_bytes(raw[57:61], "big") == want_records and not raw[22] & 0x20:
                b = Batch.parse(raw)
                if b is not None:
                    return s, k, b
    raise LookupError(f"no {kind} batch of {want_records} records in the real files")


def _window_case(s: Source, k: int, before: int, after: int, edited: Batch, steps: list[str], **kw: Any) -> Case:
    lo, hi = max(0, k - before), min(len(s.starts) - 1, k + 1 + after)
    parts = [s.data[s.starts[x] : s.starts[x + 1]] if x != k else edited.encode() for x in range(lo, hi)]
    return Case(b"".join(parts), s.file_kind, s.snapshot_end_offset, s.snapshot_epoch, s.starts[lo],
                source=s.name, steps=[f"{s.name} batches {lo}..{hi - 1}", *steps], **kw)


def regression_cases(sources: list[Source]) -> dict[str, Case]:
    """One explicit input per class of issue 15, made with the mutators above."""
    out: dict[str, Case] = {}
    s, k, b = _real_batch(sources, 1)
    b.count, b.section = 1, b""
    out["empty records section, last batch of the buffer"] = _window_case(
        s, k, 2, 0, b, ["records section emptied, count 1, CRC recomputed"])
    s, k, b = _real_batch(sources, 1)
    b.count, b.section = 1, b""
    c = _window_case(s, k, 1, 2, b, ["records section emptied, count 1, CRC recomputed; split so that a read ends with it"])
    # the first split call reads exactly up to the end of the short batch: it is the last batch of that read
    first = len(s.data[s.starts[k - 1] : s.starts[k]]) if k >= 1 else 0
    c.piece, c.slack = first + 1, len(b.encode()) - 1
    out["empty records section at the end of a split read"] = c
    s, k, b = _real_batch(sources, 1)
    b.count, b.section = 1, b"\x00"
    out["one-byte records section, last batch of the buffer"] = _window_case(
        s, k, 1, 0, b, ["records section b'\\x00', count 1, CRC recomputed"])
    s, k, b = _real_batch(sources, 5)
    b.base_offset = INT64_MAX - 2
    out["base offset near 2^63-1 on a multi-record batch"] = _window_case(s, k, 1, 1, b, ["baseOffset 2^63-3"])
    s, k, b = _real_batch(sources, 1)
    b.base_offset = -5
    out["negative base offset"] = _window_case(s, k, 1, 1, b, ["baseOffset -5"])
    s, k, b = _real_batch(sources, 1)
    b.max_timestamp = 10 ** 16
    out["maxTimestamp 10^16 ms"] = _window_case(s, k, 1, 1, b, ["maxTimestamp 10^16, CRC recomputed"])
    s, k, b = _real_batch(sources, 1)
    n = 200_000
    b.records, b.count, b.section = [], n, Rec(0, 0, 0, None, b"").encode() * n
    b.last_offset_delta, b.attributes = n - 1, (b.attributes & ~0x07) | 1
    out["gzip batch of 200,000 empty values"] = _window_case(s, k, 0, 0, b, [f"{n} records with empty values, gzip"])
    return out
