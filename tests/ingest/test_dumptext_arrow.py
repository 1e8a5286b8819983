"""Dump text -> bronze Arrow batches: real text files, binary <-> text round trips, bad payloads.

Run as a script (``python tests/ingest/test_dumptext_arrow.py --write-samples``) to rewrite
``data/samples/dumplog/`` from the tiny cluster built by :func:`tiny_cluster_files` below.
"""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_replay.codec.batch import Record, RecordBatch, build_batch, encode_batch
from kraft_replay.codec.control import CONTROL_TYPE_IDS, ControlRecord, encode_control_record
from kraft_replay.codec.files import classify, segment_name, snapshot_name
from kraft_replay.codec.jsonfmt import from_dump_json, to_dump_json
from kraft_replay.codec.records import MetadataRecord, encode_record_value
from kraft_replay.codec.schema import RECORD_TYPES_BY_TOOL_NAME
from kraft_replay.ingest.bronze import decode_to_arrow
from kraft_replay.ingest.dumptext import (
    BadLine,
    RecordLine,
    TrailingBytesLine,
    looks_like_dump_text,
    parse_dump_text,
    render_dump_text,
    tokenize_line,
)
from kraft_replay.ingest.schemas import CONTROL_SCHEMA, DECODED_QUARANTINE_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples" / "dumplog"
TEXT_28 = "text__apache-kafka__kraft-README__kafka-dump-log-cluster-metadata-decoder__2.8.txt"
TEXT_37 = "text__strimzi-blog-2024-03-22__kafka-dump-log-cluster-metadata-decoder__3.7.txt"
TEXT_SHELL = "text__apache-kafka__kraft-README__kafka-metadata-shell__2.8.txt"
AT = datetime(2026, 1, 1, tzinfo=timezone.utc)
# Columns the text does not carry: where the row sits in its file, and a control record's key version.
NOT_IN_TEXT = {"source_file", "source_position", "key_version"}


def table(batch: pa.RecordBatch, drop: set[str] = NOT_IN_TEXT) -> pa.Table:
    t = pa.Table.from_batches([batch])
    return t.drop_columns([c for c in t.column_names if c in drop])


def assert_same_rows(binary: pa.RecordBatch, text: pa.RecordBatch, drop: set[str] = NOT_IN_TEXT) -> None:
    a, b = table(binary, drop), table(text, drop)
    assert a.schema == b.schema
    for name in a.column_names:
        assert a.column(name).equals(b.column(name)), f"column {name} differs"
    assert a.num_rows == b.num_rows


# ---------------------------------------------------------------------------- a tiny cluster, our encoder

U = ["AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw", "AAAAAAAAAAAAAAAAAAAABA"]
TOPIC_ID = "b3JkZXJzLXRvcGljLWlkAA"
T0 = 1767225600000  # 2026-01-01T00:00:00Z


def _rec(tool_name: str, version: int, **data: object) -> bytes:
    return encode_record_value(MetadataRecord(RECORD_TYPES_BY_TOOL_NAME[tool_name].api_key, version, dict(data)))


def _ctl(name: str, **data: object) -> tuple[bytes, bytes]:
    return encode_control_record(ControlRecord(CONTROL_TYPE_IDS[name], 0, dict(data)))


def _control_batch(records: list[tuple[bytes, bytes]], **kw: int) -> bytes:
    return build_batch([v for _, v in records], keys=[k for k, _ in records], control=True, **kw)  # type: ignore[arg-type]


def _broker(i: int, epoch: int) -> bytes:
    return _rec(
        "REGISTER_BROKER_RECORD", 3, broker_id=i, is_migrating_zk_broker=False, incarnation_id=U[i], broker_epoch=epoch,
        end_points=[{"name": "PLAINTEXT", "host": f"broker-{i}", "port": 9092, "security_protocol": 0}],
        features=[{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 20}],
        rack=None, fenced=True, in_controlled_shutdown=False, log_dirs=[U[i]],
    )


def tiny_cluster_files() -> dict[str, bytes]:
    """A log segment and a snapshot of a small cluster: controllers 1-3 (a KRaft voter set), brokers
    1-3, a topic with two partitions and a config, a fence/unfence of broker 2 with a leader change of
    its partition, a Raft leader change and a metadata.version change. Written by our encoder."""
    voters = [
        {"voter_id": v, "voter_directory_id": U[v], "endpoints": [{"name": "CONTROLLER", "host": f"ctl-{v}", "port": 9093}],
         "kraft_version_feature": {"min_supported_version": 0, "max_supported_version": 1}}
        for v in (1, 2, 3)
    ]
    seg = b"".join([
        _control_batch([
            _ctl("LEADER_CHANGE", version=0, leader_id=1, voters=[{"voter_id": v} for v in (1, 2, 3)],
                 granting_voters=[{"voter_id": 1}, {"voter_id": 2}]),
            _ctl("KRAFT_VERSION", version=0, kraft_version=1),
            _ctl("KRAFT_VOTERS", version=0, voters=voters),
        ], base_offset=0, leader_epoch=1, timestamp_ms=T0),
        build_batch([
            _rec("BEGIN_TRANSACTION_RECORD", 0, name="Bootstrap records"),
            _rec("FEATURE_LEVEL_RECORD", 0, name="metadata.version", feature_level=20),
            _rec("ZK_MIGRATION_STATE_RECORD", 0, zk_migration_state=0),
            _rec("END_TRANSACTION_RECORD", 0),
        ], base_offset=3, leader_epoch=1, timestamp_ms=T0 + 10),
        build_batch([_broker(1, 7)], base_offset=7, leader_epoch=1, timestamp_ms=T0 + 500),
        build_batch([_broker(2, 8)], base_offset=8, leader_epoch=1, timestamp_ms=T0 + 510),
        build_batch([_broker(3, 9)], base_offset=9, leader_epoch=1, timestamp_ms=T0 + 520),
        build_batch([
            _rec("TOPIC_RECORD", 0, name="orders", topic_id=TOPIC_ID),
            _rec("CONFIG_RECORD", 0, resource_type=2, resource_name="orders", name="retention.ms", value="86400000"),
            *[
                _rec("PARTITION_RECORD", 1, partition_id=p, topic_id=TOPIC_ID, replicas=[1 + p, 2 + p, 3],
                     isr=[1 + p, 2 + p, 3], removing_replicas=[], adding_replicas=[], leader=1 + p, leader_epoch=0,
                     partition_epoch=0, directories=[U[1 + p], U[2 + p], U[3]])
                for p in (0, 1)
            ],
        ], base_offset=10, leader_epoch=1, timestamp_ms=T0 + 900),
        build_batch([_rec("NO_OP_RECORD", 0)], base_offset=14, leader_epoch=1, timestamp_ms=T0 + 1400),
        build_batch([
            _rec("BROKER_REGISTRATION_CHANGE_RECORD", 1, broker_id=2, broker_epoch=8, fenced=1),
            _rec("PARTITION_CHANGE_RECORD", 1, partition_id=1, topic_id=TOPIC_ID, leader=3, isr=[3]),
        ], base_offset=15, leader_epoch=1, timestamp_ms=T0 + 2000),
        _control_batch([
            _ctl("LEADER_CHANGE", version=0, leader_id=2, voters=[{"voter_id": v} for v in (1, 2, 3)],
                 granting_voters=[{"voter_id": 2}, {"voter_id": 3}]),
        ], base_offset=17, leader_epoch=2, timestamp_ms=T0 + 3000),
        build_batch([
            _rec("BROKER_REGISTRATION_CHANGE_RECORD", 1, broker_id=2, broker_epoch=8, fenced=-1),
            _rec("PARTITION_CHANGE_RECORD", 1, partition_id=1, topic_id=TOPIC_ID, isr=[3, 2]),
            _rec("FEATURE_LEVEL_RECORD", 0, name="metadata.version", feature_level=21),
        ], base_offset=18, leader_epoch=2, timestamp_ms=T0 + 3500),
    ])
    snap = b"".join([
        _control_batch([_ctl("SNAPSHOT_HEADER", version=0, last_contained_log_timestamp=T0 + 3500)],
                       base_offset=0, leader_epoch=2, timestamp_ms=T0 + 4000),
        build_batch([
            _rec("FEATURE_LEVEL_RECORD", 0, name="metadata.version", feature_level=21),
            _rec("TOPIC_RECORD", 0, name="orders", topic_id=TOPIC_ID),
        ], base_offset=1, leader_epoch=2, timestamp_ms=T0 + 4000),
        _control_batch([_ctl("SNAPSHOT_FOOTER", version=0)], base_offset=3, leader_epoch=2, timestamp_ms=T0 + 4000),
    ])
    return {segment_name(0): seg, snapshot_name(21, 2): snap}


def decode_file(name: str, data: bytes, source_file: str | None = None):  # noqa: ANN201 - DecodedChunk
    kf = classify(name)
    return decode_to_arrow(data, cluster_id="c1", source_file=source_file or kf.name, file_kind=kf.kind.value,
                           snapshot_end_offset=kf.end_offset, snapshot_epoch=kf.epoch, ingested_at=AT)


@pytest.mark.parametrize("skip", [False, True])
def test_tiny_cluster_text_parses_back_to_the_binary_rows(skip: bool) -> None:
    files = tiny_cluster_files()
    for name, data in files.items():
        binary = decode_file(name, data)
        assert binary.quarantine.num_rows == 0
        text = render_dump_text(data, file_name=f"/var/kafka/__cluster_metadata-0/{name}", skip_record_metadata=skip)
        assert looks_like_dump_text(text.encode()[:4096])
        chunk = parse_dump_text(text, source_file="dump.txt", cluster_id="c1", ingested_at=AT)
        assert chunk.quarantine.num_rows == 0
        assert_same_rows(binary.log, chunk.log)
        assert_same_rows(binary.snapshot, chunk.snapshot)
        if not skip:
            assert_same_rows(binary.control, chunk.control)
        else:
            # --skip-record-metadata prints an empty line per control record: offsets, batch fields
            # and file context survive, the type and content do not.
            kept = {"cluster_id", "offset", "batch_base_offset", "batch_last_offset", "batch_leader_epoch",
                    "append_time", "source_kind", "snapshot_end_offset", "snapshot_epoch"}
            assert table(binary.control).select(sorted(kept)).equals(table(chunk.control).select(sorted(kept)))
            assert chunk.control.column("control_type").null_count == chunk.control.num_rows
        assert set(chunk.log.column("source_file").to_pylist()) <= {"dump.txt"}


def test_tiny_cluster_rows_have_the_expected_content() -> None:
    """Hand-checked against tiny_cluster_files(): what the text reader must produce."""
    seg = tiny_cluster_files()[segment_name(0)]
    chunk = parse_dump_text(render_dump_text(seg, file_name=segment_name(0)), source_file="d.txt", cluster_id="c1")
    log = chunk.log.to_pylist()
    assert [r["offset"] for r in log] == [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20]
    assert Counter(r["record_type"] for r in log) == {
        "BEGIN_TRANSACTION_RECORD": 1, "FEATURE_LEVEL_RECORD": 2, "ZK_MIGRATION_STATE_RECORD": 1,
        "END_TRANSACTION_RECORD": 1, "REGISTER_BROKER_RECORD": 3, "TOPIC_RECORD": 1, "CONFIG_RECORD": 1,
        "PARTITION_RECORD": 2, "NO_OP_RECORD": 1, "BROKER_REGISTRATION_CHANGE_RECORD": 2,
        "PARTITION_CHANGE_RECORD": 2,
    }
    change = next(r for r in log if r["offset"] == 16)
    assert (change["batch_base_offset"], change["batch_last_offset"], change["batch_leader_epoch"]) == (15, 16, 1)
    assert change["partition_change"]["leader"] == 3 and change["partition_change"]["isr"] == [3]
    assert change["append_time"] == datetime(2026, 1, 1, 0, 0, 2, tzinfo=timezone.utc)
    broker = next(r for r in log if r["offset"] == 8)
    assert broker["register_broker"]["end_points"][0]["host"] == "broker-2"
    assert broker["register_broker"]["log_dirs"] == [U[2]]
    controls = chunk.control.to_pylist()
    assert [(c["offset"], c["control_type"], c["batch_leader_epoch"]) for c in controls] == [
        (0, "LEADER_CHANGE", 1), (1, "KRAFT_VERSION", 1), (2, "KRAFT_VOTERS", 1), (17, "LEADER_CHANGE", 2),
    ]
    assert controls[3]["leader_change"]["leader_id"] == 2
    assert [v["voter_directory_id"] for v in controls[2]["kraft_voters"]["voters"]] == [U[1], U[2], U[3]]
    assert all(c["key_version"] is None for c in controls)


# ---------------------------------------------------------------------------- real binary files, as text


REAL_BINARY = [
    "codecrafters-io__kafka-tester__HEAD-trimmed__00000000000000000000.log",
    "hiage__kafka-raft__kafka1__00000000000000000000.log",
    "hiage__kafka-raft__kafka1__bootstrap.checkpoint",
    "dkoh12__Systems__00000000000000007209-0000000001.checkpoint",
    "dkoh12__Systems__bootstrap.checkpoint",
    "ftmhxp__real-time-data-streaming-pipeline__kafka1__00000000000000007268-0000000001.checkpoint",
    "greenlemonT__kafka-temp__kafka1__00000000000000028869-0000000189.checkpoint",
]


@pytest.mark.parametrize("name", REAL_BINARY)
def test_real_binary_files_rendered_as_text_parse_back_to_the_same_rows(real_kraft_dir: Path, name: str) -> None:
    data = (real_kraft_dir / name).read_bytes()
    binary = decode_file(name, data)
    assert binary.quarantine.num_rows == 0
    chunk = parse_dump_text(render_dump_text(data, file_name=name), source_file=name + ".txt", cluster_id="c1",
                            ingested_at=AT)
    assert chunk.quarantine.num_rows == 0
    assert_same_rows(binary.log, chunk.log)
    assert_same_rows(binary.snapshot, chunk.snapshot)
    assert_same_rows(binary.control, chunk.control)
    assert chunk.stats.records == binary.stats.records


# ---------------------------------------------------------------------------- real text files


def test_real_37_text(real_kraft_dir: Path) -> None:
    path = real_kraft_dir / TEXT_37
    chunk = parse_dump_text(path.read_text(), source_file=path.name, cluster_id="c1", ingested_at=AT)
    assert (chunk.control.num_rows, chunk.snapshot.num_rows, chunk.quarantine.num_rows) == (0, 0, 0)
    log = chunk.log.to_pylist()
    assert Counter(r["record_type"] for r in log) == {
        "REGISTER_BROKER_RECORD": 1, "TOPIC_RECORD": 1, "CONFIG_RECORD": 1, "PARTITION_RECORD": 3,
    }
    assert [(r["offset"], r["source_position"], r["record_version"]) for r in log] == [
        (53, 11, 3), (3004, 14, 0), (3005, 15, 0), (3006, 16, 1), (3007, 17, 1), (3008, 18, 1),
    ]
    assert all(r["batch_base_offset"] is None and r["batch_leader_epoch"] is None for r in log)
    broker = log[0]
    assert broker["append_time"] == datetime.fromtimestamp(1710772983743 / 1000, tz=timezone.utc)
    assert broker["register_broker"]["broker_id"] == 3
    assert [e["port"] for e in broker["register_broker"]["end_points"]] == [9091, 9092, 9093]
    assert broker["register_broker"]["log_dirs"] == ["uHY7hO6-42Q7O4k0zLMmtg"]
    assert log[2]["config"] == {"resource_type": 2, "resource_name": "my-topic", "name": "retention.ms",
                                "value": "100000"}
    assert log[3]["partition"]["directories"] == ["SaZDxfHKu3NMZ7OnFP7YnA", "uHY7hO6-42Q7O4k0zLMmtg",
                                                  "p2UpbSD99eygD2ZToiSMzg"]
    # The current tool's JSON is already what to_dump_json prints: payload_json is the text, verbatim.
    lines = path.read_text().splitlines()
    assert [r["payload_json"] for r in log] == [lines[r["source_position"] - 1].split(" payload: ", 1)[1] for r in log]
    assert set(chunk.log.column("offset_bucket").to_pylist()) == {0}


def test_real_28_text(real_kraft_dir: Path) -> None:
    path = real_kraft_dir / TEXT_28
    chunk = parse_dump_text(path.read_bytes(), source_file=path.name, cluster_id="c1", ingested_at=AT)
    assert chunk.quarantine.num_rows == 0 and chunk.snapshot.num_rows == 0
    log = chunk.log.to_pylist()
    assert Counter(r["record_type"] for r in log) == {
        "REGISTER_BROKER_RECORD": 2, "UNFENCE_BROKER_RECORD": 2, "FENCE_BROKER_RECORD": 1, "TOPIC_RECORD": 1,
        "PARTITION_RECORD": 1,
    }
    assert [(r["offset"], r["batch_base_offset"], r["batch_last_offset"], r["batch_leader_epoch"]) for r in log] == [
        (1, 1, 1, 1), (2, 2, 2, 1), (3, 3, 3, 1), (5, 5, 5, 2), (6, 6, 6, 2), (7, 7, 8, 2), (8, 7, 8, 2),
    ]
    assert log[5]["topic"] == {"name": "foo", "topic_id": "5zoAlv-xEh9xRANKXt1Lbg"}
    assert log[5]["append_time"] == datetime.fromtimestamp(1614382712158 / 1000, tz=timezone.utc)
    assert log[3]["register_broker"]["incarnation_id"] == "RXRJu7cnScKRZOnWQGs86g"
    assert log[3]["register_broker"]["broker_epoch"] == 4
    # The two control batches (empty lines in the 2.8 output): offsets and batch fields, no type.
    controls = chunk.control.to_pylist()
    assert [(c["offset"], c["batch_leader_epoch"], c["control_type"], c["source_position"]) for c in controls] == [
        (0, 1, None, 10), (4, 2, None, 18),
    ]
    assert controls[1]["append_time"] == datetime.fromtimestamp(1614382671857 / 1000, tz=timezone.utc)


def test_real_28_payloads_normalise_to_the_current_rendering(real_kraft_dir: Path) -> None:
    """The 2.8 preview printed fields the current schema lays out differently; from_dump_json fills
    the defaults, so only those differences appear between the text and payload_json."""
    path = real_kraft_dir / TEXT_28
    chunk = parse_dump_text(path.read_text(), source_file=path.name, cluster_id="c1")
    lines = path.read_text().splitlines()
    for row in chunk.log.to_pylist():
        original = json.loads(lines[row["source_position"] - 1].split("payload: ", 1)[1])
        normalised = json.loads(row["payload_json"])
        assert normalised["type"] == original["type"] and normalised["version"] == original["version"]
        diff = {k: (original["data"].get(k), v) for k, v in normalised["data"].items() if original["data"].get(k) != v}
        expected = {
            "REGISTER_BROKER_RECORD": {"fenced": (None, True)},
            "PARTITION_RECORD": {"removingReplicas": (None, []), "addingReplicas": (None, [])},
        }.get(original["type"], {})
        assert diff == expected, row["offset"]


def test_real_text_payloads_round_trip_through_the_codec(real_kraft_dir: Path) -> None:
    lines = (real_kraft_dir / TEXT_37).read_text().splitlines()
    payloads = [line.split(" payload: ", 1)[1] for line in lines if " payload: " in line]
    assert len(payloads) == 6
    for payload in payloads:
        assert to_dump_json(from_dump_json(payload)) == payload


def test_metadata_shell_transcript_goes_to_quarantine_line_by_line(real_kraft_dir: Path) -> None:
    path = real_kraft_dir / TEXT_SHELL
    chunk = parse_dump_text(path.read_text(), source_file=path.name, cluster_id="c1", ingested_at=AT)
    assert chunk.log.num_rows == chunk.control.num_rows == chunk.snapshot.num_rows == 0
    q = chunk.quarantine.to_pylist()
    lines = path.read_text().splitlines()
    assert len(q) == 13
    for row in q:
        assert row["reason_code"] == "TEXT_PARSE_ERROR"
        assert row["raw"] == lines[row["source_position"] - 1].encode()
        assert row["length"] == len(row["raw"])
        assert row["source_file"] == path.name and row["cluster_id"] == "c1" and row["ingested_at"] == AT


# ---------------------------------------------------------------------------- bad payloads


def _one_line(rest: str, offset: int = 3) -> str:
    return f"| offset: {offset} CreateTime: {T0} keySize: -1 valueSize: 9 sequence: -1 headerKeys: [] {rest}"


@pytest.mark.parametrize(
    "rest, code, fragment",
    [
        ('payload: {"type":"MADE_UP_RECORD","version":0,"data":{}}', "UNKNOWN_RECORD_TYPE", "MADE_UP_RECORD"),
        ('payload: {"type":"TOPIC_RECORD","version":7,"data":{}}', "UNSUPPORTED_RECORD_VERSION", "no version 7"),
        ('payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":5}}', "TEXT_PARSE_ERROR", "expected a string"),
        ('payload: {"type":"TOPIC_RECORD","version":0,"data":{"colour":"red"}}', "TEXT_PARSE_ERROR", "colour"),
        ('payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"x"', "TEXT_PARSE_ERROR", "not valid JSON"),
        ('SnapshotHeader {"version":0,"lastContainedLogTimestamp":"soon"}', "TEXT_PARSE_ERROR", "SNAPSHOT_HEADER"),
        ('KRaftVersion {"version":0,"kRaftVersion":1', "TEXT_PARSE_ERROR", "not valid"),
    ],
)
def test_bad_payloads_are_quarantined(rest: str, code: str, fragment: str) -> None:
    line = _one_line(rest)
    chunk = parse_dump_text(["# header", line], source_file="t.txt", cluster_id="c1", ingested_at=AT)
    assert chunk.log.num_rows == chunk.control.num_rows == 0
    (row,) = chunk.quarantine.to_pylist()
    assert (row["reason_code"], row["source_position"], row["offset"], row["raw"]) == (code, 2, 3, line.encode())
    assert fragment in row["reason"]


def test_lines_that_are_not_utf8_are_quarantined_with_their_bytes() -> None:
    good = _one_line('payload: {"type":"NO_OP_RECORD","version":0,"data":{}}').encode()
    bad = _one_line('payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"\xff\xfe"}}', offset=4).encode()
    bad = bad.replace(b"\xc3\xbf\xc3\xbe", b"\xff\xfe")  # raw non-UTF-8 bytes inside the JSON string
    assert b"\xff\xfe" in bad
    chunk = parse_dump_text(good + b"\n" + bad + b"\n", source_file="t.txt", cluster_id="c1", ingested_at=AT)
    assert chunk.log.column("offset").to_pylist() == [3]
    (row,) = chunk.quarantine.to_pylist()
    assert (row["reason_code"], row["source_position"], row["raw"], row["length"]) == (
        "TEXT_PARSE_ERROR", 2, bad, len(bad))
    assert "not valid UTF-8" in row["reason"]


def test_undecodable_records_and_truncated_tails_survive_the_text_round_trip() -> None:
    seg = tiny_cluster_files()[segment_name(0)]
    bad_value = build_batch([b"\x01\x63\x00\x00"], base_offset=21, leader_epoch=2, timestamp_ms=T0)  # api key 99
    data = seg + bad_value + bad_value[:30]
    binary = decode_file(segment_name(0), data)
    text = render_dump_text(data, file_name=segment_name(0))
    assert "payload: Error at 21, skipping." in text
    assert text.rstrip().endswith(f"Found 30 invalid bytes at the end of {segment_name(0)}")
    chunk = parse_dump_text(text, source_file="d.txt", cluster_id="c1", ingested_at=AT)
    assert_same_rows(binary.log, chunk.log)
    q = chunk.quarantine.to_pylist()
    assert [(r["reason_code"], r["offset"]) for r in q] == [("RECORD_DECODE_ERROR", 21), ("TRUNCATED_BATCH", None)]
    assert [r["reason_code"] for r in binary.quarantine.to_pylist()] == ["UNKNOWN_RECORD_TYPE", "TRUNCATED_BATCH"]


def test_rendering_of_log_append_time_gzip_and_producer_fields() -> None:
    """Batch fields KRaft does not use still render as the tool prints them, and read back."""
    noop = _rec("NO_OP_RECORD", 0)
    batch = RecordBatch(base_offset=40, partition_leader_epoch=5, attributes=0x08 | 0x01, last_offset_delta=1,
                        base_timestamp=T0, max_timestamp=T0 + 77, records=[Record(noop, 0, 3), Record(noop, 1, 5)],
                        producer_id=9, producer_epoch=2, base_sequence=2147483647)
    data = encode_batch(batch)
    text = render_dump_text(data)
    header, first, second = text.splitlines()
    assert "lastOffset: 41 count: 2 baseSequence: 2147483647 lastSequence: 0 producerId: 9 producerEpoch: 2" in header
    assert f"LogAppendTime: {T0 + 77} " in header and "compresscodec: gzip" in header
    # LogAppendTime: every record carries the batch's time; sequences wrap past 2^31-1 to 0.
    assert first.startswith(f"| offset: 40 LogAppendTime: {T0 + 77} keySize: -1 valueSize: 4 sequence: 2147483647 ")
    assert second.startswith(f"| offset: 41 LogAppendTime: {T0 + 77} keySize: -1 valueSize: 4 sequence: 0 ")
    chunk = parse_dump_text(text, source_file="t.txt", cluster_id="c1", ingested_at=AT)
    assert_same_rows(decode_file(segment_name(0), data).log, chunk.log)


def test_schemas_and_stats() -> None:
    chunk = parse_dump_text("", source_file="empty.txt", cluster_id="c1")
    assert chunk.log.schema == LOG_SCHEMA and chunk.control.schema == CONTROL_SCHEMA
    assert chunk.snapshot.schema == SNAPSHOT_SCHEMA and chunk.quarantine.schema == DECODED_QUARANTINE_SCHEMA
    assert (chunk.stats.records, chunk.stats.first_offset, chunk.stats.quarantined) == (0, None, 0)
    seg = tiny_cluster_files()[segment_name(0)]
    text = render_dump_text(seg, file_name=segment_name(0))
    stats = parse_dump_text(text, source_file="d.txt", cluster_id="c1").stats
    assert (stats.batches, stats.records, stats.data_records, stats.control_records) == (10, 21, 17, 4)
    assert (stats.first_offset, stats.last_offset, stats.bytes) == (0, 20, len(text.encode()))
    # A text with a segment and a snapshot reports the log's offsets; a snapshot alone its in-file ones.
    both = parse_dump_text(SAMPLES.joinpath("cluster-metadata-decoder.txt").read_text(), source_file="s", cluster_id="c")
    assert (both.stats.first_offset, both.stats.last_offset, both.stats.records) == (0, 20, 25)
    snap = tiny_cluster_files()[snapshot_name(21, 2)]
    alone = parse_dump_text(render_dump_text(snap, file_name=snapshot_name(21, 2)), source_file="s", cluster_id="c")
    assert (alone.stats.first_offset, alone.stats.last_offset, alone.stats.records) == (0, 3, 4)


# ---------------------------------------------------------------------------- robustness


@functools.cache
def _lines() -> list[str]:
    return "".join(sample_texts().values()).splitlines()


@st.composite
def mutated_dump_text(draw: st.DrawFn) -> list[str]:
    """Lines of the samples, shuffled, cut, spliced and sprinkled with random text."""
    lines = _lines()
    out: list[str] = []
    for _ in range(draw(st.integers(0, 25))):
        line = lines[draw(st.integers(0, len(lines) - 1))]
        action = draw(st.sampled_from(["keep", "cut", "splice", "random", "nest"]))
        if action == "cut":
            line = line[: draw(st.integers(0, len(line)))]
        elif action == "splice":
            i = draw(st.integers(0, len(line)))
            line = line[:i] + draw(st.text(max_size=12)) + line[i:]
        elif action == "random":
            line = draw(st.text(max_size=80))
        elif action == "nest":
            line = _one_line('payload: {"type":"TOPIC_RECORD","version":0,"data":' + "[" * 5000 + "]" * 5000 + "}")
        out.append(line.replace("\r", " ").replace("\n", " "))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_dump_text())
def test_mutated_text_never_raises_and_drops_nothing(lines: list[str]) -> None:
    chunk = parse_dump_text(lines, source_file="fuzz.txt", cluster_id="c1", ingested_at=AT)
    placed = [row["source_position"] for part in (chunk.log, chunk.control, chunk.snapshot, chunk.quarantine)
              for row in part.select(["source_position"]).to_pylist()]
    assert len(placed) == len(set(placed)), "a line became two rows"
    # Every record line and every line that is not tool output must land in a table.
    must_place = {i for i, line in enumerate(lines, start=1)
                  if isinstance(tokenize_line(i, line), (RecordLine, BadLine, TrailingBytesLine))}
    assert must_place <= set(placed)
    for row in chunk.quarantine.to_pylist():
        assert row["raw"] == lines[row["source_position"] - 1].encode("utf-8", errors="surrogateescape")


# ---------------------------------------------------------------------------- committed samples


def sample_texts() -> dict[str, str]:
    files = tiny_cluster_files()
    seg, snap = segment_name(0), snapshot_name(21, 2)
    prefix = "/var/lib/kafka/data/__cluster_metadata-0/"
    return {
        "cluster-metadata-decoder.txt": (
            f"$ bin/kafka-dump-log.sh --cluster-metadata-decoder --files {prefix}{seg},{prefix}{snap}\n"
            + render_dump_text(files[seg], file_name=prefix + seg)
            + render_dump_text(files[snap], file_name=prefix + snap)
        ),
        "skip-record-metadata.txt": (
            f"$ bin/kafka-dump-log.sh --cluster-metadata-decoder --skip-record-metadata --files {prefix}{seg}\n"
            + render_dump_text(files[seg], file_name=prefix + seg, skip_record_metadata=True)
        ),
    }


@pytest.mark.parametrize("name", ["cluster-metadata-decoder.txt", "skip-record-metadata.txt"])
def test_committed_samples_are_current_and_parse_cleanly(name: str) -> None:
    path = SAMPLES / name
    text = path.read_text()
    assert text == sample_texts()[name], f"{path} is stale: run python {Path(__file__).relative_to(ROOT)} --write-samples"
    assert looks_like_dump_text(path.read_bytes()[:4096])
    chunk = parse_dump_text(text, source_file=name, cluster_id="c1")
    assert chunk.quarantine.num_rows == 0
    assert chunk.log.num_rows == 17
    assert chunk.snapshot.num_rows == (2 if name == "cluster-metadata-decoder.txt" else 0)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-samples"]:
        raise SystemExit(f"usage: python {sys.argv[0]} --write-samples")
    SAMPLES.mkdir(parents=True, exist_ok=True)
    for sample_name, sample in sample_texts().items():
        (SAMPLES / sample_name).write_text(sample)
        print(f"wrote {SAMPLES / sample_name}")
