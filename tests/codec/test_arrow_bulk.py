"""``decode_to_arrow``'s bulk path (runs of one-record batches classified with numpy) gives exactly the
rows, quarantine, stats and ``consumed`` of the per-batch path and of the general decoder
(``iter_batches`` for every batch), on a buffer mixing every kind of batch."""

from __future__ import annotations

import dataclasses
import random
from datetime import datetime, timezone

import pytest

from kraft_replay.codec import arrow
from kraft_replay.codec.batch import build_batch, iter_batches
from kraft_replay.codec.compression import Compression
from kraft_replay.codec.control import ControlRecord, encode_control_record
from kraft_replay.codec.records import MetadataRecord, encode_record_value

AT = datetime(2024, 1, 1, tzinfo=timezone.utc)
NOOP = bytes.fromhex("01140000")
TOPIC = encode_record_value(MetadataRecord(2, 0, {"name": "t", "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}))
LONG_TOPIC = encode_record_value(MetadataRecord(2, 0, {"name": "t" * 100, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}))
FEATURE = bytes.fromhex("010c00116d657461646174612e76657273696f6e001500")
BAD_TYPE = bytes.fromhex("01ff0000")  # unknown record type: quarantined
LEADER_KEY, LEADER_VALUE = encode_control_record(
    ControlRecord(2, 0, {"version": 0, "leader_id": 1, "voters": [{"voter_id": 1}], "granting_voters": []}))


def _mixed() -> tuple[bytes, int]:
    """Mostly runs of single-NoOp batches, with multi-record, compressed, control, long-value,
    bad-value and keyed batches among them, a CRC-corrupt batch in the middle of a NoOp run, and a
    corrupt batch length ending the scan part-way. Returns the buffer and the corrupt length's position."""
    rng = random.Random(7)
    parts: list[bytes] = []
    off = 0
    for i in range(1200):
        r = rng.random()
        ts = 1_700_000_000_000 + i
        if r < 0.70:
            vals = [NOOP]
        elif r < 0.76:
            vals = [TOPIC]
        elif r < 0.82:
            vals = [FEATURE, TOPIC, NOOP]
        elif r < 0.85:
            vals = [LONG_TOPIC]
        elif r < 0.87:
            vals = [BAD_TYPE]
        elif r < 0.89:
            parts.append(build_batch([LEADER_VALUE], keys=[LEADER_KEY], base_offset=off, leader_epoch=2, timestamp_ms=ts,
                                     control=True))
            off += 1
            continue
        elif r < 0.91:
            parts.append(build_batch([NOOP, NOOP], base_offset=off, leader_epoch=2, timestamp_ms=ts,
                                     compression=Compression.ZSTD))
            off += 2
            continue
        elif r < 0.92:
            parts.append(build_batch([NOOP], keys=[b"k"], base_offset=off, leader_epoch=2, timestamp_ms=ts))  # has a key
            off += 1
            continue
        else:
            vals = [NOOP]
        parts.append(build_batch(vals, base_offset=off, leader_epoch=rng.randrange(3), timestamp_ms=ts))
        off += len(vals)
    corrupt = bytearray(parts[600])
    corrupt[-1] ^= 0xFF  # CRC mismatch, still framed: the scan goes on
    parts[600] = bytes(corrupt)
    head = b"".join(parts[:1000])
    # batch length 5 (below any header): CORRUPT_BATCH_LENGTH, the rest of the data is one quarantine row
    bad_len = bytes(8) + (5).to_bytes(4, "big") + bytes(60)
    return head + bad_len + b"".join(parts[1000:]), len(head)


MIXED, BAD_LENGTH_AT = _mixed()


def _decode(monkeypatch: pytest.MonkeyPatch, mode: str, buf: bytes, **kw: object) -> arrow.DecodedChunk:
    """``general``: every batch through ``iter_batches``, every value decoded afresh (empty cross-call
    cache); ``per-batch``: the inline parser; ``bulk``: the default (with whatever the cache holds);
    ``row-wise``: the bulk path with every value decoded row by row (no ``codec.columnar``)."""
    monkeypatch.setattr(arrow, "_BULK", mode in ("bulk", "row-wise"))
    monkeypatch.setattr(arrow, "_INLINE", mode != "general")
    monkeypatch.setattr(arrow, "_COLUMNAR", mode == "bulk")
    if mode == "general":
        monkeypatch.setattr(arrow, "_VALUE_CACHE", {})
    kw.setdefault("file_kind", "segment")
    return arrow.decode_to_arrow(buf, cluster_id="c", source_file="f.log", ingested_at=AT, **kw)  # type: ignore[arg-type]


def _assert_same(a: arrow.DecodedChunk, b: arrow.DecodedChunk) -> None:
    for name in ("log", "control", "snapshot", "quarantine"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.schema == y.schema
        assert x.num_rows == y.num_rows, name
        assert x.equals(y), f"{name} differs"
    assert dataclasses.astuple(a.stats) == dataclasses.astuple(b.stats)
    assert a.consumed == b.consumed


@pytest.mark.parametrize("kind", ["segment", "snapshot"])
def test_bulk_per_batch_and_general_paths_agree(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    kw = {"file_kind": kind, "base_position": 4096}
    if kind == "snapshot":
        kw.update(snapshot_end_offset=100, snapshot_epoch=3)
    general = _decode(monkeypatch, "general", MIXED, **kw)
    # the buffer holds what the test claims: data, control and quarantine rows of several kinds
    codes = set(general.quarantine.column("reason_code").to_pylist())
    assert {"CRC_MISMATCH", "CORRUPT_BATCH_LENGTH", "UNKNOWN_RECORD_TYPE", "BAD_RECORD_FRAMING"} <= codes, codes
    assert general.control.num_rows > 0 and general.stats.data_records > 500
    assert general.consumed == len(MIXED)
    _assert_same(_decode(monkeypatch, "per-batch", MIXED, **kw), general)
    _assert_same(_decode(monkeypatch, "bulk", MIXED, **kw), general)


def test_bulk_path_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"iter_batches": 0, "fast_records": 0}
    real_iter, real_fast = arrow.iter_batches, arrow._fast_records

    def counting_iter(*a, **k):  # type: ignore[no-untyped-def]
        calls["iter_batches"] += 1
        return real_iter(*a, **k)

    def counting_fast(*a, **k):  # type: ignore[no-untyped-def]
        calls["fast_records"] += 1
        return real_fast(*a, **k)

    monkeypatch.setattr(arrow, "iter_batches", counting_iter)
    monkeypatch.setattr(arrow, "_fast_records", counting_fast)
    single_noops = b"".join(build_batch([NOOP], base_offset=i, leader_epoch=1, timestamp_ms=i) for i in range(500))
    chunk = _decode(monkeypatch, "bulk", single_noops)
    assert chunk.log.num_rows == 500 and chunk.quarantine.num_rows == 0
    assert calls == {"iter_batches": 0, "fast_records": 0}
    _decode(monkeypatch, "general", single_noops)
    assert calls["iter_batches"] == 500


def test_bulk_path_with_stop_and_truncated_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces cut anywhere (``stop`` / ``at_eof=False``), and a truncated tail, as in the general decoder."""
    good = MIXED[:BAD_LENGTH_AT]
    rng = random.Random(3)
    for cut in [rng.randrange(len(good)) for _ in range(12)] + [len(good) - 30]:
        for kw in ({"stop": cut}, {"stop": cut, "at_eof": False}):
            _assert_same(_decode(monkeypatch, "bulk", good, **kw), _decode(monkeypatch, "general", good, **kw))
        truncated = good[:cut]
        for at_eof in (True, False):
            b = _decode(monkeypatch, "bulk", truncated, at_eof=at_eof)
            _assert_same(b, _decode(monkeypatch, "general", truncated, at_eof=at_eof))
            if not at_eof:
                assert b.consumed <= cut
    tail = _decode(monkeypatch, "bulk", good + good[:100])
    assert "TRUNCATED_BATCH" in tail.quarantine.column("reason_code").to_pylist()
    _assert_same(tail, _decode(monkeypatch, "general", good + good[:100]))


def test_bulk_positions_follow_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows come out in batch order with each batch's file position, whichever path made them."""
    chunk = _decode(monkeypatch, "bulk", MIXED, base_position=10)
    starts = [b.position for b in iter_batches(MIXED, 10)]
    pos = chunk.log.column("source_position").to_pylist()
    assert pos == sorted(pos) and set(pos) <= set(starts)
    offs = chunk.log.column("offset").to_pylist()
    assert offs == sorted(offs)
