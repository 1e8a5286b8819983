"""Record batch v2: facts §1.8 vector, encode/decode inverse, boundary scan, corruption markers."""

from __future__ import annotations

import struct

import pytest

from kraft_replay.codec.batch import (
    Corruption,
    Record,
    RecordBatch,
    batch_cuts,
    build_batch,
    encode_batch,
    iter_batches,
    scan_batch_headers,
)
from kraft_replay.codec.crc import crc32c

VECTOR = bytes.fromhex(
    "0000000000000001 0000005a 00000005 02 fb65b0da 0000 00000001"
    "0000018bcfe56800 0000018bcfe56800 ffffffffffffffff ffff ffffffff 00000002"
    "3a 00 00 00 01 2e  010c00 116d657461646174612e76657273696f6e 0015 00  00"
    "14 00 00 02 01 08  011400 00  00".replace(" ", "")
)
FEATURE_VALUE = bytes.fromhex("010c00116d657461646174612e76657273696f6e001500")
NOOP_VALUE = bytes.fromhex("01140000")


def test_facts_vector_decodes() -> None:
    (b,) = list(iter_batches(VECTOR))
    assert isinstance(b, RecordBatch)
    assert (b.base_offset, b.partition_leader_epoch, b.last_offset, b.crc) == (1, 5, 2, 0xFB65B0DA)
    assert b.base_timestamp == b.max_timestamp == 1700000000000
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1)
    assert not b.is_control and not b.is_transactional and b.compression == 0 and b.timestamp_type == 0
    assert [r.value for r in b.records] == [FEATURE_VALUE, NOOP_VALUE]
    assert [r.offset_delta for r in b.records] == [0, 1]
    assert all(r.key is None and not r.headers for r in b.records)
    assert b.size == len(VECTOR)


def test_crc_covers_attributes_to_end() -> None:
    assert crc32c(VECTOR[21:]) == 0xFB65B0DA
    assert crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value


def test_encode_is_exact_inverse() -> None:
    (b,) = list(iter_batches(VECTOR))
    assert encode_batch(b) == VECTOR
    assert build_batch([FEATURE_VALUE, NOOP_VALUE], base_offset=1, leader_epoch=5, timestamp_ms=1700000000000) == VECTOR


def test_records_with_keys_headers_and_deltas_roundtrip() -> None:
    recs = [
        Record(b"v1", 0, 0, b"k", 0, [("h1", b"x"), ("h2", None)]),
        Record(None, 3, -5, None, 0, []),
        Record(b"", 300, 1 << 40, b"", 0, [("", b"")]),
    ]
    batch = RecordBatch(10, 7, 0x10, 300, 1000, 2000, recs, 42, 3, 9)
    data = encode_batch(batch)
    (back,) = list(iter_batches(data, base_position=100))
    assert isinstance(back, RecordBatch)
    assert back.position == 100 and back.is_transactional
    assert [(r.value, r.offset_delta, r.timestamp_delta, r.key, list(r.headers)) for r in back.records] == [
        (r.value, r.offset_delta, r.timestamp_delta, r.key, list(r.headers)) for r in recs
    ]
    assert (back.producer_id, back.producer_epoch, back.base_sequence) == (42, 3, 9)
    assert encode_batch(back) == data


def _segment(n: int) -> bytes:
    return b"".join(build_batch([NOOP_VALUE] * (1 + i % 3), base_offset=i * 10, leader_epoch=1, timestamp_ms=i) for i in range(n))


def test_scan_and_cuts_follow_boundaries() -> None:
    seg = _segment(50)
    headers, consumed = scan_batch_headers(seg)
    assert consumed == len(seg) and len(headers) == 50
    assert [h.base_offset for h in headers] == [i * 10 for i in range(50)]
    starts = {h.position for h in headers}
    cuts = batch_cuts(seg, 500)
    assert cuts and all(c in starts for c in cuts)
    assert cuts == sorted(cuts) and all(b - a >= 500 for a, b in zip(cuts, cuts[1:]))
    # decoding the pieces gives the same batches as decoding the whole
    edges = [0, *cuts, len(seg)]
    pieces = [b for a, e in zip(edges, edges[1:]) for b in iter_batches(seg[a:e], a)]
    assert [(b.position, b.base_offset) for b in pieces] == [(b.position, b.base_offset) for b in iter_batches(seg)]


@pytest.mark.parametrize("cut", [1, 10, 17, 18, 60, 61, 70])
def test_truncated_tail_is_reported_not_dropped(cut: int) -> None:
    seg = _segment(3)
    good = sum(1 for _ in iter_batches(seg))
    last_start = scan_batch_headers(seg)[0][-1].position
    data = seg[: last_start + cut]
    items = list(iter_batches(data))
    assert all(isinstance(i, RecordBatch) for i in items[:-1]) and len(items) == good
    tail = items[-1]
    assert isinstance(tail, Corruption) and tail.reason_code == "TRUNCATED_BATCH"
    assert tail.position == last_start and tail.length == cut and tail.raw == data[last_start:]
    assert scan_batch_headers(data)[1] == last_start


def test_crc_mismatch_skips_one_batch_and_continues() -> None:
    seg = bytearray(_segment(3))
    second = scan_batch_headers(bytes(seg))[0][1]
    seg[second.position + 40] ^= 0x01  # inside baseTimestamp, covered by the CRC
    items = list(iter_batches(bytes(seg)))
    assert [type(i).__name__ for i in items] == ["RecordBatch", "Corruption", "RecordBatch"]
    assert items[1].reason_code == "CRC_MISMATCH" and items[1].offset == 10 and items[1].length == second.size


def test_bad_magic_and_corrupt_length() -> None:
    seg = bytearray(_segment(2))
    seg[16] = 1
    items = list(iter_batches(bytes(seg)))
    assert items[0].reason_code == "BAD_MAGIC" and isinstance(items[1], RecordBatch)
    seg = bytearray(_segment(2))
    seg[8:12] = struct.pack(">i", 5)
    (only,) = list(iter_batches(bytes(seg)))
    assert only.reason_code == "CORRUPT_BATCH_LENGTH" and only.length == len(seg)
    seg[8:12] = struct.pack(">i", 0x7FFFFFF0)
    (only,) = list(iter_batches(bytes(seg)))
    assert only.reason_code == "CORRUPT_BATCH_LENGTH"


def _with_section(section: bytes, count: int) -> bytes:
    (b,) = list(iter_batches(build_batch([NOOP_VALUE], base_offset=0, leader_epoch=0, timestamp_ms=0)))
    head = bytearray(encode_batch(b)[:61])
    head[57:61] = struct.pack(">i", count)
    head[8:12] = struct.pack(">i", 49 + len(section))
    body = bytes(head[21:]) + section
    head[17:21] = struct.pack(">I", crc32c(body))
    return bytes(head) + section


def test_record_framing_errors() -> None:
    good = bytes.fromhex("14 00 00 00 01 08 01140000 00".replace(" ", ""))
    assert isinstance(next(iter_batches(_with_section(good, 1))), RecordBatch)
    cases = {
        "TRAILING_BYTES": (good + b"\x00", 1),
        "BAD_RECORD_FRAMING": (good, 2),
    }
    for code, (section, count) in cases.items():
        item = next(iter_batches(_with_section(section, count)))
        assert isinstance(item, Corruption) and item.reason_code == code, code
    wrong_len = bytes.fromhex("16 00 00 00 01 08 01140000 00".replace(" ", ""))
    assert next(iter_batches(_with_section(wrong_len, 1))).reason_code == "BAD_RECORD_FRAMING"
    neg_count = next(iter_batches(_with_section(good, -1)))
    assert neg_count.reason_code == "BAD_RECORD_COUNT" and neg_count.records is None
    assert next(iter_batches(_with_section(good, 2))).records == 2   # a batch-level row keeps the declared count


def test_build_batch_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([], base_offset=0, leader_epoch=0, timestamp_ms=0)
    with pytest.raises(ValueError, match="same length"):
        build_batch([b"a"], base_offset=0, leader_epoch=0, timestamp_ms=0, keys=[])
