"""The column-wise value decoder (``codec.columnar``) against the row-wise one, the oracle.

For every value it accepts, the payload row and ``payload_json`` equal the row-wise decoder's; every
value the row-wise decoder rejects, or decodes with unknown tagged fields, it leaves alone; every clean
value of a type/version it supports, it accepts. (The whole decoder with and without it:
tests/codec/test_decode_paths.py.)
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_replay.codec import columnar
from kraft_replay.codec.arrow_json import record_json_arrow
from kraft_replay.codec.arrow_payload import PAYLOAD_COLUMN_BY_API_KEY, PAYLOAD_STRUCT_TYPES
from kraft_replay.codec.jsonfmt import to_dump_json
from kraft_replay.codec.records import MetadataRecord, RecordDecodeError, decode_record_value, encode_record_value
from kraft_replay.codec.schema import RECORD_TYPES

# tests/codec is on sys.path (pytest prepend mode)
from test_records_roundtrip import RECORD_VERSIONS, message_strategy

SUPPORTED = [(k, v) for k, v in RECORD_VERSIONS if columnar.supports(k, v)]


def _layout(values: list[bytes], gap_seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The values in one buffer with random filler between them: (buffer, starts, lengths)."""
    rng = random.Random(gap_seed)
    buf, starts = bytearray(), []
    for v in values:
        buf += bytes(rng.randrange(256) for _ in range(rng.randrange(3)))
        starts.append(len(buf))
        buf += v
    buf += bytes(rng.randrange(256) for _ in range(rng.randrange(4)))
    return (np.frombuffer(bytes(buf), dtype=np.uint8), np.array(starts, dtype=np.int64),
            np.array([len(v) for v in values], dtype=np.int64))


def _check_against_row_wise(values: list[bytes], gap_seed: int = 0, *, expect_all_clean: bool = False) -> int:
    """Decode ``values`` column-wise and compare each accepted one with the row-wise decoder; returns how
    many were accepted."""
    buf, starts, lengths = _layout(values, gap_seed)
    res = columnar.decode_values(buf, starts, lengths)
    seen = np.zeros(len(values), dtype=bool)
    for g in res.groups:
        assert not seen[g.rows].any()
        seen[g.rows] = True
        rt = RECORD_TYPES[g.api_key]
        texts = record_json_arrow(g.api_key, g.version, g.payload, len(g.rows)).to_pylist()
        rows = g.payload.to_pylist() if g.payload is not None else [None] * len(g.rows)
        for i, row, text in zip(g.rows.tolist(), rows, texts):
            rec = decode_record_value(values[i])
            assert (rec.api_key, rec.version) == (g.api_key, g.version)
            assert "_unknown_tagged" not in rec.data
            if rt.has_body:
                stype = PAYLOAD_STRUCT_TYPES[PAYLOAD_COLUMN_BY_API_KEY[rec.api_key]]
                assert row == pa.array([rec.data], stype).to_pylist()[0], (rec, row)
            assert text == to_dump_json(rec)
    assert (seen == res.ok).all()
    if expect_all_clean:
        for i, v in enumerate(values):
            rec = decode_record_value(v)
            assert res.ok[i] == ("_unknown_tagged" not in rec.data), rec
    return int(res.ok.sum())


def test_supported_types_cover_the_common_records() -> None:
    names = {RECORD_TYPES[k].name for k, _ in SUPPORTED}
    assert {"PartitionChangeRecord", "PartitionRecord", "TopicRecord", "NoOpRecord", "ConfigRecord",
            "FeatureLevelRecord", "BrokerRegistrationChangeRecord", "FenceBrokerRecord"} <= names
    # nested structs, bytes, floats and string arrays stay with the row-wise decoder
    assert not columnar.supports(0, 3) and not columnar.supports(11, 0) and not columnar.supports(14, 0)
    assert not columnar.supports(10, 0)
    assert not columnar.supports(99, 0) and not columnar.supports(5, 9)


@pytest.mark.parametrize(("api_key", "version"), SUPPORTED)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_records_equal_the_row_wise_decoder(api_key: int, version: int, data: st.DataObject) -> None:
    bodies = data.draw(st.lists(message_strategy(RECORD_TYPES[api_key].schema, version), min_size=1, max_size=12))
    values = [encode_record_value(MetadataRecord(api_key, version, b)) for b in bodies]
    _check_against_row_wise(values, gap_seed=len(values), expect_all_clean=True)


def _mutations(value: bytes, rng: random.Random) -> list[bytes]:
    out = [value[:k] for k in range(len(value))]                       # every truncation
    out.append(value + bytes([rng.randrange(256)]))                   # a trailing byte
    for _ in range(12):
        b = bytearray(value)
        b[rng.randrange(len(b))] = rng.randrange(256)                 # one byte changed
        out.append(bytes(b))
        b = bytearray(value)
        b.insert(rng.randrange(len(b) + 1), rng.randrange(256))       # one byte inserted
        out.append(bytes(b))
    return out


@pytest.mark.parametrize(("api_key", "version"), SUPPORTED)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_mutated_values_are_decoded_alike_or_left_alone(api_key: int, version: int, data: st.DataObject,
                                                        seed: int) -> None:
    body = data.draw(message_strategy(RECORD_TYPES[api_key].schema, version))
    value = encode_record_value(MetadataRecord(api_key, version, body))
    values = _mutations(value, random.Random(seed))
    buf, starts, lengths = _layout(values, seed)
    res = columnar.decode_values(buf, starts, lengths)
    for i, v in enumerate(values):
        try:
            rec = decode_record_value(v)
        except RecordDecodeError:
            assert not res.ok[i], v.hex()
            continue
        if "_unknown_tagged" in rec.data:
            assert not res.ok[i], v.hex()
    _check_against_row_wise(values, seed)


def test_known_tricky_values() -> None:
    """Hand-made edge cases: tags out of order, a repeated tag, an invalid tag, a long varint, a null
    where none is allowed, bad UTF-8 and a non-ASCII string."""
    topic_id = bytes(range(16))
    base = bytes([1, 5, 0]) + (7).to_bytes(4, "big") + topic_id            # PartitionChange v0 head
    leader = bytes([1, 4]) + (3).to_bytes(4, "big")                       # tag 1: Leader 3
    isr = bytes([0, 9, 3]) + (1).to_bytes(4, "big") + (2).to_bytes(4, "big")  # tag 0: Isr [1, 2]
    cases = {
        "ordered": base + bytes([2]) + isr + leader,
        "out of order": base + bytes([2]) + leader + isr,
        "repeated tag": base + bytes([2]) + leader + leader,
        "invalid tag for v0 (directories)": base + bytes([1, 8, 1, 0]),
        "unknown tag": base + bytes([1, 40, 1, 0]),
        "long varint count": base + bytes([0x81, 0x80, 0x80, 0x80, 0x00]),
        "size mismatch": base + bytes([1, 1, 5]) + (3).to_bytes(4, "big") + b"\x00",
        "trailing": base + bytes([0, 0]),
        "no tag section": base,
        "null topic name": bytes([1, 2, 0, 0]) + topic_id + b"\x00",
        "bad utf-8": bytes([1, 2, 0, 3, 0xC3, 0x28]) + topic_id + b"\x00",
        "non-ascii": bytes([1, 2, 0, 3]) + "é".encode() + topic_id + b"\x00",
        "noop": bytes([1, 20, 0, 0]),
        "noop with a tag": bytes([1, 20, 0, 1, 3, 1, 9]),
        "two-byte api key frame": bytes([1, 0x85, 0x00, 0]),
    }
    values = list(cases.values())
    accepted = _check_against_row_wise(values)
    buf, starts, lengths = _layout(values)
    ok = dict(zip(cases, columnar.decode_values(buf, starts, lengths).ok.tolist()))
    assert ok["ordered"] and ok["non-ascii"] and ok["noop"]
    for name in ("out of order", "repeated tag", "invalid tag for v0 (directories)", "unknown tag", "long varint count",
                 "size mismatch", "trailing", "no tag section", "null topic name", "bad utf-8", "noop with a tag",
                 "two-byte api key frame"):
        assert not ok[name], name
    assert accepted == 3
