"""The accelerators against the reference, in one place.

``decode_records(accelerate=False)`` is the reference: the general decoder (``decode_batch`` for every
framed batch, values row by row, ``payload_json`` by ``to_dump_json``). With ``accelerate=True`` the
batch accelerator (``codec.bulk``), the column-wise value decoder (``codec.columnar``) and the
column-wise JSON renderer (``codec.arrow_json``) take what they recognise. Both must give exactly the
same data, control and quarantine rows, stats and ``consumed`` — on buffers mixing every kind of batch,
multi-record batches, hostile batches, pieces cut anywhere, and every real Kafka file — and the
accelerators must actually do the work where they should.
"""

from __future__ import annotations

import dataclasses
import random
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kraft_replay.codec import bulk, columnar, decode
from kraft_replay.codec.batch import build_batch, iter_batches
from kraft_replay.codec.compression import Compression
from kraft_replay.codec.control import ControlRecord, encode_control_record
from kraft_replay.codec.crc import crc32c
from kraft_replay.codec.decode import DecodedRecords, decode_records
from kraft_replay.codec.files import FileKind, classify
from kraft_replay.codec.jsonfmt import to_dump_json
from kraft_replay.codec.records import MetadataRecord, decode_record_value, encode_record_value

NOOP = bytes.fromhex("01140000")
TOPIC_ID = "AAAAAAAAAAEAAAAAAAAAAg"
TOPIC = encode_record_value(MetadataRecord(2, 0, {"name": "t", "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}))
LONG_TOPIC = encode_record_value(MetadataRecord(2, 0, {"name": "t" * 100, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}))
FEATURE = bytes.fromhex("010c00116d657461646174612e76657273696f6e001500")
BAD_TYPE = bytes.fromhex("01ff0000")  # unknown record type: quarantined
LEADER_KEY, LEADER_VALUE = encode_control_record(
    ControlRecord(2, 0, {"version": 0, "leader_id": 1, "voters": [{"voter_id": 1}], "granting_voters": []}))


def _recrc(b: bytearray) -> bytes:
    b[17:21] = struct.pack(">I", crc32c(bytes(b[21:])))
    return bytes(b)


def _mixed() -> tuple[bytes, int]:
    """Mostly runs of single-NoOp batches, with multi-record, compressed, control, long-value,
    bad-value and keyed batches among them, CRC-valid batches the decoder refuses (offsets and
    timestamps out of range), a CRC-corrupt batch in the middle of a NoOp run, and a corrupt batch
    length ending the scan part-way. Returns the buffer and the corrupt length's position."""
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
        elif r < 0.93:
            b = bytearray(build_batch([NOOP, NOOP, NOOP], base_offset=off, leader_epoch=2, timestamp_ms=ts))
            b[0:8] = struct.pack(">q", (1 << 63) - 2)          # base offset outside the CRC: OFFSET_OUT_OF_RANGE
            parts.append(bytes(b))
            continue
        elif r < 0.94:
            parts.append(build_batch([NOOP], base_offset=off, leader_epoch=2, timestamp_ms=10**16))  # TIMESTAMP_OUT_OF_RANGE
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


def _multi_record_buffer(seed: int) -> bytes:
    """Batches of 1 to 300 records (offset deltas past 63: two-byte varints), values of every length
    class (1-, 2- and 3-byte length varints), a type the column-wise decoder leaves to the row-wise
    one, and a batch with a bad value in its middle."""
    rng = random.Random(seed)
    pool = [NOOP]
    for i in range(40):
        pool.append(encode_record_value(MetadataRecord(5, i % 3, {"partition_id": i, "topic_id": TOPIC_ID,
                                                                 "isr": list(range(i % 5)), "leader": i % 4})))
    pool.append(encode_record_value(MetadataRecord(4, 0, {"resource_type": 2, "resource_name": "t" * 200,
                                                          "name": "retention.ms", "value": "x" * 9000})))
    pool.append(encode_record_value(MetadataRecord(4, 0, {"resource_type": 2, "resource_name": "big",
                                                          "name": "v", "value": "y" * 20000})))
    pool.append(encode_record_value(MetadataRecord(0, 3, {"broker_id": 1, "incarnation_id": TOPIC_ID})))  # row-wise type
    parts, off = [], 0
    for k in range(220):
        n = rng.choice([1, 2, 3, 7, 20, 70, 300]) if k % 11 else 1
        vals = [rng.choice(pool) for _ in range(n)]
        if k == 50:
            vals[n // 2] = BAD_TYPE            # unknown type: the batch goes to the general decoder
        parts.append(build_batch(vals, base_offset=off, leader_epoch=k % 3, timestamp_ms=1_700_000_000_000 + k))
        off += n
    return b"".join(parts)


def _json_values() -> list[bytes]:
    """PartitionChange values of every version, some with unknown tagged fields (kept only by the
    row-wise renderer), and a topic name that needs JSON escaping."""
    vals = []
    for i in range(40):
        data = {"partition_id": i % 7, "topic_id": TOPIC_ID, "isr": list(range(i % 4)), "leader": i - 3}
        if i % 9 == 4:
            data["_unknown_tagged"] = [(77, b"\x01\x02")]
        if i % 5 == 1:
            data["directories"] = [TOPIC_ID] * (i % 3)
        vals.append(encode_record_value(MetadataRecord(5, 2 if i % 5 == 1 else i % 2, data)))
    vals.append(encode_record_value(MetadataRecord(2, 0, {"name": 'quote"back\\slash', "topic_id": TOPIC_ID})))
    return vals


def _json_buffer() -> bytes:
    vals = _json_values()
    parts, off = [], 0
    for k in range(60):
        batch = [vals[(k * 7 + j) % len(vals)] for j in range(1 + k % 5)] + ([NOOP] if k % 3 == 0 else [])
        parts.append(build_batch(batch, base_offset=off, leader_epoch=1, timestamp_ms=1_700_000_000_000 + k))
        off += len(batch)
    return b"".join(parts)


def _decode(buf: bytes, accelerate: bool, **kw: object) -> DecodedRecords:
    return decode_records(buf, accelerate=accelerate, **kw)  # type: ignore[arg-type]


def assert_same(a: DecodedRecords, b: DecodedRecords) -> None:
    for name in ("data", "control", "quarantine"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.schema == y.schema
        assert x.num_rows == y.num_rows, name
        assert x.equals(y), f"{name} differs"
    assert dataclasses.astuple(a.stats) == dataclasses.astuple(b.stats)
    assert a.consumed == b.consumed


def check_paths_agree(buf: bytes, **kw: object) -> DecodedRecords:
    """Decode with and without the accelerators, assert they agree; returns the reference result."""
    ref = _decode(buf, False, **kw)
    assert_same(_decode(buf, True, **kw), ref)
    return ref


def test_paths_agree_on_a_mixed_buffer() -> None:
    ref = check_paths_agree(MIXED, base_position=4096)
    # the buffer holds what the test claims: data, control and quarantine rows of several kinds
    codes = set(ref.quarantine.column("reason_code").to_pylist())
    assert {"CRC_MISMATCH", "CORRUPT_BATCH_LENGTH", "UNKNOWN_RECORD_TYPE", "BAD_RECORD_FRAMING",
            "OFFSET_OUT_OF_RANGE", "TIMESTAMP_OUT_OF_RANGE"} <= codes, codes
    assert ref.control.num_rows > 0 and ref.stats.data_records > 500
    assert ref.consumed == len(MIXED)


def test_the_batch_accelerator_takes_the_usual_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"general": 0}
    real = decode.decode_batch

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        calls["general"] += 1
        return real(*a, **k)

    monkeypatch.setattr(decode, "decode_batch", counting)
    single_noops = b"".join(build_batch([NOOP], base_offset=i, leader_epoch=1, timestamp_ms=i) for i in range(500))
    got = _decode(single_noops, True)
    assert got.data.num_rows == 500 and got.quarantine.num_rows == 0 and calls["general"] == 0
    assert_same(got, _decode(single_noops, False))
    assert calls["general"] == 500


def test_pieces_and_truncated_tails_agree() -> None:
    """Pieces cut anywhere (``stop`` / ``at_eof=False``), and a truncated tail."""
    good = MIXED[:BAD_LENGTH_AT]
    rng = random.Random(3)
    for cut in [rng.randrange(len(good)) for _ in range(12)] + [len(good) - 30]:
        check_paths_agree(good, stop=cut)
        check_paths_agree(good, stop=cut, at_eof=False)
        truncated = good[:cut]
        check_paths_agree(truncated)
        part = check_paths_agree(truncated, at_eof=False)
        assert part.consumed <= cut and part.quarantine.num_rows == check_paths_agree(truncated[:part.consumed]).quarantine.num_rows
    tail = check_paths_agree(good + good[:100])
    assert "TRUNCATED_BATCH" in tail.quarantine.column("reason_code").to_pylist()


def test_rows_follow_batches() -> None:
    """Rows come out in batch order with each batch's file position, whichever path made them."""
    got = _decode(MIXED, True, base_position=10)
    starts = [b.position for b in iter_batches(MIXED, 10)]
    pos = got.data.column("source_position").to_pylist()
    assert pos == sorted(pos) and set(pos) <= set(starts)
    offs = got.data.column("offset").to_pylist()
    assert offs == sorted(offs)
    qpos = got.quarantine.column("source_position").to_pylist()
    assert qpos == sorted(qpos)


@pytest.mark.parametrize("seed", [1, 2])
def test_multi_record_batches_agree_and_columnar_does_the_work(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    buf = _multi_record_buffer(seed)
    ref = _decode(buf, False)
    assert ref.stats.data_records > 5000 and ref.quarantine.num_rows == 1
    assert ref.quarantine.column("records").to_pylist() == [1]
    calls = {"decode": 0}
    real = columnar.decode_values

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        out = real(*a, **k)
        calls["decode"] += int(out.ok.sum())
        return out

    monkeypatch.setattr(decode, "decode_values", counting)
    assert_same(_decode(buf, True), ref)
    assert calls["decode"] > 0.9 * ref.stats.data_records   # the column-wise path did the work
    for cut in random.Random(seed).sample(range(len(buf)), 6):
        check_paths_agree(buf[:cut], at_eof=False)


def test_lockstep_and_one_by_one_framing_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The accelerator frames records in lockstep while many batches have records, one by one after:
    both ways give the reference's rows (forced each way)."""
    buf = _multi_record_buffer(3)
    ref = _decode(buf, False)
    for lockstep_min in (0, 10**9):
        monkeypatch.setattr(bulk, "_LOCKSTEP_MIN", lockstep_min)
        assert_same(_decode(buf, True), ref)


def test_column_wise_json_equals_the_row_wise_text(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    real = decode.record_json_arrow

    def spy(api_key, version, payload, length=None):  # type: ignore[no-untyped-def]
        calls.append((api_key, version))
        return real(api_key, version, payload, length)

    monkeypatch.setattr(decode, "record_json_arrow", spy)
    buf = _json_buffer()
    assert any("_unknown_tagged" in decode_record_value(v).data for v in _json_values())
    ref = _decode(buf, False)
    assert not calls
    assert_same(_decode(buf, True), ref)
    assert {(5, 0), (5, 1), (5, 2), (2, 0)} <= set(calls)
    assert ref.data.num_rows > 100 and ref.quarantine.num_rows == 0
    assert set(ref.data.column("payload_json").to_pylist()) == {
        to_dump_json(decode_record_value(v)) for v in _json_values() + [NOOP]}


@pytest.mark.parametrize("max_slices", [0, 1, 3, 8, 10_000])
def test_payload_layouts_equal_a_plain_take(max_slices: int) -> None:
    """``rows_of`` lays a payload column out from slices or by spreading; either equals ``take``."""
    rng = random.Random(max_slices)
    ref = _decode(_json_buffer(), False)
    dense = ref.data.column("partition_change")
    dense = dense.filter(dense.is_valid())
    for _ in range(20):
        ri = np.array([rng.randrange(-1, len(dense)) if rng.random() < 0.5 else -1 for _ in range(rng.randrange(1, 80))],
                      dtype=np.int64)
        if rng.random() < 0.5:   # runs of consecutive values, as batches give them
            ri = np.where(ri >= 0, np.maximum.accumulate(ri) % len(dense), -1)
        got = decode.rows_of(dense, ri, max_slices)
        want = dense.take(pa.array(np.where(ri >= 0, ri, 0), pa.int64())).to_pylist()
        want = [w if i >= 0 else None for w, i in zip(want, ri.tolist())]
        if (ri < 0).all():
            assert got is None
        else:
            assert got.to_pylist() == want


def _real_binary_files(real_kraft_dir: Path) -> list[Path]:
    return sorted(p for p in real_kraft_dir.iterdir()
                  if classify(p.name).kind in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP))


def test_real_files_agree(real_kraft_dir: Path) -> None:
    files = _real_binary_files(real_kraft_dir)
    assert len(files) == 15
    accepted = 0
    for path in files:
        ref = check_paths_agree(path.read_bytes())
        assert ref.quarantine.num_rows == 0
        accepted += ref.stats.data_records
    assert accepted > 1000


def test_mutated_real_segment_agrees(real_kraft_dir: Path) -> None:
    """CRC-valid mutations of a real segment (records changed, CRC recomputed) and raw byte flips:
    whatever the decoder makes of them, both paths make the same."""
    data = (real_kraft_dir / "hiage__kafka-raft__kafka1__00000000000000000000.log").read_bytes()[:80_000]
    starts = [b.position for b in iter_batches(data)][:-1]
    rng = random.Random(11)
    for _ in range(40):
        buf = bytearray(data)
        for _ in range(rng.randrange(1, 6)):
            s = rng.choice(starts)
            end = s + 12 + struct.unpack_from(">i", data, s + 8)[0]
            p = rng.choice([q for q in range(s, end) if not s + 8 <= q < s + 12])   # lengths stay: the chain holds
            buf[p] = rng.randrange(256)
            if rng.random() < 0.8 and p >= s + 21:
                buf[s:end] = _recrc(bytearray(buf[s:end]))
        check_paths_agree(bytes(buf), base_position=rng.randrange(1 << 20))
