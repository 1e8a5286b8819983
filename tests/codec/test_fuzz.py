"""Fuzzing the decoder with random and mutated segments (hypothesis).

Properties: never an uncaught exception, never a hang (per-example deadline), no allocation driven
by a hostile length field, and every byte accounted for: the batches and corruption markers that
``iter_batches`` yields tile the input exactly, and every corruption becomes a quarantine row.
"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_replay.codec.batch import Corruption, RecordBatch, build_batch, iter_batches
from kraft_replay.codec.compression import Compression
from kraft_replay.codec.control import ControlRecord, encode_control_record
from kraft_replay.codec.errors import REASON_CODES
from kraft_replay.codec.records import MetadataRecord, encode_record_value
from kraft_replay.ingest.bronze import decode_to_arrow

FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _sample_segment() -> bytes:
    topic = encode_record_value(MetadataRecord(2, 0, {"name": "t", "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}))
    noop = bytes.fromhex("01140000")
    leader_key, leader_value = encode_control_record(
        ControlRecord(2, 0, {"version": 0, "leader_id": 1, "voters": [{"voter_id": 1}], "granting_voters": []}))
    feat = bytes.fromhex("010c00116d657461646174612e76657273696f6e001500")
    parts = [
        build_batch([feat, topic], base_offset=0, leader_epoch=1, timestamp_ms=1000),
        build_batch([noop] * 3, base_offset=2, leader_epoch=1, timestamp_ms=1001, compression=Compression.GZIP),
        build_batch([noop], base_offset=5, leader_epoch=2, timestamp_ms=1002),
        build_batch([leader_value], keys=[leader_key], base_offset=6, leader_epoch=2,
                    timestamp_ms=1003, control=True),
        build_batch([noop, topic], base_offset=7, leader_epoch=2, timestamp_ms=1004, compression=Compression.ZSTD),
    ]
    return b"".join(parts)


SEGMENT = _sample_segment()


def _check(buf: bytes) -> None:
    pos = 0
    for item in iter_batches(buf, 1000):
        assert isinstance(item, (RecordBatch, Corruption))
        start = item.position - 1000
        assert start == pos, "batches and corruptions must tile the input"
        if isinstance(item, Corruption):
            assert item.reason_code in REASON_CODES and item.reason
            assert item.raw == buf[start : start + item.length]
        pos = start + item.size if isinstance(item, RecordBatch) else start + item.length
    assert pos == len(buf)
    chunk = decode_to_arrow(buf, cluster_id="c", source_file="f.log", file_kind="segment", base_position=1000)
    for code in chunk.quarantine.column("reason_code").to_pylist():
        assert code in REASON_CODES
    batch_level = sum(1 for i in iter_batches(buf) if isinstance(i, Corruption))
    assert chunk.quarantine.num_rows >= batch_level
    assert chunk.log.num_rows + chunk.control.num_rows == chunk.stats.records


def test_sample_segment_is_clean() -> None:
    chunk = decode_to_arrow(SEGMENT, cluster_id="c", source_file="f.log", file_kind="segment")
    assert chunk.quarantine.num_rows == 0 and chunk.log.num_rows == 8 and chunk.control.num_rows == 1


@FUZZ
@given(st.binary(max_size=4000))
def test_random_bytes(buf: bytes) -> None:
    _check(buf)


@FUZZ
@given(st.binary(min_size=17, max_size=400).map(lambda b: b[:8] + struct.pack(">i", len(b) - 12) + b[12:16] + b"\x02" + b[17:]))
def test_random_bodies_behind_plausible_headers(buf: bytes) -> None:
    _check(buf)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(SEGMENT) - 1), st.integers(0, 7)), min_size=1, max_size=8))
def test_bit_flips(flips: list[tuple[int, int]]) -> None:
    buf = bytearray(SEGMENT)
    for pos, bit in flips:
        buf[pos] ^= 1 << bit
    _check(bytes(buf))


@FUZZ
@given(st.integers(0, len(SEGMENT)))
def test_truncations(cut: int) -> None:
    _check(SEGMENT[:cut])
    items = list(iter_batches(SEGMENT[:cut]))
    if cut < len(SEGMENT) and items:
        assert isinstance(items[-1], Corruption) or sum(i.size for i in items if isinstance(i, RecordBatch)) == cut


@FUZZ
@given(st.integers(0, 4), st.sampled_from([-1, 0, 13, 14, 48, 49, 1 << 20, 0x7FFFFFFF, -(1 << 31)]))
def test_hostile_length_fields(batch_index: int, length: int) -> None:
    starts = [i.position for i in iter_batches(SEGMENT)]
    buf = bytearray(SEGMENT)
    struct.pack_into(">i", buf, starts[batch_index] + 8, length)
    tracemalloc.start()
    try:
        _check(bytes(buf))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 1024 * 1024


@FUZZ
@given(st.integers(0, 4), st.integers(-(1 << 31), (1 << 31) - 1))
def test_hostile_record_counts(batch_index: int, count: int) -> None:
    starts = [i.position for i in iter_batches(SEGMENT)]
    buf = bytearray(SEGMENT)
    struct.pack_into(">i", buf, starts[batch_index] + 57, count)
    _check(bytes(buf))


def test_mutated_real_segment(real_kraft_dir: Path) -> None:
    data = (real_kraft_dir / "hiage__kafka-raft__kafka1__00000000000000000000.log").read_bytes()[:60000]

    @FUZZ
    @given(st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)), min_size=1, max_size=5),
           st.integers(1, len(data)))
    def run(edits: list[tuple[int, int]], cut: int) -> None:
        buf = bytearray(data[:cut])
        for pos, val in edits:
            if pos < len(buf):
                buf[pos] = val
        _check(bytes(buf))

    run()
