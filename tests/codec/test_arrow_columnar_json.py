"""``decode_to_arrow`` renders ``payload_json`` for whole payload columns (``codec.arrow_json``) where it
can, and lays payload columns out from in-order slices or one ``take``: the rows equal those of the
row-wise renderer (``to_dump_json``) and of the gather-only layout, unknown tagged fields included."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kraft_replay.codec import arrow
from kraft_replay.codec.batch import build_batch
from kraft_replay.codec.jsonfmt import to_dump_json
from kraft_replay.codec.records import MetadataRecord, decode_record_value, encode_record_value

AT = datetime(2024, 1, 1, tzinfo=timezone.utc)
TOPIC_ID = "AAAAAAAAAAEAAAAAAAAAAg"
NOOP = bytes.fromhex("01140000")


def _values() -> list[bytes]:
    vals = []
    for i in range(40):
        data = {"partition_id": i % 7, "topic_id": TOPIC_ID, "isr": list(range(i % 4)), "leader": i - 3}
        if i % 9 == 4:
            data["_unknown_tagged"] = [(77, b"\x01\x02")]     # kept only by the row-wise renderer
        if i % 5 == 1:
            data["directories"] = [TOPIC_ID] * (i % 3)
        vals.append(encode_record_value(MetadataRecord(5, 2 if i % 5 == 1 else i % 2, data)))
    vals.append(encode_record_value(MetadataRecord(2, 0, {"name": 'quote"back\\slash', "topic_id": TOPIC_ID})))
    return vals


def _buffer() -> bytes:
    vals = _values()
    parts, off = [], 0
    for k in range(60):
        batch = [vals[(k * 7 + j) % len(vals)] for j in range(1 + k % 5)] + ([NOOP] if k % 3 == 0 else [])
        parts.append(build_batch(batch, base_offset=off, leader_epoch=1, timestamp_ms=1_700_000_000_000 + k))
        off += len(batch)
    return b"".join(parts)


BUF = _buffer()


def _decode(monkeypatch: pytest.MonkeyPatch, *, columnar: bool, max_slices: int) -> arrow.DecodedChunk:
    monkeypatch.setattr(arrow, "_VALUE_CACHE", {})
    monkeypatch.setattr(arrow, "_COLUMN_JSON", {} if columnar else _NeverColumnar())
    monkeypatch.setattr(arrow, "_MAX_SLICES", max_slices)
    monkeypatch.setattr(arrow, "_COLUMNAR", columnar)
    return arrow.decode_to_arrow(BUF, cluster_id="c", source_file="f", file_kind="segment", ingested_at=AT)


class _NeverColumnar(dict):
    def get(self, key, default=None):  # type: ignore[no-untyped-def]
        return False


def test_unknown_tagged_values_exist() -> None:
    assert any("_unknown_tagged" in decode_record_value(v).data for v in _values())


@pytest.mark.parametrize("max_slices", [0, 3, 10_000])
def test_same_rows_as_row_wise_json_and_gather(monkeypatch: pytest.MonkeyPatch, max_slices: int) -> None:
    calls: list[tuple[int, int]] = []
    real = arrow.record_json_arrow

    def spy(api_key, version, payload, length=None):  # type: ignore[no-untyped-def]
        calls.append((api_key, version))
        return real(api_key, version, payload, length)

    monkeypatch.setattr(arrow, "record_json_arrow", spy)
    want = _decode(monkeypatch, columnar=False, max_slices=0)
    assert not calls
    got = _decode(monkeypatch, columnar=True, max_slices=max_slices)
    assert {(5, 0), (5, 1), (5, 2), (2, 0)} <= set(calls)
    assert got.log.num_rows == want.log.num_rows > 100
    assert got.log.equals(want.log)
    assert got.quarantine.num_rows == 0
    # and payload_json is the dump tool's text of each record
    rows = got.log.column("payload_json").to_pylist()
    texts = set()
    for v in _values() + [NOOP]:
        texts.add(to_dump_json(decode_record_value(v)))
    assert set(rows) == texts
