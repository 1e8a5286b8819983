"""Vectorised ``payload_json`` (codec.arrow_json) equals the row-wise dump-tool renderer, value for value."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_replay.codec.arrow_json import ArrowJsonUnsupported, record_json_arrow, supports
from kraft_replay.codec.arrow_payload import PAYLOAD_COLUMN_BY_API_KEY, build_payload_columns
from kraft_replay.codec.arrow_payload import PAYLOAD_FIELDS
from kraft_replay.codec.jsonfmt import to_dump_json
from kraft_replay.codec.records import MetadataRecord
from kraft_replay.codec.schema import RECORD_TYPES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_records_roundtrip import message_strategy  # noqa: E402

SUPPORTED = [(k, v) for k, rt in RECORD_TYPES.items() for v in rt.schema.versions() if supports(k, v)]
UNSUPPORTED = [(k, v) for k, rt in RECORD_TYPES.items() for v in rt.schema.versions() if not supports(k, v)]
_COL_INDEX = {f.name: i for i, f in enumerate(PAYLOAD_FIELDS)}


def _payload(records: list[MetadataRecord | None], api_key: int) -> pa.Array | None:
    rt = RECORD_TYPES[api_key]
    if not rt.has_body:
        return None
    return build_payload_columns(records)[_COL_INDEX[PAYLOAD_COLUMN_BY_API_KEY[api_key]]]


def test_partition_change_and_noop_are_covered() -> None:
    keys = {k for k, _ in SUPPORTED}
    assert {5, 20} <= keys                     # PartitionChangeRecord (all versions), NoOpRecord
    assert {(5, 0), (5, 1), (5, 2)} <= set(SUPPORTED)
    assert UNSUPPORTED, "nested or bytes types must be reported, not rendered wrongly"


@pytest.mark.parametrize(("api_key", "version"), SUPPORTED)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_matches_row_wise_renderer(api_key: int, version: int, data: st.DataObject) -> None:
    bodies = data.draw(st.lists(message_strategy(RECORD_TYPES[api_key].schema, version), min_size=1, max_size=6))
    records: list[MetadataRecord | None] = [MetadataRecord(api_key, version, b) for b in bodies]
    records.insert(data.draw(st.integers(0, len(records))), None)        # a row of another type
    payload = _payload(records, api_key)
    got = record_json_arrow(api_key, version, payload, length=len(records)).to_pylist()
    want = [None if r is None else to_dump_json(r) for r in records]
    if payload is None:                                                    # no body: every row renders
        want = [to_dump_json(MetadataRecord(api_key, version, {}))] * len(records)
    assert got == want


def test_sliced_payload_and_escaped_strings() -> None:
    recs = [MetadataRecord(5, 2, {"partition_id": i, "topic_id": "AAAAAAAAAAEAAAAAAAAAAg", "isr": list(range(i)),
                                  "leader": i - 3, "directories": ["AAAAAAAAAAEAAAAAAAAAAg"] * (i % 2)})
            for i in range(6)]
    payload = _payload(recs, 5).slice(2, 3)
    assert record_json_arrow(5, 2, payload).to_pylist() == [to_dump_json(r) for r in recs[2:5]]
    cfg = [MetadataRecord(4, 0, {"resource_type": 2, "resource_name": 'we"ird\\\n\x01', "name": "a", "value": None})]
    if supports(4, 0):
        assert record_json_arrow(4, 0, _payload(cfg, 4)).to_pylist() == [to_dump_json(cfg[0])]


def test_unsupported_type_raises() -> None:
    k, v = UNSUPPORTED[0]
    with pytest.raises(ArrowJsonUnsupported, match=RECORD_TYPES[k].tool_name):
        record_json_arrow(k, v, None, length=1)
