"""Hostile batches (issue 15): the decoder never raises, refuses values it cannot hold, and its cost
stays bounded by the batch, not by what the batch claims.

Regression tests for the four classes found by mutating real segments:

1. a CRC-valid batch declaring one record whose records section is empty or shorter than the record,
   as the last batch of the buffer or of a task's read range (an ``IndexError`` once);
2. a base offset near 2^63 - 1 on a multi-record batch (outside the CRC; an ``OverflowError`` once), and
   negative offsets (accepted silently once);
3. a CRC-valid maxTimestamp of 10^16 ms (an int64-wrapped ``append_time`` once);
4. a 31 KB gzip batch of 3M records with empty values (3M quarantine rows and 1.4 GB once).

Each is checked on both decoder paths (``accelerate`` on and off) — in a run long enough for the batch
accelerator to look at it, and alone.
"""

from __future__ import annotations

import random
import struct
import zlib
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_replay.codec.batch import (
    MAX_BATCH_RECORDS,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    OFFSET_LIMIT,
    Record,
    build_batch,
    encode_records,
    iter_batches,
)
from kraft_replay.codec.crc import crc32c
from kraft_replay.codec.decode import DecodedRecords, decode_records
from kraft_replay.codec.errors import REASON_CODES
from kraft_replay.ingest.bronze import decode_to_arrow

NOOP = bytes.fromhex("01140000")
# a run of ordinary batches in front, long enough for the batch accelerator to classify the run
RUN = b"".join(build_batch([NOOP], base_offset=i, leader_epoch=1, timestamp_ms=1_700_000_000_000) for i in range(40))


def _batch(section: bytes, count: int, *, base: int = 100, last_delta: int | None = None, max_ts: int = 1_700_000_000_000,
           codec: int = 0, control: bool = False) -> bytes:
    """A v2 batch with this records section and header fields and a valid CRC-32C (facts §1.1-1.2)."""
    attrs = codec | (0x20 if control else 0)
    after_crc = struct.pack(">hiqqqhii", attrs, count - 1 if last_delta is None else last_delta, max_ts, max_ts,
                            -1, -1, -1, count) + section
    return struct.pack(">qiib", base, 49 + len(section), 1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc


def _section(n: int, value: bytes | None = NOOP, offset_delta: int | None = None) -> bytes:
    return encode_records([Record(value, i if offset_delta is None else offset_delta) for i in range(n)])


def _both(buf: bytes, **kw: object) -> DecodedRecords:
    """Decode with and without the accelerators; they must agree (rows, quarantine, stats)."""
    ref = decode_records(buf, accelerate=False, **kw)  # type: ignore[arg-type]
    fast = decode_records(buf, accelerate=True, **kw)  # type: ignore[arg-type]
    for name in ("data", "control", "quarantine"):
        assert getattr(fast, name).equals(getattr(ref, name)), name
    assert fast.stats == ref.stats and fast.consumed == ref.consumed
    for code in ref.quarantine.column("reason_code").to_pylist():
        assert code in REASON_CODES
    return ref


def _q(res: DecodedRecords) -> list[tuple]:
    return [(r["reason_code"], r["source_position"], r["length"], r["offset"], r["records"])
            for r in res.quarantine.to_pylist()]


# -- 1. a one-record batch whose records section is empty or short ---------------------------------

@pytest.mark.parametrize("section", [b"", b"\x0e", b"\x0e\x00", b"\x0e\x00\x00\x00\x01\x08\x01"], ids=len)
@pytest.mark.parametrize("prefix", [b"", RUN], ids=["alone", "after-a-run"])
def test_short_records_section_at_the_end_is_quarantined(section: bytes, prefix: bytes) -> None:
    bad = _batch(section, 1)
    buf = prefix + bad
    res = _both(buf)
    assert _q(res) == [("BAD_RECORD_FRAMING", len(prefix), len(bad), 100, 1)]
    assert res.data.num_rows == (40 if prefix else 0)
    assert res.quarantine.column("raw").to_pylist() == [bad]
    # at the end of a task's read range: not the end of the file, but the whole batch is there
    part = _both(buf, stop=len(prefix) + 1, at_eof=False)
    assert part.consumed == len(buf) and _q(part) == _q(res)
    # the batch cut off by the end of the read range: the call stops in front of it
    cut = _both(buf[:-1], at_eof=False)
    assert cut.consumed == len(prefix) and cut.quarantine.num_rows == 0


# -- 2. offsets ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("base", [(1 << 63) - 1, OFFSET_LIMIT, OFFSET_LIMIT - 1, -1, -(1 << 63)])
@pytest.mark.parametrize("prefix", [b"", RUN], ids=["alone", "after-a-run"])
def test_base_offsets_out_of_range_are_quarantined(base: int, prefix: bytes) -> None:
    bad = _batch(_section(3), 3, base=base)
    res = _both(prefix + bad)
    assert _q(res) == [("OFFSET_OUT_OF_RANGE", len(prefix), len(bad), base, 3)]
    assert res.stats.last_offset is None or res.stats.last_offset < (1 << 40)


def test_offsets_inside_the_range_decode() -> None:
    top = OFFSET_LIMIT - 3
    res = _both(RUN + _batch(_section(3), 3, base=top) + _batch(_section(2), 2, base=0))
    assert res.quarantine.num_rows == 0
    assert res.data.column("offset").to_pylist()[-5:] == [top, top + 1, top + 2, 0, 1]
    assert res.stats.last_offset == top + 2


def test_negative_last_offset_and_record_offsets_are_quarantined() -> None:
    last_negative = _batch(_section(2), 2, base=5, last_delta=-10)
    # the first record's offset delta takes it below 0; the batch's other records still decode
    below_zero = _batch(encode_records([Record(NOOP, -7), Record(NOOP, 0), Record(NOOP, 1)]), 3, base=5)
    # base inside the range, a record past it
    past_limit = _batch(encode_records([Record(NOOP, 0), Record(NOOP, 5)]), 2, base=OFFSET_LIMIT - 2, last_delta=1)
    res = _both(RUN + last_negative + below_zero + past_limit)
    at = len(RUN)
    assert _q(res) == [
        ("OFFSET_OUT_OF_RANGE", at, len(last_negative), 5, 2),
        ("OFFSET_OUT_OF_RANGE", at + len(last_negative), len(below_zero), -2, 1),
        ("OFFSET_OUT_OF_RANGE", at + len(last_negative) + len(below_zero), len(past_limit), OFFSET_LIMIT + 3, 1),
    ]
    assert res.data.column("offset").to_pylist()[-3:] == [5, 6, OFFSET_LIMIT - 2]


# -- 3. timestamps ------------------------------------------------------------------------------------

@pytest.mark.parametrize("ts", [10**16, MAX_TIMESTAMP_MS + 1, MIN_TIMESTAMP_MS - 1, -(1 << 63), (1 << 63) - 1])
@pytest.mark.parametrize("prefix", [b"", RUN], ids=["alone", "after-a-run"])
def test_timestamps_outside_a_delta_timestamp_are_quarantined(ts: int, prefix: bytes) -> None:
    bad = build_batch([NOOP, NOOP], base_offset=100, leader_epoch=1, timestamp_ms=ts)
    res = _both(prefix + bad)
    assert _q(res) == [("TIMESTAMP_OUT_OF_RANGE", len(prefix), len(bad), 100, 2)]


def test_timestamps_at_the_edges_decode_exactly() -> None:
    edges = [MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, -1, 0]
    buf = RUN + b"".join(build_batch([NOOP], base_offset=100 + i, leader_epoch=1, timestamp_ms=t) for i, t in enumerate(edges))
    chunk = decode_to_arrow(buf, cluster_id="c", source_file="f.log", file_kind="segment")
    assert chunk.quarantine.num_rows == 0
    times = chunk.log.column("append_time").to_pylist()[-4:]
    assert times[0] == datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)
    assert times[1] == datetime(1, 1, 1, tzinfo=timezone.utc)
    assert [t.timestamp() for t in times[2:]] == [-0.001, 0.0]


# -- 4. amplification -----------------------------------------------------------------------------------

def _gzip(data: bytes) -> bytes:
    c = zlib.compressobj(9, wbits=31)
    return c.compress(data) + c.flush()


def test_a_record_count_no_kraft_batch_can_hold_is_one_row_without_decompressing() -> None:
    n = 3_000_000
    empty_value = b"\x0c\x00\x00\x00\x01\x00\x00"   # length 6, attributes, ts 0, offset 0, null key, empty value, no headers
    bad = _batch(_gzip(empty_value * n), n, codec=1)
    assert len(bad) < 64 * 1024
    res = _both(RUN + bad)
    assert _q(res) == [("BAD_RECORD_COUNT", len(RUN), len(bad), 100, n)]   # the declared count
    assert res.stats.quarantined_bytes == len(bad)
    for count, declared in ((MAX_BATCH_RECORDS + 1, MAX_BATCH_RECORDS + 1), (-1, None), (-(1 << 31), None)):
        assert _q(_both(_batch(_section(1), count, last_delta=0))) == [("BAD_RECORD_COUNT", 0, 60 + 12, 100, declared)]


def test_many_bad_records_of_one_batch_are_one_row_with_the_count() -> None:
    n = 50_000
    empty_value = b"\x0c\x00\x00\x00\x01\x00\x00"
    bad = _batch(_gzip(empty_value * n), n, codec=1)
    res = _both(RUN + bad)
    (row,) = res.quarantine.to_pylist()
    assert (row["reason_code"], row["records"], row["offset"], row["source_position"], row["length"]) == (
        "RECORD_DECODE_ERROR", n, 100, len(RUN), len(bad))
    assert row["raw"] == bad and row["reason"].startswith(f"{n} records, the first at offset 100: ")
    assert res.stats.quarantined_records == n and res.stats.quarantined == 1


def test_record_failures_merge_per_reason_and_good_records_stay() -> None:
    unknown = bytes.fromhex("01ff0000")
    recs = [Record(NOOP, 0), Record(unknown, 1), Record(NOOP, 2, key=b"k"), Record(unknown, 3), Record(NOOP, 4),
            Record(None, 5)]
    bad = _batch(encode_records(recs), len(recs))
    crc_bad = bytearray(build_batch([NOOP, NOOP], base_offset=200, leader_epoch=1, timestamp_ms=5))
    crc_bad[-1] ^= 1
    buf = RUN + bad + bytes(crc_bad) + b"\x00" * 10
    res = _both(buf)
    at = len(RUN)
    assert _q(res) == [
        ("UNKNOWN_RECORD_TYPE", at, len(bad), 101, 2),
        ("BAD_RECORD_FRAMING", at, len(bad), 102, 2),
        ("CRC_MISMATCH", at + len(bad), len(crc_bad), 200, 2),
        ("TRUNCATED_BATCH", at + len(bad) + len(crc_bad), 10, 0, None),   # offset: the tail's first 8 bytes
    ]
    assert res.data.column("offset").to_pylist()[-2:] == [100, 104]
    s = res.stats
    assert (s.quarantined, s.quarantined_records, s.quarantined_bytes) == (4, 6, len(bad) + len(crc_bad) + 10)
    # the bronze row carries the count too
    chunk = decode_to_arrow(buf, cluster_id="c", source_file="f.log", file_kind="segment")
    assert chunk.quarantine.column("records").to_pylist() == [2, 2, 2, None]
    assert chunk.stats.quarantined_bytes == s.quarantined_bytes


# -- never raises ---------------------------------------------------------------------------------------

_HOSTILE = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_FIELDS = {"base": (0, ">q"), "length": (8, ">i"), "magic": (16, ">b"), "attributes": (21, ">h"), "last_delta": (23, ">i"),
           "max_ts": (35, ">q"), "count": (57, ">i")}
_EXTREMES = [0, 1, -1, 2, 7, 0x7F, 0xFF, 1 << 15, (1 << 31) - 1, -(1 << 31), (1 << 63) - 1, -(1 << 63), 10**16]


_TARGET = RUN + _batch(_section(5), 5) + build_batch([NOOP] * 3, base_offset=9, leader_epoch=1, timestamp_ms=5,
                                                     compression=1)
_TARGET_BATCHES = [(b.position, b.position + b.size) for b in iter_batches(_TARGET)]


@_HOSTILE
@given(st.lists(st.tuples(st.sampled_from(sorted(_FIELDS)), st.sampled_from(_EXTREMES)), min_size=1, max_size=4),
       st.integers(0, len(_TARGET_BATCHES) - 1), st.booleans(), st.integers(0, 200))
def test_extreme_header_fields_never_raise(edits: list[tuple[str, int]], which: int, fix_crc: bool, cut: int) -> None:
    """Any header field of any batch of a run set to an extreme value (wrapped to the field's width),
    the CRC recomputed or not, the buffer cut anywhere near the end: both paths agree, nothing raises."""
    buf = bytearray(_TARGET)
    start, end = _TARGET_BATCHES[which]
    for name, value in edits:
        at, fmt = _FIELDS[name]
        bits = 8 * struct.calcsize(fmt)
        struct.pack_into(fmt, buf, start + at, (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1)))
    if fix_crc:
        buf[start + 17:start + 21] = struct.pack(">I", crc32c(bytes(buf[start + 21:end])))
    _both(bytes(buf[: len(buf) - cut]))
    _both(bytes(buf[: len(buf) - cut]), at_eof=False)


@_HOSTILE
@given(st.binary(max_size=300), st.integers(1, 40))
def test_random_records_sections_behind_valid_crcs_never_raise(section: bytes, count: int) -> None:
    """Whatever follows a CRC-valid header (records sections the CRC vouches for), both paths agree."""
    rng = random.Random(len(section))
    _both(RUN + _batch(section, count, base=rng.choice([0, 5, OFFSET_LIMIT - 1])) + RUN[:85])


def test_a_row_budget_ends_the_call_early_and_pieces_add_up() -> None:
    """Compressed batches holding many more records than bytes: with ``row_budget`` each call stops
    after the batch that reaches it, and decoding on from ``consumed`` gives the rows of one call."""
    big = [build_batch([NOOP] * 3000, base_offset=3000 * i, leader_epoch=1, timestamp_ms=5, compression=1) for i in range(8)]
    buf = RUN + b"".join(big) + b"\x00" * 5
    whole = _both(buf)
    assert whole.data.num_rows == 40 + 24_000 and whole.quarantine.num_rows == 1
    pos, calls, data, quarantine = 0, 0, [], []
    while pos < len(buf):
        part = _both(buf[pos:], base_position=pos, row_budget=5000)
        assert part.consumed > 0 and part.data.num_rows <= 5000 + 40 + 3000
        data.append(part.data)
        quarantine.append(part.quarantine)
        pos += part.consumed
        calls += 1
    assert calls >= 4
    assert pa.Table.from_batches(data).equals(pa.Table.from_batches([whole.data]))
    assert pa.Table.from_batches(quarantine).equals(pa.Table.from_batches([whole.quarantine]))
