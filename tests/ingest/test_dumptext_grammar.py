"""Line grammar and batch/file state machine of the dump-text reader (no Arrow, no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft_replay.ingest.dumptext import (
    _BATCH_FAST_RE,
    BadLine,
    BatchLine,
    RecordLine,
    SkippedLine,
    looks_like_dump_text,
    parse_lines,
    tokenize_line,
)

TEXT_28 = "text__apache-kafka__kraft-README__kafka-dump-log-cluster-metadata-decoder__2.8.txt"
TEXT_37 = "text__strimzi-blog-2024-03-22__kafka-dump-log-cluster-metadata-decoder__3.7.txt"
TEXT_SHELL = "text__apache-kafka__kraft-README__kafka-metadata-shell__2.8.txt"

# Lines written for these tests in the layout of the current tool (not copied from anywhere).
HDR = (
    "baseOffset: {b} lastOffset: {l} count: {c} baseSequence: -1 lastSequence: -1 producerId: -1 "
    "producerEpoch: -1 partitionLeaderEpoch: {e} isTransactional: false isControl: {ctl} "
    "deleteHorizonMs: OptionalLong.empty position: {p} CreateTime: {t} size: 100 magic: 2 "
    "compresscodec: none crc: 12345 isvalid: {v}"
)


def hdr(b: int, l: int, e: int = 3, ctl: bool = False, p: int = 0, t: int = 1700000000000, v: bool = True) -> str:
    return HDR.format(b=b, l=l, c=l - b + 1, e=e, ctl=str(ctl).lower(), p=p, t=t, v=str(v).lower())


def rec(o: int, rest: str, t: int = 1700000000000) -> str:
    return f"| offset: {o} CreateTime: {t} keySize: -1 valueSize: 10 sequence: -1 headerKeys: [] {rest}"


TOPIC = '{"type":"TOPIC_RECORD","version":0,"data":{"name":"t","topicId":"AAAAAAAAAAAAAAAAAAAAAQ"}}'
NOOP = '{"type":"NO_OP_RECORD","version":0,"data":{}}'


# ---------------------------------------------------------------------------- real text files


def test_real_28_text_parses_every_record(real_kraft_dir: Path) -> None:
    text = (real_kraft_dir / TEXT_28).read_text()
    parsed = parse_lines(text)
    assert parsed.problems == []
    # 5 comment lines before, 1 after, the command line, "Dumping …" and "Starting offset: 0".
    assert parsed.skipped == 9
    got = [(r.offset, r.kind, r.batch.base_offset, r.batch.last_offset, r.batch.leader_epoch) for r in parsed.records]
    assert got == [
        (0, "control", 0, 0, 1),
        (1, "data", 1, 1, 1),
        (2, "data", 2, 2, 1),
        (3, "data", 3, 3, 1),
        (4, "control", 4, 4, 2),
        (5, "data", 5, 5, 2),
        (6, "data", 6, 6, 2),
        (7, "data", 7, 8, 2),
        (8, "data", 7, 8, 2),
    ]
    # Checked by hand against the text: line 24 is the TOPIC_RECORD of the batch at offset 7.
    topic = parsed.records[7]
    assert topic.line_no == 24
    assert topic.append_time_ms == 1614382712158
    assert topic.payload is not None and '"name":"foo"' in topic.payload
    assert all(r.source_kind == "log" for r in parsed.records)
    # The control records are the empty lines the 2.8 tool printed: their type is not in the text.
    assert [(r.line_no, r.control_type) for r in parsed.records if r.kind == "control"] == [(10, None), (18, None)]


def test_real_37_text_parses_record_lines_without_batch_headers(real_kraft_dir: Path) -> None:
    parsed = parse_lines((real_kraft_dir / TEXT_37).read_text())
    assert parsed.problems == []
    assert [(r.line_no, r.offset) for r in parsed.records] == [
        (11, 53), (14, 3004), (15, 3005), (16, 3006), (17, 3007), (18, 3008),
    ]
    assert all(r.batch is None and r.kind == "data" for r in parsed.records)
    assert parsed.records[0].append_time_ms == 1710772983743
    assert parsed.records[1].append_time_ms == 1710774451597
    assert parsed.records[2].payload is not None and '"name":"retention.ms"' in parsed.records[2].payload


def test_metadata_shell_transcript_is_not_dump_text(real_kraft_dir: Path) -> None:
    raw = (real_kraft_dir / TEXT_SHELL).read_bytes()
    assert not looks_like_dump_text(raw[:4096])
    parsed = parse_lines(raw)
    assert parsed.records == []
    lines = raw.decode().splitlines()
    # Every line that is not a comment or a prompt ("$ …", ">> …") lands in quarantine, verbatim.
    expected = [i + 1 for i, line in enumerate(lines) if not line.startswith(("#", "$ ", ">> "))]
    assert [p.line_no for p in parsed.problems] == expected
    assert {p.reason_code for p in parsed.problems} == {"TEXT_PARSE_ERROR"}
    assert [p.raw for p in parsed.problems] == [lines[i - 1] for i in expected]


def test_sniffing_real_files(real_kraft_dir: Path) -> None:
    for path in sorted(real_kraft_dir.iterdir()):
        head = path.read_bytes()[:4096]
        expected = path.name.startswith("text__") and "dump-log" in path.name
        assert looks_like_dump_text(head) is expected, path.name


# ---------------------------------------------------------------------------- current layout


def test_current_layout_with_control_records_and_snapshot_context() -> None:
    voters = (
        '{"version":0,"voters":[{"voterId":1,"voterDirectoryId":"AAAAAAAAAAAAAAAAAAAAAQ",'
        '"endpoints":[{"name":"CONTROLLER","host":"h","port":9093}],'
        '"kRaftVersionFeature":{"minSupportedVersion":0,"maxSupportedVersion":1}}]}'
    )
    text = "\n".join([
        "Dumping /data/__cluster_metadata-0/00000000000000000000.log",
        "Log starting offset: 0",
        hdr(0, 2, ctl=True),
        rec(0, 'LeaderChange: {"version":0,"leaderId":1,"voters":[{"voterId":1}],"grantingVoters":[{"voterId":1}]}'),
        rec(1, 'KRaftVersion {"version":0,"kRaftVersion":1}'),
        rec(2, "KRaftVoters " + voters),
        hdr(3, 3, ctl=True, p=200),
        rec(3, "controlType: LEADER_CHANGE(2)"),
        hdr(4, 5, p=300, t=1700000000500),
        rec(4, "payload: " + TOPIC, t=1700000000400),
        rec(5, "payload: " + NOOP, t=1700000000500),
        "Dumping /data/__cluster_metadata-0/00000000000000000006-0000000003.checkpoint",
        "Snapshot end offset: 6, epoch: 3",
        hdr(0, 0, ctl=True),
        rec(0, 'SnapshotHeader {"version":0,"lastContainedLogTimestamp":1700000000500}'),
        hdr(1, 1, p=80),
        rec(1, "payload: " + TOPIC),
        hdr(2, 2, ctl=True, p=160),
        rec(2, 'SnapshotFooter {"version":0}'),
        "Dumping /data/bootstrap.checkpoint",
        "KRaft bootstrap snapshot",
        hdr(0, 0, ctl=True),
        rec(0, 'SnapshotHeader {"version":0,"lastContainedLogTimestamp":0}'),
    ])
    parsed = parse_lines(text)
    assert parsed.problems == []
    got = [(r.line_no, r.kind, r.offset, r.control_type, r.source_kind, r.snapshot_end_offset, r.snapshot_epoch)
           for r in parsed.records]
    assert got == [
        (4, "control", 0, "LEADER_CHANGE", "log", None, None),
        (5, "control", 1, "KRAFT_VERSION", "log", None, None),
        (6, "control", 2, "KRAFT_VOTERS", "log", None, None),
        (8, "control", 3, "LEADER_CHANGE", "log", None, None),
        (10, "data", 4, None, "log", None, None),
        (11, "data", 5, None, "log", None, None),
        (15, "control", 0, "SNAPSHOT_HEADER", "snapshot", 6, 3),
        (17, "data", 1, None, "snapshot", 6, 3),
        (19, "control", 2, "SNAPSHOT_FOOTER", "snapshot", 6, 3),
        (23, "control", 0, "SNAPSHOT_HEADER", "bootstrap", 0, 0),
    ]
    by_line = {r.line_no: r for r in parsed.records}
    assert by_line[6].control_json == voters
    assert by_line[8].control_json is None and by_line[8].control_type_id == 2
    # append_time is the batch's timestamp, not the record's.
    assert by_line[10].append_time_ms == 1700000000500
    assert by_line[10].batch is not None and (by_line[10].batch.base_offset, by_line[10].batch.last_offset) == (4, 5)


def test_skip_record_metadata_layouts_assign_offsets_from_the_batch() -> None:
    text = "\n".join([
        hdr(10, 12),
        " payload: " + TOPIC,          # 2.8 .. 3.x: blank prefix
        "| payload: " + NOOP,          # newer tools: "| " prefix
        "payload: " + NOOP,
        hdr(13, 13, ctl=True),
        "",                            # a control record under --skip-record-metadata
        hdr(14, 14),
        " payload: " + NOOP,
    ])
    parsed = parse_lines(text)
    assert parsed.problems == []
    assert [(r.offset, r.kind, r.line_no) for r in parsed.records] == [
        (10, "data", 2), (11, "data", 3), (12, "data", 4), (13, "control", 6), (14, "data", 8),
    ]


def test_windows_paths_and_file_context_switches() -> None:
    parsed = parse_lines([
        r"Dumping C:\kafka\data\__cluster_metadata-0\00000000000000000100-0000000004.checkpoint",
        hdr(0, 0),
        rec(0, "payload: " + TOPIC),
        r"Dumping C:\kafka\data\__cluster_metadata-0\00000000000000000100.log",
        hdr(100, 100, e=4),
        rec(100, "payload: " + TOPIC),
    ])
    assert parsed.problems == []
    assert [(r.offset, r.source_kind, r.snapshot_end_offset, r.snapshot_epoch) for r in parsed.records] == [
        (0, "snapshot", 100, 4), (100, "log", None, None),
    ]


def test_blank_lines_are_control_records_only_when_the_batch_prints_nothing_else() -> None:
    text = "\n".join([
        hdr(0, 0, ctl=True),
        "",
        "",
        rec(0, "controlType: LEADER_CHANGE(2)"),
        hdr(1, 2, ctl=True),
        "",
        "",
        "",   # one more blank than the batch has records: just a blank line
    ])
    parsed = parse_lines(text)
    assert parsed.problems == []
    assert [(r.offset, r.line_no, r.control_type) for r in parsed.records] == [
        (0, 4, "LEADER_CHANGE"), (1, 6, None), (2, 7, None),
    ]


def test_record_outside_the_preceding_batch_gets_no_batch_fields() -> None:
    text = "\n".join([hdr(0, 1), rec(0, "payload: " + NOOP), rec(7, "payload: " + NOOP, t=1700000009999)])
    parsed = parse_lines(text)
    assert parsed.problems == []
    first, gap = parsed.records
    assert first.batch is not None and first.batch.base_offset == 0
    assert gap.offset == 7 and gap.batch is None and gap.append_time_ms == 1700000009999


# ---------------------------------------------------------------------------- skipped lines


@pytest.mark.parametrize(
    "line",
    [
        "# a comment",
        "$ bin/kafka-dump-log.sh --cluster-metadata-decoder --files 00000000000000000000.log",
        "user@host:~/kafka$ ./bin/kafka-dump-log.sh --files x.log",
        "[root@kafka-0 bin]# ./kafka-dump-log.sh --files x.log",
        "bash-5.1$ ls",
        "kubectl exec -it c-0 -- bin/kafka-dump-log.sh --cluster-metadata-decoder --files x.log",
        "Non-consecutive offsets in /tmp/x/00000000000000000000.log",
        "  12 is followed by 20",
        "```text",
    ],
)
def test_prompts_comments_and_diagnostics_are_skipped(line: str) -> None:
    token = tokenize_line(1, line)
    assert isinstance(token, SkippedLine), token
    parsed = parse_lines(line)
    assert parsed.records == [] and parsed.problems == [] and parsed.skipped == 1


def test_tool_lines_behind_a_prompt_or_quote_marker_are_read() -> None:
    lines = ["> " + hdr(4, 4), "> " + rec(4, "payload: " + NOOP), "$ ls -l"]
    parsed = parse_lines(lines)
    assert parsed.problems == [] and parsed.skipped == 1
    (record,) = parsed.records
    assert (record.offset, record.line_no, record.raw) == (4, 2, lines[1])
    assert record.batch is not None and record.batch.line_no == 1


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("hello world", "not a line of kafka-dump-log"),
        ("offset: 12 position: 4096", "not a line of kafka-dump-log"),  # an index file's dump
        ("| offset: x CreateTime: 1 keySize: -1 valueSize: 3", "does not match"),
        ("baseOffset: 0 lastOffset: zero partitionLeaderEpoch: 1 isControl: false", "lastOffset"),
        ("baseOffset: 5 lastOffset: 4 partitionLeaderEpoch: 1 isControl: false", "below baseOffset"),
        ("baseOffset: 0 lastOffset: 0 partitionLeaderEpoch: 1", "lacks isControl"),
        ("baseOffset: 0 lastOffset: 0 partitionLeaderEpoch: 1 isControl: maybe", "isControl"),
        ("baseOffset: 0 lastOffset: 0 partitionLeaderEpoch: 1 isControl: false color: red", "unknown field"),
        (rec(0, "payload: not-json"), "not a JSON object"),
        (rec(0, "key: abc payload: x"), "has a key"),
        (rec(0, "something else"), "unrecognised record content"),
    ],
)
def test_malformed_lines_are_quarantined_with_the_raw_line(line: str, fragment: str) -> None:
    token = tokenize_line(3, line)
    assert isinstance(token, BadLine)
    parsed = parse_lines(["", "", line])
    assert parsed.records == []
    (problem,) = parsed.problems
    assert problem.reason_code == "TEXT_PARSE_ERROR"
    assert problem.line_no == 3 and problem.raw == line
    assert fragment in problem.reason


def test_transaction_markers_and_unknown_control_types_are_quarantined() -> None:
    lines = [
        hdr(0, 2, ctl=True),
        rec(0, "controlType: COMMIT(1)"),
        rec(1, "endTxnMarker: ABORT coordinatorEpoch: 0"),
        rec(2, "controlType: UNKNOWN(-1)"),
    ]
    parsed = parse_lines(lines)
    assert parsed.records == []
    assert [(p.line_no, p.reason_code, p.raw) for p in parsed.problems] == [
        (2, "UNKNOWN_CONTROL_TYPE", lines[1]), (3, "UNKNOWN_CONTROL_TYPE", lines[2]), (4, "UNKNOWN_CONTROL_TYPE", lines[3]),
    ]


def test_legacy_batches_are_bad_magic() -> None:
    parsed = parse_lines([
        "offset: 3 position: 0 CreateTime: 1 isvalid: true keysize: -1 valuesize: 3 magic: 1",
        hdr(0, 0).replace("magic: 2", "magic: 1"),
    ])
    assert [p.reason_code for p in parsed.problems] == ["BAD_MAGIC", "BAD_MAGIC"]


def test_tool_decode_errors_are_quarantined_with_their_offset() -> None:
    parsed = parse_lines([
        hdr(5, 6),
        rec(5, "payload: Error at 5, skipping. Unknown metadata id 99"),
        " payload: Error at 6, skipping. Unknown metadata id 98",
    ])
    assert parsed.records == []
    assert [(p.reason_code, p.offset, p.line_no) for p in parsed.problems] == [
        ("RECORD_DECODE_ERROR", 5, 2), ("RECORD_DECODE_ERROR", 6, 3),
    ]
    assert "Unknown metadata id 99" in parsed.problems[0].reason


def test_invalid_batches_and_trailing_bytes_are_quarantined() -> None:
    parsed = parse_lines([
        hdr(0, 0, v=False),
        rec(0, "payload: " + NOOP),
        hdr(1, 1),
        rec(1, "payload: " + NOOP),
        "Found 37 invalid bytes at the end of 00000000000000000000.log",
    ])
    assert [r.offset for r in parsed.records] == [1]
    assert [(p.reason_code, p.line_no, p.offset) for p in parsed.problems] == [
        ("CRC_MISMATCH", 1, 0),
        ("CRC_MISMATCH", 2, 0),
        ("TRUNCATED_BATCH", 5, None),
    ]
    assert "(100 bytes)" in parsed.problems[0].reason
    assert "37 invalid bytes at the end of 00000000000000000000.log" in parsed.problems[2].reason


def test_blank_control_records_of_an_invalid_batch_are_quarantined() -> None:
    parsed = parse_lines([hdr(0, 1, ctl=True, v=False), "", "", hdr(2, 2, ctl=True), ""])
    assert [(r.offset, r.line_no) for r in parsed.records] == [(2, 5)]
    assert [(p.reason_code, p.line_no, p.offset) for p in parsed.problems] == [
        ("CRC_MISMATCH", 1, 0), ("CRC_MISMATCH", 2, 0), ("CRC_MISMATCH", 3, 1),
    ]


def test_records_whose_offset_cannot_be_known_are_quarantined() -> None:
    parsed = parse_lines([
        " payload: " + NOOP,           # no batch header before it
        hdr(0, 0),
        " payload: " + NOOP,           # offset 0
        " payload: " + NOOP,           # a second record in a 1-record batch
    ])
    assert [r.offset for r in parsed.records] == [0]
    assert [(p.line_no, p.reason_code) for p in parsed.problems] == [(1, "TEXT_PARSE_ERROR"), (4, "TEXT_PARSE_ERROR")]
    assert "offset unknown" in parsed.problems[0].reason


def test_record_kind_must_match_its_batch() -> None:
    parsed = parse_lines([
        hdr(0, 0, ctl=True),
        rec(0, "payload: " + NOOP),
        hdr(1, 1),
        rec(1, 'SnapshotFooter {"version":0}'),
        hdr(2, 2),
        rec(2, ""),
    ])
    assert parsed.records == []
    assert [p.line_no for p in parsed.problems] == [2, 4, 6]
    assert "data record inside a control batch" in parsed.problems[0].reason
    assert "control record inside a data batch" in parsed.problems[1].reason


def test_tokens_carry_batch_header_fields() -> None:
    token = tokenize_line(1, hdr(7, 9, e=12, p=701, t=1614382712158))
    assert isinstance(token, BatchLine)
    assert (token.base_offset, token.last_offset, token.count, token.leader_epoch) == (7, 9, 3, 12)
    assert (token.position, token.max_timestamp, token.size, token.crc, token.is_valid) == (701, 1614382712158, 100, 12345, True)
    record = tokenize_line(2, rec(8, "payload: " + NOOP))
    assert isinstance(record, RecordLine)
    assert (record.offset, record.value_size, record.key_size, record.payload) == (8, 10, -1, NOOP)


@pytest.mark.parametrize("line", [
    hdr(7, 9, e=12, p=701, t=1614382712158),
    hdr(0, 0, ctl=True, v=False),
    hdr(3, 3).replace(" deleteHorizonMs: OptionalLong.empty", ""),
    hdr(3, 3).replace("CreateTime", "LogAppendTime"),
])
def test_exact_and_loose_header_layouts_parse_alike(line: str) -> None:
    assert _BATCH_FAST_RE.match(line) and not _BATCH_FAST_RE.match(line.replace(": ", ":  "))
    exact = tokenize_line(1, line)
    loose = tokenize_line(1, line.replace(": ", ":  "))  # not the tool's exact spacing: generic parser
    assert isinstance(exact, BatchLine) and isinstance(loose, BatchLine)
    fields = [f for f in BatchLine.__dataclass_fields__ if f != "raw"]
    assert [getattr(exact, f) for f in fields] == [getattr(loose, f) for f in fields]


def test_bytes_crlf_and_bom_input() -> None:
    text = "\ufeff" + hdr(0, 0) + "\r\n" + rec(0, "payload: " + NOOP) + "\r\n"
    parsed = parse_lines(text.encode("utf-8"))
    assert parsed.problems == []
    assert [(r.offset, r.payload) for r in parsed.records] == [(0, NOOP)]


@pytest.mark.parametrize(
    "sample, expected",
    [
        (b"", False),
        (b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00Y", False),
        (b"# comment\n$ ./bin/kafka-dump-log.sh --files a.log\nDumping a.log\n", True),
        (b"| offset: 3 CreateTime: 1 keySize: -1 valueSize: 4 sequence: -1 headerKeys: [] payload: {", True),
        (b"baseOffset: 0 lastOffset: 0 count: 1 baseSeq", True),  # cut in the middle of the first line
        (b"Starting offset: 0\n", True),
        (b"# only a comment\n", False),
        (b"hello\nDumping a.log\n", False),
        ("Dumping caf\u00e9".encode()[:-1], True),  # a character cut at the end of the sample
        (b"\xff\xfe\xfd garbage that is not utf-8 at all, and long enough", False),
    ],
)
def test_looks_like_dump_text(sample: bytes, expected: bool) -> None:
    assert looks_like_dump_text(sample) is expected
