"""Ingest of ``kafka-dump-log --cluster-metadata-decoder`` text output.

Many teams only keep the text Kafka's dump tool printed, not the segment files. This module reads
that text back into the same bronze Arrow batches the binary decoder produces, as far as the text
carries the information.

Two record layouts exist and are both accepted, also mixed and as excerpts (gaps are fine). The
tool prints a batch header line per batch (``baseOffset: … lastOffset: … count: … partitionLeaderEpoch:
… isControl: … [deleteHorizonMs: …] position: … CreateTime: … size: … crc: … isvalid: …``; excerpts
may lack them) followed by one line per record:

* with record metadata (the default): ``| offset: N CreateTime: T keySize: K valueSize: V sequence:
  S headerKeys: [] …`` ending in ``payload: {json}`` for a metadata record, or for a control record
  in ``LeaderChange: {json}``, ``SnapshotHeader {json}``, ``SnapshotFooter {json}``, ``KRaftVersion
  {json}``, ``KRaftVoters {json}``, ``controlType: NAME(id)`` (tools that do not decode the type)
  or ``endTxnMarker: …`` (transaction markers, never valid in the metadata log);
* with ``--skip-record-metadata`` (the Kafka 2.8 example is one): `` payload: {json}`` (newer tools:
  ``| payload: {json}``) for a metadata record and an empty line for a control record.

Rules implemented here (each one is tested):

* **Line numbers are positions.** ``source_position`` of every row is the 1-based line number of its
  record line (or blank line) in the text, not a byte position: the text has no bytes of the file.
* **Skipped, not quarantined:** blank lines, comments (``#``), markdown fences, shell prompt lines
  (``$ cmd``, ``user@host:~$ cmd``, ``>> cmd``; a tool line behind such a prefix, e.g. a quoted
  ``> | offset: …``, is read), the command line that ran the tool, ``Dumping <file>``,
  ``Starting offset:``/``Log starting offset:``/``Snapshot end offset:``/``KRaft bootstrap
  snapshot`` headers and the tool's notes about non-consecutive offsets.
* **File context:** ``Dumping <path>`` and the snapshot header lines say whether the records that
  follow come from a log segment (``metadata_log`` rows), a snapshot or ``bootstrap.checkpoint``
  (``snapshot_records`` rows, ``position_in_snapshot`` = the in-file offset); control records go to
  ``metadata_control`` with that ``source_kind``. Without either, records are log records.
* **Batch fields:** ``batch_base_offset``/``batch_last_offset``/``batch_leader_epoch`` come from the
  batch header line the record follows, and are null without one (a record whose offset lies
  outside the preceding header's range does not belong to it). ``append_time`` is the header's
  timestamp (the batch ``maxTimestamp``) or, without a header, the record's ``CreateTime``.
* **Offsets:** the record line's ``offset:``; under ``--skip-record-metadata`` the header's
  ``baseOffset`` plus the record's index in the batch. A record whose offset cannot be known
  (no header before it, or more records than the header counts) goes to quarantine.
* **Control records:** ``control_type``/``control_type_id`` and, when the JSON was printed, the
  struct column and ``payload_json``; an empty line (``--skip-record-metadata``) after a control
  batch header counts as one of its records, with null type and content, unless the batch also has
  record lines. ``key_version`` is always null: the tool does not print it.
* **Payloads:** normalised through :func:`~kraft_replay.codec.jsonfmt.from_dump_json` and
  :func:`~kraft_replay.codec.jsonfmt.to_dump_json`, so ``payload_json`` and the payload struct equal
  what the binary decoder gives for the same record.
* **Nothing dropped:** every other line becomes a row or a quarantine row (raw = the line in UTF-8,
  kept in ``ingest_quarantine_raw``; ``length`` = its byte length): ``TEXT_PARSE_ERROR`` for lines and JSON that do not parse or do not
  fit their batch/schema; ``UNKNOWN_RECORD_TYPE``/``UNSUPPORTED_RECORD_VERSION`` for payloads of
  unknown types/versions; ``UNKNOWN_CONTROL_TYPE`` for transaction markers and unknown control
  types; ``RECORD_DECODE_ERROR`` where the tool printed ``Error at N, skipping. …`` instead of a
  payload; ``CRC_MISMATCH`` for a header with ``isvalid: false`` and each record line of that batch;
  ``TRUNCATED_BATCH`` for ``Found N invalid bytes at the end of <file>``; ``BAD_MAGIC`` for legacy
  (magic 0/1) batches.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any, Literal

import pyarrow as pa

from kraft_replay.codec.arrow_payload import build_control_columns, build_payload_columns
from kraft_replay.codec.batch import ATTR_DELETE_HORIZON, Corruption, Record, RecordBatch, iter_batches
from kraft_replay.codec.control import (
    CONTROL_TYPE_IDS,
    CONTROL_TYPES,
    CONTROL_VALUE_VERSION,
    ControlDecodeError,
    ControlRecord,
    control_json,
    decode_control_record,
)
from kraft_replay.codec.files import FileKind, classify
from kraft_replay.codec.jsonfmt import DumpJsonError, from_dump_json, to_dump_json
from kraft_replay.codec.jsonfmt import message_from_json
from kraft_replay.codec.records import MetadataRecord, RecordDecodeError, decode_record_value
from kraft_replay.codec.schema import RECORD_TYPES, RECORD_TYPES_BY_TOOL_NAME
from kraft_replay.ingest.bronze import ChunkStats, DecodedChunk
from kraft_replay.ingest.schemas import (
    CONTROL_SCHEMA,
    DECODED_QUARANTINE_SCHEMA,
    LOG_SCHEMA,
    OFFSET_BUCKET_SIZE,
    SNAPSHOT_SCHEMA,
    TIMESTAMP,
)

__all__ = [
    "looks_like_dump_text",
    "parse_dump_text",
    "parse_lines",
    "render_dump_text",
    "control_from_dump_json",
    "tokenize",
    "tokenize_line",
]

SourceKind = Literal["log", "snapshot", "bootstrap"]
# What the readers accept: the whole text, its bytes (UTF-8), or its lines.
TextInput = str | bytes | bytearray | memoryview | Iterable[str]

# Labels the dump tool prints in front of a control record's JSON, by control type name.
CONTROL_LABELS: dict[str, str] = {
    "LeaderChange": "LEADER_CHANGE",
    "SnapshotHeader": "SNAPSHOT_HEADER",
    "SnapshotFooter": "SNAPSHOT_FOOTER",
    "KRaftVersion": "KRAFT_VERSION",
    "KRaftVoters": "KRAFT_VOTERS",
}
CONTROL_LABEL_OF_TYPE: dict[str, str] = {name: label for label, name in CONTROL_LABELS.items()}

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime", "NoTimestampType")


# --------------------------------------------------------------------------------------------
# Tokens: one per input line
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SkippedLine:
    """A line that carries no record: blank, comment, prompt, command, tool diagnostics."""

    line_no: int
    raw: str
    why: str


@dataclass(frozen=True, slots=True)
class FileLine:
    """``Dumping <path>``: the tool starts on a new file; the path tells segment from snapshot."""

    line_no: int
    raw: str
    path: str
    source_kind: SourceKind
    snapshot_end_offset: int | None
    snapshot_epoch: int | None


@dataclass(frozen=True, slots=True)
class ContextLine:
    """``Starting offset: N`` / ``Log starting offset: N`` / ``Snapshot end offset: N, epoch: E`` /
    ``KRaft bootstrap snapshot``."""

    line_no: int
    raw: str
    source_kind: SourceKind | None  # None: a log header that does not override a ``Dumping`` path
    start_offset: int | None = None
    snapshot_end_offset: int | None = None
    snapshot_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class BatchLine:
    """A batch header line (format v2)."""

    line_no: int
    raw: str
    base_offset: int
    last_offset: int
    count: int | None
    leader_epoch: int
    is_control: bool
    is_transactional: bool | None
    position: int | None
    timestamp_type: str | None
    max_timestamp: int | None
    size: int | None
    magic: int | None
    compression: str | None
    crc: int | None
    is_valid: bool | None


@dataclass(frozen=True, slots=True)
class RecordLine:
    """A record line: a metadata record (``payload``), a control record, metadata with nothing after
    it (``bare``: a control record whose type was not printed), or a decode error the tool printed
    in place of the payload (``tool_error``)."""

    line_no: int
    raw: str
    offset: int | None
    timestamp: int | None
    timestamp_type: str | None
    key_size: int | None
    value_size: int | None
    kind: Literal["data", "control", "bare", "tool_error"]
    payload: str | None = None  # data: the JSON text after ``payload:``
    control_type: str | None = None  # control: LEADER_CHANGE, … (None when the tool printed none)
    control_type_id: int | None = None
    control_json: str | None = None  # control: the JSON the tool printed, when it printed one
    message: str | None = None  # tool_error: the tool's message


@dataclass(frozen=True, slots=True)
class BlankLine:
    """An empty line: the whole output for a control record under ``--skip-record-metadata``."""

    line_no: int
    raw: str


@dataclass(frozen=True, slots=True)
class TrailingBytesLine:
    """``Found N invalid bytes at the end of <file>``: the tool stopped before a bad/partial tail."""

    line_no: int
    raw: str
    length: int
    file_name: str


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that is none of the above (quarantined with ``reason_code``)."""

    line_no: int
    raw: str
    reason: str
    reason_code: str = "TEXT_PARSE_ERROR"


Token = SkippedLine | FileLine | ContextLine | BatchLine | RecordLine | BlankLine | TrailingBytesLine | BadLine


# --------------------------------------------------------------------------------------------
# Line grammar
# --------------------------------------------------------------------------------------------

_INT = r"-?\d+"
_TS_TYPES = "|".join(TIMESTAMP_TYPES)

# "| offset: 53 CreateTime: 1710772983743 keySize: -1 valueSize: 308 sequence: -1 headerKeys: []"
_RECORD_META_RE = re.compile(
    rf"^\|?\s*offset:\s*(?P<offset>{_INT})\s+(?P<ts_type>{_TS_TYPES}):\s*(?P<ts>{_INT})"
    rf"\s+keySize:\s*(?P<key_size>{_INT})\s+valueSize:\s*(?P<value_size>{_INT})"
    rf"(?:\s+sequence:\s*(?P<sequence>{_INT})\s+headerKeys:\s*\[(?P<header_keys>[^\]]*)\])?"
    rf"(?:\s+isValid:\s*(?:true|false)\s+crc:\s*\d+\}}?)?"
)
# What follows the metadata (or starts the line under --skip-record-metadata).
_PAYLOAD_RE = re.compile(r"^\|?\s*payload:\s?(?P<payload>.*)$", re.S)
_KEY_RE = re.compile(r"^\|?\s*key:\s")
_CONTROL_JSON_RE = re.compile(
    r"^(?P<label>LeaderChange|SnapshotHeader|SnapshotFooter|KRaftVersion|KRaftVoters):?\s+(?P<json>\{.*)$", re.S
)
_CONTROL_TYPE_RE = re.compile(r"^controlType:\s*(?P<name>[A-Z_]+)\((?P<id>-?\d+)\)$")
_END_TXN_RE = re.compile(r"^endTxnMarker:\s*(?P<kind>\w+)\s+coordinatorEpoch:\s*(?P<epoch>-?\d+)$")
_TOOL_ERROR_RE = re.compile(r"^Error at (?:offset )?(?P<offset>-?\d+), skipping\.\s?(?P<msg>.*)$", re.S)

# "key: value" pairs of a batch header line; values never contain blanks.
_PAIR_RE = re.compile(r"(?P<key>[A-Za-z]+):\s*(?P<value>\S+)")
_BATCH_REQUIRED = ("baseOffset", "lastOffset", "partitionLeaderEpoch", "isControl")
_BATCH_KNOWN = frozenset(
    {
        "baseOffset", "lastOffset", "count", "baseSequence", "lastSequence", "producerId",
        "producerEpoch", "partitionLeaderEpoch", "isTransactional", "isControl", "deleteHorizonMs",
        "position", "size", "magic", "compresscodec", "crc", "isvalid", *TIMESTAMP_TYPES,
    }
)

_DUMPING_RE = re.compile(r"^Dumping\s+(?P<path>.+?)\s*$")
_START_OFFSET_RE = re.compile(r"^(?:Log )?[Ss]tarting offset:\s*(?P<offset>-?\d+)\s*$")
_SNAPSHOT_RE = re.compile(r"^Snapshot end offset:\s*(?P<offset>-?\d+),\s*epoch:\s*(?P<epoch>-?\d+)\s*$")
_BOOTSTRAP_RE = re.compile(r"^KRaft bootstrap snapshot\s*$")
_TRAILING_RE = re.compile(r"^Found\s+(?P<n>\d+)\s+invalid bytes at the end of\s+(?P<file>.+?)\s*$")
_DIAGNOSTIC_RES = (
    re.compile(r"^Non-consecutive offsets in\s+\S"),
    re.compile(r"^\s*-?\d+ is followed by -?\d+\s*$"),
    re.compile(r"^Ignoring unknown file\s"),
)
# A shell prompt: an optional "[user@host dir]" block, then a first word ending in $, #, % or >
# (or ">>" for the metadata shell), then blank and a command.
_PROMPT_RE = re.compile(r"^\s*(?:\[[^\]]*\])?\S*?(?:\$|#|%|>>?)\s+(?P<rest>\S.*)$")
_LEGACY_BATCH_RE = re.compile(rf"^offset:\s*{_INT}\s+position:\s*\d+\s+(?:{_TS_TYPES}):")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")  # bytes that were not UTF-8 (surrogate escapes)
_COMMAND_RE = re.compile(r"kafka-dump-log(?:\.sh|\.bat)?\b")


def _file_line(line_no: int, raw: str, path: str) -> FileLine:
    """``Dumping <path>``: the file name says segment, snapshot or bootstrap (facts §0, §4)."""
    name = PureWindowsPath(path).name if "\\" in path else PurePosixPath(path).name
    kf = classify(name)
    if kf.kind is FileKind.BOOTSTRAP:
        return FileLine(line_no, raw, path, "bootstrap", 0, 0)
    if kf.kind is FileKind.SNAPSHOT:
        return FileLine(line_no, raw, path, "snapshot", kf.end_offset, kf.epoch)
    return FileLine(line_no, raw, path, "log", None, None)


def _bool(value: str) -> bool | None:
    return {"true": True, "false": False}.get(value.lower())


_INT_RE = re.compile(_INT)


def _int_or_none(value: str | None) -> int | None:
    if value is None or not _INT_RE.fullmatch(value):
        return None
    return int(value)


# The header line exactly as the tool prints it for a magic-2 batch (fast path of _batch_line).
_BATCH_FAST_RE = re.compile(
    r"^baseOffset: (-?\d+) lastOffset: (-?\d+) count: (\d+) baseSequence: -?\d+ lastSequence: -?\d+ "
    r"producerId: -?\d+ producerEpoch: -?\d+ partitionLeaderEpoch: (-?\d+) isTransactional: (true|false) "
    rf"isControl: (true|false)(?: deleteHorizonMs: \S+)? position: (\d+) ({_TS_TYPES}): (-?\d+) "
    r"size: (\d+) magic: 2 compresscodec: (\S+) crc: (\d+) isvalid: (true|false)$"
)


def _batch_line(line_no: int, raw: str, text: str) -> BatchLine | BadLine:
    """Parse ``baseOffset: … isvalid: …``; every token must be a known ``key: value`` pair."""
    m = _BATCH_FAST_RE.match(text)
    if m and int(m[2]) >= int(m[1]):
        g = m.groups()
        return BatchLine(line_no, raw, int(g[0]), int(g[1]), int(g[2]), int(g[3]), g[5] == "true", g[4] == "true",
                         int(g[6]), g[7], int(g[8]), int(g[9]), 2, g[10], int(g[11]), g[12] == "true")
    found = _PAIR_RE.findall(text)
    leftover = _PAIR_RE.sub("", text).strip()
    if leftover:
        return BadLine(line_no, raw, f"unexpected text {leftover!r} in a batch header line")
    pairs: dict[str, str] = dict(found)
    unknown = [k for k, _ in found if k not in _BATCH_KNOWN]
    if unknown:
        return BadLine(line_no, raw, f"unknown field {unknown[0]!r} in a batch header line")
    if len(pairs) != len(found):
        return BadLine(line_no, raw, "a field is repeated in a batch header line")
    missing = [k for k in _BATCH_REQUIRED if k not in pairs]
    if missing:
        return BadLine(line_no, raw, f"batch header line lacks {', '.join(missing)}")
    ints: dict[str, int | None] = {}
    for key in ("baseOffset", "lastOffset", "partitionLeaderEpoch", "position", "size", "magic", "crc",
                *TIMESTAMP_TYPES):
        if key in pairs:
            ints[key] = _int_or_none(pairs[key])
            if ints[key] is None:
                return BadLine(line_no, raw, f"batch header field {key}: {pairs[key]!r} is not an integer")
    is_control = _bool(pairs["isControl"])
    if is_control is None:
        return BadLine(line_no, raw, f"batch header field isControl: {pairs['isControl']!r} is not true/false")
    base, last, leader_epoch = ints["baseOffset"], ints["lastOffset"], ints["partitionLeaderEpoch"]
    assert base is not None and last is not None and leader_epoch is not None
    if last < base:
        return BadLine(line_no, raw, f"batch header lastOffset {last} is below baseOffset {base}")
    ts_type = next((t for t in TIMESTAMP_TYPES if t in pairs), None)
    count = _int_or_none(pairs.get("count"))  # the tool prints "null" when the count is unknown
    if count is not None and count < 0:
        return BadLine(line_no, raw, f"batch header count {count} is negative")
    magic = ints.get("magic")
    if magic is not None and magic != 2:
        return BadLine(line_no, raw, f"batch magic {magic}: KRaft writes only magic 2", "BAD_MAGIC")
    return BatchLine(
        line_no=line_no,
        raw=raw,
        base_offset=base,
        last_offset=last,
        count=count,
        leader_epoch=leader_epoch,
        is_control=is_control,
        is_transactional=_bool(pairs.get("isTransactional", "")),
        position=ints.get("position"),
        timestamp_type=ts_type,
        max_timestamp=ints.get(ts_type) if ts_type else None,
        size=ints.get("size"),
        magic=magic,
        compression=pairs.get("compresscodec"),
        crc=ints.get("crc"),
        is_valid=_bool(pairs.get("isvalid", "")),
    )


def _derive(
    base: RecordLine,
    kind: Literal["data", "control", "bare", "tool_error"],
    *,
    offset: int | None = None,
    payload: str | None = None,
    control_type: str | None = None,
    control_type_id: int | None = None,
    control_json: str | None = None,
    message: str | None = None,
) -> RecordLine:
    """``base`` (the record metadata) with its content; ``offset`` replaces the base's when given."""
    return RecordLine(base.line_no, base.raw, base.offset if offset is None else offset, base.timestamp,
                      base.timestamp_type, base.key_size, base.value_size, kind, payload, control_type,
                      control_type_id, control_json, message)


def _record_content(base: RecordLine, rest: str) -> RecordLine | BadLine:
    """Parse what follows the record metadata (or the whole line under --skip-record-metadata);
    ``base`` carries the metadata (all None without it) and ``kind="bare"``."""
    has_meta = base.offset is not None
    m = _PAYLOAD_RE.match(rest)
    if m:
        payload = m["payload"].rstrip()
        err = _TOOL_ERROR_RE.match(payload)
        if err:
            offset = base.offset if has_meta else int(err["offset"])
            return _derive(base, "tool_error", offset=offset, message=payload)
        if not payload.startswith("{"):
            return BadLine(base.line_no, base.raw, "payload is not a JSON object")
        return _derive(base, "data", payload=payload)
    if _KEY_RE.match(rest):
        return BadLine(base.line_no, base.raw,
                       "record has a key: metadata records have none (not a cluster-metadata dump?)")
    if has_meta:
        if not rest:
            # Metadata only: a control record whose type was not printed (decided by its batch).
            return base
        m = _CONTROL_JSON_RE.match(rest)
        if m:
            name = CONTROL_LABELS[m["label"]]
            return _derive(base, "control", control_type=name, control_type_id=CONTROL_TYPE_IDS[name],
                           control_json=m["json"].rstrip())
        m = _CONTROL_TYPE_RE.match(rest)
        if m:
            type_id = int(m["id"])
            if type_id not in CONTROL_TYPES:
                return BadLine(base.line_no, base.raw,
                               f"control type {m['name']}({type_id}) is not valid in the metadata log",
                               "UNKNOWN_CONTROL_TYPE")
            return _derive(base, "control", control_type=CONTROL_TYPES[type_id].name, control_type_id=type_id)
        m = _END_TXN_RE.match(rest)
        if m:
            return BadLine(base.line_no, base.raw, f"transaction marker {m['kind']} is not valid in the metadata log",
                           "UNKNOWN_CONTROL_TYPE")
    return BadLine(base.line_no, base.raw, f"unrecognised record content {rest[:80]!r}")


def _tool_line(line_no: int, raw: str, stripped: str) -> Token | None:
    """Batch header or record line, else None."""
    if stripped.startswith("baseOffset:"):
        return _batch_line(line_no, raw, stripped)
    m = _RECORD_META_RE.match(stripped)
    if m:
        base = RecordLine(line_no, raw, int(m["offset"]), int(m["ts"]), m["ts_type"], int(m["key_size"]),
                          int(m["value_size"]), "bare")
        return _record_content(base, stripped[m.end():].strip())
    if _PAYLOAD_RE.match(stripped):
        return _record_content(RecordLine(line_no, raw, None, None, None, None, None, "bare"), stripped)
    if stripped.startswith("|"):
        return BadLine(line_no, raw, "record line does not match '| offset: N CreateTime: T keySize: K valueSize: V …'")
    return None


def tokenize_line(line_no: int, raw: str) -> Token:
    """Classify one line of dump text (``raw`` without its line break)."""
    text = raw.rstrip("\r\n")
    stripped = text.strip()
    if not stripped:
        return BlankLine(line_no, raw)
    if _SURROGATE_RE.search(text):
        return BadLine(line_no, raw, "line is not valid UTF-8")
    token = _tool_line(line_no, raw, stripped)
    if token is not None:
        return token
    m = _DUMPING_RE.match(stripped)
    if m:
        return _file_line(line_no, raw, m["path"])
    m = _START_OFFSET_RE.match(stripped)
    if m:
        return ContextLine(line_no, raw, None, start_offset=int(m["offset"]))
    m = _SNAPSHOT_RE.match(stripped)
    if m:
        return ContextLine(
            line_no, raw, "snapshot", snapshot_end_offset=int(m["offset"]), snapshot_epoch=int(m["epoch"])
        )
    if _BOOTSTRAP_RE.match(stripped):
        return ContextLine(line_no, raw, "bootstrap", snapshot_end_offset=0, snapshot_epoch=0)
    m = _TRAILING_RE.match(stripped)
    if m:
        return TrailingBytesLine(line_no, raw, int(m["n"]), m["file"])
    if stripped.startswith("#"):
        return SkippedLine(line_no, raw, "comment")
    if stripped.startswith("```"):
        return SkippedLine(line_no, raw, "markdown fence")
    if any(r.match(stripped) for r in _DIAGNOSTIC_RES):
        return SkippedLine(line_no, raw, "tool diagnostic")
    m = _PROMPT_RE.match(text)
    if m:
        # "> | offset: …" (a quoted excerpt) or "$ baseOffset: …": the tool's line after a prefix.
        token = _tool_line(line_no, raw, m["rest"].strip())
        return token if token is not None else SkippedLine(line_no, raw, "shell prompt")
    if _COMMAND_RE.search(stripped):
        return SkippedLine(line_no, raw, "command line")
    if _LEGACY_BATCH_RE.match(stripped):
        return BadLine(line_no, raw, "legacy (magic 0/1) batch: never written by KRaft", "BAD_MAGIC")
    return BadLine(line_no, raw, "not a line of kafka-dump-log --cluster-metadata-decoder output")


def split_lines(text_or_lines: TextInput) -> Iterator[str]:
    """Lines of the input without line breaks. Bytes are decoded as UTF-8 with bad bytes kept as
    surrogate escapes, so a quarantined line keeps its exact bytes (see :func:`tokenize_line`)."""
    if isinstance(text_or_lines, (bytes, bytearray, memoryview)):
        text_or_lines = bytes(text_or_lines).decode("utf-8", errors="surrogateescape")
    if isinstance(text_or_lines, str):
        text = text_or_lines[1:] if text_or_lines.startswith("\ufeff") else text_or_lines
        yield from text.splitlines()
        return
    for line in text_or_lines:
        yield line.rstrip("\r\n")


def tokenize(text_or_lines: TextInput) -> Iterator[Token]:
    """One token per line, numbered from 1."""
    for line_no, line in enumerate(split_lines(text_or_lines), start=1):
        yield tokenize_line(line_no, line)


# --------------------------------------------------------------------------------------------
# State machine: tokens -> records with their batch and file context
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextRecord:
    """A record read from the text, with what the text says about its batch and file."""

    line_no: int
    raw: str
    kind: Literal["data", "control"]
    offset: int
    batch: BatchLine | None
    append_time_ms: int | None
    source_kind: SourceKind
    snapshot_end_offset: int | None
    snapshot_epoch: int | None
    payload: str | None = None
    control_type: str | None = None
    control_type_id: int | None = None
    control_json: str | None = None


@dataclass(frozen=True, slots=True)
class TextProblem:
    """A line that goes to quarantine."""

    line_no: int
    raw: str
    reason_code: str
    reason: str
    offset: int | None = None
    record: bool = False    # the line stands for one record (``ingest_quarantine.records`` = 1, else null)


@dataclass(slots=True)
class ParsedText:
    """Records and quarantined lines of one text, in line order; ``skipped`` counts skipped lines."""

    records: list[TextRecord] = field(default_factory=list)
    problems: list[TextProblem] = field(default_factory=list)
    skipped: int = 0


@dataclass(slots=True)
class _OpenBatch:
    header: BatchLine
    next_index: int = 0  # records of this batch seen so far
    pending_blanks: list[BlankLine] = field(default_factory=list)

    @property
    def expected(self) -> int:
        return self.header.count if self.header.count is not None else self.header.last_offset - self.header.base_offset + 1


class _Assembler:
    """Implements the batch/file context rules of this module (see the module docstring)."""

    def __init__(self) -> None:
        self.out = ParsedText()
        self.kind: SourceKind = "log"
        self.snapshot_end_offset: int | None = None
        self.snapshot_epoch: int | None = None
        self.batch: _OpenBatch | None = None

    # -- context --------------------------------------------------------------------------
    def _set_context(self, kind: SourceKind, end_offset: int | None, epoch: int | None) -> None:
        self._close_batch()
        self.kind = kind
        self.snapshot_end_offset = end_offset
        self.snapshot_epoch = epoch

    def _close_batch(self) -> None:
        """Blank lines after a control batch header are its records (``--skip-record-metadata``
        prints an empty line per control record) unless the batch got real record lines."""
        batch = self.batch
        self.batch = None
        if batch is None or not batch.header.is_control or batch.next_index > 0:
            return
        header = batch.header
        for index, blank in enumerate(batch.pending_blanks[: batch.expected]):
            if header.is_valid is False:
                self._problem(blank.line_no, blank.raw, "CRC_MISMATCH",
                              f"record of the batch at offset {header.base_offset} that the dump tool reported invalid",
                              header.base_offset + index, record=True)
            else:
                self._emit(blank.line_no, blank.raw, "control", header.base_offset + index, header, None)

    # -- output -----------------------------------------------------------------------------
    def _problem(self, line_no: int, raw: str, code: str, reason: str, offset: int | None = None,
                 record: bool = False) -> None:
        self.out.problems.append(TextProblem(line_no, raw, code, reason, offset, record))

    def _emit(self, line_no: int, raw: str, kind: Literal["data", "control"], offset: int,
              batch: BatchLine | None, rec: RecordLine | None) -> None:
        append_time = batch.max_timestamp if batch is not None and batch.max_timestamp is not None else None
        if append_time is None and rec is not None:
            append_time = rec.timestamp
        self.out.records.append(
            TextRecord(
                line_no=line_no,
                raw=raw,
                kind=kind,
                offset=offset,
                batch=batch,
                append_time_ms=append_time,
                source_kind=self.kind,
                snapshot_end_offset=self.snapshot_end_offset,
                snapshot_epoch=self.snapshot_epoch,
                payload=rec.payload if rec is not None else None,
                control_type=rec.control_type if rec is not None else None,
                control_type_id=rec.control_type_id if rec is not None else None,
                control_json=rec.control_json if rec is not None else None,
            )
        )

    # -- tokens -----------------------------------------------------------------------------
    def feed(self, token: Token) -> None:
        match token:
            case SkippedLine():
                self.out.skipped += 1
            case FileLine():
                self.out.skipped += 1
                self._set_context(token.source_kind, token.snapshot_end_offset, token.snapshot_epoch)
            case ContextLine():
                self.out.skipped += 1
                if token.source_kind is None:
                    self._close_batch()
                else:
                    self._set_context(token.source_kind, token.snapshot_end_offset, token.snapshot_epoch)
            case BatchLine():
                self._close_batch()
                self.batch = _OpenBatch(token)
                if token.is_valid is False:
                    size = f" ({token.size} bytes)" if token.size is not None else ""
                    self._problem(token.line_no, token.raw, "CRC_MISMATCH",
                                  f"the dump tool reported the batch at offset {token.base_offset}{size} "
                                  "as invalid (isvalid: false)", token.base_offset)
            case BlankLine():
                if self.batch is not None and self.batch.header.is_control and self.batch.next_index == 0:
                    self.batch.pending_blanks.append(token)
                else:
                    self.out.skipped += 1
            case RecordLine():
                self._record(token)
            case TrailingBytesLine():
                self._close_batch()
                self._problem(token.line_no, token.raw, "TRUNCATED_BATCH",
                              f"the dump tool found {token.length} invalid bytes at the end of {token.file_name}")
            case BadLine():
                self._problem(token.line_no, token.raw, token.reason_code, token.reason)

    def _record(self, rec: RecordLine) -> None:
        batch = self.batch
        offset = rec.offset
        if batch is not None:
            header = batch.header
            if offset is None:
                belongs = batch.next_index < batch.expected
                if belongs:
                    offset = header.base_offset + batch.next_index
            else:
                belongs = header.base_offset <= offset <= header.last_offset
            if belongs:
                batch.next_index += 1
            else:
                self._close_batch()
                batch = None
        header = batch.header if batch is not None else None
        if rec.kind == "tool_error":
            self._problem(rec.line_no, rec.raw, "RECORD_DECODE_ERROR",
                          f"the dump tool could not decode this record: {rec.message}", offset, record=True)
            return
        if offset is None:
            self._problem(rec.line_no, rec.raw, "TEXT_PARSE_ERROR",
                          "record offset unknown: no offset on the line and no batch header line before it",
                          record=True)
            return
        if header is not None and header.is_valid is False:
            self._problem(rec.line_no, rec.raw, "CRC_MISMATCH",
                          f"record of the batch at offset {header.base_offset} that the dump tool reported invalid",
                          offset, record=True)
            return
        if rec.kind == "bare":
            if header is None or not header.is_control:
                self._problem(rec.line_no, rec.raw, "TEXT_PARSE_ERROR",
                              "record line has neither a payload nor a control record", offset, record=True)
                return
            self._emit(rec.line_no, rec.raw, "control", offset, header, rec)
            return
        kind: Literal["data", "control"] = "data" if rec.kind == "data" else "control"
        if header is not None and header.is_control != (kind == "control"):
            where = "control" if header.is_control else "data"
            self._problem(rec.line_no, rec.raw, "TEXT_PARSE_ERROR",
                          f"{kind} record inside a {where} batch (header line {header.line_no})", offset, record=True)
            return
        self._emit(rec.line_no, rec.raw, kind, offset, header, rec)

    def finish(self) -> ParsedText:
        self._close_batch()
        self.out.records.sort(key=lambda r: r.line_no)
        self.out.problems.sort(key=lambda p: p.line_no)
        return self.out


def parse_lines(text_or_lines: TextInput) -> ParsedText:
    """Run the line grammar and the batch/file state machine over a dump text."""
    assembler = _Assembler()
    for token in tokenize(text_or_lines):
        assembler.feed(token)
    return assembler.finish()


# --------------------------------------------------------------------------------------------
# Sniffing
# --------------------------------------------------------------------------------------------

_SNIFF_LINES = 50


def looks_like_dump_text(first_bytes: bytes) -> bool:
    """True when the first meaningful lines of a file are ``kafka-dump-log`` output.

    Rule: the sample must be text (UTF-8, no NUL bytes, so binary segments never match); comment,
    prompt and command lines are passed over, and the first other non-empty line must be one the
    tool prints first: ``Dumping …``, ``Starting offset:``/``Log starting offset:``,
    ``Snapshot end offset:``, ``KRaft bootstrap snapshot``, a batch header (``baseOffset: …``), a
    record line (``| offset: …``) or a ``payload: {`` line.
    """
    if not first_bytes or b"\x00" in first_bytes:
        return False
    try:
        text = first_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(first_bytes) - 3:  # a character cut at the end of the sample is fine
            return False
        text = first_bytes[: exc.start].decode("utf-8")
    for line_no, line in enumerate(split_lines(text), start=1):
        if line_no > _SNIFF_LINES:
            return False
        token = tokenize_line(line_no, line)
        match token:
            case BlankLine() | SkippedLine():
                continue
            case FileLine() | ContextLine() | BatchLine() | RecordLine():
                return True
            case _:
                # A cut-off last line of the sample may still start like a tool line.
                stripped = line.strip()
                return stripped.startswith(("baseOffset:", "| offset:", "Dumping ", "payload: {"))
    return False


# --------------------------------------------------------------------------------------------
# Records -> bronze Arrow batches
# --------------------------------------------------------------------------------------------


def _record_reason(payload: str, exc: Exception) -> tuple[str, str]:
    """Quarantine code of a payload ``from_dump_json`` refused: an unknown type or version gets the
    same code the binary decoder gives; anything else is a text parse error."""
    try:
        doc = json.loads(payload)
    except (json.JSONDecodeError, RecursionError):
        return "TEXT_PARSE_ERROR", f"payload is not valid JSON: {exc}"
    if isinstance(doc, dict) and isinstance(doc.get("type"), str):
        rt = RECORD_TYPES_BY_TOOL_NAME.get(doc["type"])
        if rt is None:
            return "UNKNOWN_RECORD_TYPE", f"unknown metadata record type {doc['type']!r}"
        version = doc.get("version")
        if isinstance(version, int) and not isinstance(version, bool) and not rt.schema.is_valid_version(version):
            return "UNSUPPORTED_RECORD_VERSION", f"{rt.tool_name} has no version {version} (valid: {rt.valid_versions})"
    return "TEXT_PARSE_ERROR", f"payload does not match its record schema: {exc}"


def control_from_dump_json(control_type: str, text: str) -> ControlRecord:
    """The control record behind the JSON the dump tool prints after ``LeaderChange:``,
    ``SnapshotHeader`` … (the value's fields in camelCase at schema version 0, facts §3).

    The key version is not in the text; the returned record carries 0, the only one Kafka writes.
    Raises :class:`~kraft_replay.codec.jsonfmt.DumpJsonError` for JSON that does not fit the schema.
    """
    type_id = CONTROL_TYPE_IDS[control_type]
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise DumpJsonError(f"{control_type} JSON is not valid: {exc}") from None
    schema = CONTROL_TYPES[type_id].schema
    data = message_from_json(schema, CONTROL_VALUE_VERSION, doc, where=control_type)
    return ControlRecord(type_id, 0, data)


# Stand-in for a control record whose type the text does not show: it fills no struct column.
_NO_CONTROL = ControlRecord(-1, 0, {})


@dataclass(slots=True)
class _Rows:
    """Column lists of one output table, filled in line order."""

    records: list[TextRecord] = field(default_factory=list)
    parsed: list[Any] = field(default_factory=list)  # MetadataRecord / ControlRecord / None
    json: list[str | None] = field(default_factory=list)


def _ms_to_ts(values: list[int | None]) -> pa.Array:
    return pa.array([None if v is None else v * 1000 for v in values], TIMESTAMP)


def _const(value: Any, n: int, typ: pa.DataType) -> pa.Array:
    return pa.nulls(n, typ) if value is None else pa.array([value] * n, typ)


def _batch_of(records: list[TextRecord], attr: str) -> list[int | None]:
    return [getattr(r.batch, attr) if r.batch is not None else None for r in records]


def _data_columns(rows: _Rows) -> list[pa.Array]:
    recs: list[MetadataRecord] = rows.parsed
    return [
        pa.array([RECORD_TYPES[m.api_key].tool_name for m in recs], pa.string()),
        pa.array([m.api_key for m in recs], pa.int32()),
        pa.array([m.version for m in recs], pa.int32()),
        *build_payload_columns(recs),
        pa.array(rows.json, pa.string()),
    ]


def _log_batch(rows: _Rows, cluster_id: str, source_file: str) -> pa.RecordBatch:
    recs = rows.records
    n = len(recs)
    offsets = [r.offset for r in recs]
    return pa.RecordBatch.from_arrays(
        [
            _const(cluster_id, n, pa.string()),
            pa.array(offsets, pa.int64()),
            pa.array([o // OFFSET_BUCKET_SIZE for o in offsets], pa.int64()),
            pa.array(_batch_of(recs, "base_offset"), pa.int64()),
            pa.array(_batch_of(recs, "last_offset"), pa.int64()),
            pa.array(_batch_of(recs, "leader_epoch"), pa.int32()),
            _ms_to_ts([r.append_time_ms for r in recs]),
            *_data_columns(rows),
            _const(source_file, n, pa.string()),
            pa.array([r.line_no for r in recs], pa.int64()),
        ],
        schema=LOG_SCHEMA,
    )


def _snapshot_batch(rows: _Rows, cluster_id: str, source_file: str) -> pa.RecordBatch:
    recs = rows.records
    n = len(recs)
    return pa.RecordBatch.from_arrays(
        [
            _const(cluster_id, n, pa.string()),
            pa.array([r.snapshot_end_offset for r in recs], pa.int64()),
            pa.array([r.snapshot_epoch for r in recs], pa.int32()),
            pa.array([r.source_kind for r in recs], pa.string()),
            pa.array([r.offset for r in recs], pa.int64()),
            pa.array(_batch_of(recs, "base_offset"), pa.int64()),
            _ms_to_ts([r.append_time_ms for r in recs]),
            *_data_columns(rows),
            _const(source_file, n, pa.string()),
            pa.array([r.line_no for r in recs], pa.int64()),
        ],
        schema=SNAPSHOT_SCHEMA,
    )


def _control_batch(rows: _Rows, cluster_id: str, source_file: str) -> pa.RecordBatch:
    recs = rows.records
    n = len(recs)
    is_log = [r.source_kind == "log" for r in recs]
    return pa.RecordBatch.from_arrays(
        [
            _const(cluster_id, n, pa.string()),
            pa.array([r.offset for r in recs], pa.int64()),
            pa.array(_batch_of(recs, "base_offset"), pa.int64()),
            pa.array(_batch_of(recs, "last_offset"), pa.int64()),
            pa.array(_batch_of(recs, "leader_epoch"), pa.int32()),
            _ms_to_ts([r.append_time_ms for r in recs]),
            pa.array([r.control_type for r in recs], pa.string()),
            pa.array([r.control_type_id for r in recs], pa.int32()),
            pa.nulls(n, pa.int32()),  # key_version: the tool does not print it
            *build_control_columns([c if c is not None else _NO_CONTROL for c in rows.parsed]),
            pa.array(rows.json, pa.string()),
            pa.array([r.source_kind for r in recs], pa.string()),
            pa.array([None if log else r.snapshot_end_offset for r, log in zip(recs, is_log)], pa.int64()),
            pa.array([None if log else r.snapshot_epoch for r, log in zip(recs, is_log)], pa.int32()),
            _const(source_file, n, pa.string()),
            pa.array([r.line_no for r in recs], pa.int64()),
        ],
        schema=CONTROL_SCHEMA,
    )


def _quarantine_batch(problems: list[TextProblem], cluster_id: str, source_file: str,
                      ingested_at: datetime) -> pa.RecordBatch:
    n = len(problems)
    raws = [p.raw.encode("utf-8", errors="surrogateescape") for p in problems]
    return pa.RecordBatch.from_arrays(
        [
            _const(cluster_id, n, pa.string()),
            _const(source_file, n, pa.string()),
            pa.array([p.line_no for p in problems], pa.int64()),
            pa.array([len(r) for r in raws], pa.int64()),
            pa.array([p.offset for p in problems], pa.int64()),
            pa.array([1 if p.record else None for p in problems], pa.int64()),   # records
            pa.array([p.reason_code for p in problems], pa.string()),
            pa.array([f"line {p.line_no}: {p.reason}" for p in problems], pa.string()),
            pa.array(raws, pa.binary()),
            pa.array([ingested_at] * n, TIMESTAMP),
        ],
        schema=DECODED_QUARANTINE_SCHEMA,
    )


_MEMO_MAX_PAYLOAD = 512
_MEMO_MAX_ENTRIES = 100_000


def parse_dump_text(
    text_or_lines: TextInput,
    *,
    source_file: str,
    cluster_id: str,
    ingested_at: datetime | None = None,
) -> DecodedChunk:
    """Read ``kafka-dump-log --cluster-metadata-decoder`` output into the bronze Arrow batches.

    Implements the rules of this module's docstring. ``source_position`` of every row is the 1-based
    line number of its record line; ``key_version`` of control rows is null (not printed). Payloads are
    normalised through :func:`~kraft_replay.codec.jsonfmt.from_dump_json` and
    :func:`~kraft_replay.codec.jsonfmt.to_dump_json`, so ``payload_json`` equals what the binary
    decoder gives for the same record. Never raises on bad text: it becomes quarantine rows.
    ``stats``: batches = batch header lines records follow, first/last offset over log records (over
    in-file offsets when the text holds only snapshots), bytes = the input's size when it is given as
    ``str``/``bytes`` (0 for an iterable of lines).
    """
    if ingested_at is None:
        ingested_at = datetime.now(timezone.utc)
    parsed = parse_lines(text_or_lines)
    problems = list(parsed.problems)
    log, snap, ctrl = _Rows(), _Rows(), _Rows()
    # Identical payloads give identical rows (most of a KRaft log is the same NoOp record).
    memo: dict[str, tuple[MetadataRecord, str]] = {}
    for r in parsed.records:
        if r.kind == "data":
            assert r.payload is not None
            hit = memo.get(r.payload)
            if hit is None:
                try:
                    rec = from_dump_json(r.payload)
                    hit = (rec, to_dump_json(rec))
                except (DumpJsonError, ValueError, RecursionError) as exc:
                    code, reason = _record_reason(r.payload, exc)
                    problems.append(TextProblem(r.line_no, r.raw, code, reason, r.offset, record=True))
                    continue
                if len(r.payload) <= _MEMO_MAX_PAYLOAD and len(memo) < _MEMO_MAX_ENTRIES:
                    memo[r.payload] = hit
            rec, payload_json = hit
            rows = log if r.source_kind == "log" else snap
            rows.records.append(r)
            rows.parsed.append(rec)
            rows.json.append(payload_json)
            continue
        crec: ControlRecord | None = None
        cjson: str | None = None
        if r.control_json is not None and r.control_type is not None:
            try:
                crec = control_from_dump_json(r.control_type, r.control_json)
                cjson = control_json(crec)
            except (DumpJsonError, ValueError, RecursionError) as exc:
                problems.append(TextProblem(r.line_no, r.raw, "TEXT_PARSE_ERROR",
                                            f"{r.control_type} JSON does not match its schema: {exc}", r.offset,
                                            record=True))
                continue
        ctrl.records.append(r)
        ctrl.parsed.append(crec)
        ctrl.json.append(cjson)
    problems.sort(key=lambda p: p.line_no)

    stats = ChunkStats(
        bytes=0,
        batches=len({r.batch.line_no for r in parsed.records if r.batch is not None}),
        data_records=len(log.records) + len(snap.records),
        control_records=len(ctrl.records),
        quarantined=len(problems),
        quarantined_records=sum(1 for p in problems if p.record),
        quarantined_bytes=sum(len(p.raw.encode("utf-8", errors="surrogateescape")) for p in problems),
    )
    stats.records = stats.data_records + stats.control_records
    # Like the binary decoder: log offsets; in-file offsets only for a text that holds no log records.
    offsets = [r.offset for r in (*log.records, *ctrl.records) if r.source_kind == "log"]
    if not offsets:
        offsets = [r.offset for r in (*snap.records, *ctrl.records)]
    if offsets:
        stats.first_offset, stats.last_offset = min(offsets), max(offsets)
    if isinstance(text_or_lines, str):
        stats.bytes = len(text_or_lines.encode("utf-8", errors="surrogateescape"))
    elif isinstance(text_or_lines, (bytes, bytearray, memoryview)):
        stats.bytes = memoryview(text_or_lines).nbytes
    return DecodedChunk(
        log=_log_batch(log, cluster_id, source_file),
        control=_control_batch(ctrl, cluster_id, source_file),
        snapshot=_snapshot_batch(snap, cluster_id, source_file),
        quarantine=_quarantine_batch(problems, cluster_id, source_file, ingested_at),
        stats=stats,
    )


# --------------------------------------------------------------------------------------------
# Rendering: binary batches -> dump text
# --------------------------------------------------------------------------------------------

_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_TS_TYPE_NAMES = {0: "CreateTime", 1: "LogAppendTime"}
_INT32_MAX = (1 << 31) - 1


def _sequence(base_sequence: int, delta: int) -> int:
    """Sequence of the record at ``delta`` (facts §1.4: wraps past 2^31-1 to 0; -1 = none)."""
    if base_sequence < 0:
        return -1
    return (base_sequence + delta) % (_INT32_MAX + 1)


def _header_line(b: RecordBatch) -> str:
    last_sequence = _sequence(b.base_sequence, b.last_offset_delta)
    horizon = f"OptionalLong[{b.base_timestamp}]" if b.attributes & ATTR_DELETE_HORIZON else "OptionalLong.empty"
    return (
        f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {len(b.records)} "
        f"baseSequence: {b.base_sequence} lastSequence: {last_sequence} producerId: {b.producer_id} "
        f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch} "
        f"isTransactional: {str(b.is_transactional).lower()} isControl: {str(b.is_control).lower()} "
        f"deleteHorizonMs: {horizon} position: {b.position} {_TS_TYPE_NAMES[b.timestamp_type]}: {b.max_timestamp} "
        f"size: {b.size} magic: {b.magic} compresscodec: {_CODEC_NAMES.get(b.compression, str(b.compression))} "
        f"crc: {b.crc} isvalid: true"
    )


def _record_content_text(b: RecordBatch, r: Record) -> tuple[str, str]:
    """``(label, text)`` printed for a record: ``("payload", json)`` or a control label and JSON."""
    offset = b.base_offset + r.offset_delta
    if b.is_control:
        try:
            crec = decode_control_record(r.key, r.value)
        except ControlDecodeError:
            key = r.key or b""
            type_id = int.from_bytes(key[2:4], "big", signed=True) if len(key) >= 4 else -1
            return "control", f"controlType: UNKNOWN({type_id})"
        label = CONTROL_LABEL_OF_TYPE[crec.name]
        sep = ": " if crec.name == "LEADER_CHANGE" else " "
        return "control", f"{label}{sep}{control_json(crec)}"
    try:
        if r.value is None:
            raise ValueError("null value")
        text = to_dump_json(decode_record_value(r.value))
    except (RecordDecodeError, ValueError, IndexError, KeyError, UnicodeDecodeError, OverflowError) as exc:
        text = f"Error at {offset}, skipping. {exc}"
    return "payload", text


def _render_batch(b: RecordBatch, skip_record_metadata: bool) -> Iterator[str]:
    yield _header_line(b)
    ts_name = _TS_TYPE_NAMES[b.timestamp_type]
    for r in b.records:
        kind, text = _record_content_text(b, r)
        if skip_record_metadata:
            yield "" if kind == "control" else f"| payload: {text}"
            continue
        timestamp = b.max_timestamp if b.timestamp_type == 1 else b.base_timestamp + r.timestamp_delta
        header_keys = ",".join(k for k, _ in r.headers)
        meta = (
            f"| offset: {b.base_offset + r.offset_delta} {ts_name}: {timestamp} "
            f"keySize: {-1 if r.key is None else len(r.key)} valueSize: {-1 if r.value is None else len(r.value)} "
            f"sequence: {_sequence(b.base_sequence, r.offset_delta)} headerKeys: [{header_keys}]"
        )
        yield f"{meta} payload: {text}" if kind == "payload" else f"{meta} {text}"


def _file_header(file_name: str) -> list[str]:
    kf = classify(file_name)
    lines = [f"Dumping {file_name}"]
    if kf.kind is FileKind.SEGMENT:
        lines.append(f"Log starting offset: {kf.base_offset}")
    elif kf.kind is FileKind.SNAPSHOT:
        lines.append(f"Snapshot end offset: {kf.end_offset}, epoch: {kf.epoch}")
    elif kf.kind is FileKind.BOOTSTRAP:
        lines.append("KRaft bootstrap snapshot")
    return lines


def render_dump_text(
    source: bytes | bytearray | memoryview | Iterable[RecordBatch | Corruption],
    *,
    file_name: str | None = None,
    skip_record_metadata: bool = False,
) -> str:
    """Text ``kafka-dump-log --cluster-metadata-decoder`` prints for a segment or snapshot.

    ``source`` is the file's bytes or the items of :func:`~kraft_replay.codec.batch.iter_batches`.
    Layout of the current tool: with ``file_name``, a ``Dumping`` line and the file-kind line; per
    batch a header line; per record ``| offset: …`` metadata then ``payload: {json}`` or the control
    label and JSON (``skip_record_metadata``: ``| payload: {json}``, an empty line for control
    records). A record the codec cannot decode prints as the tool does (``Error at N, skipping. …``);
    a byte range it cannot read prints ``Found N invalid bytes at the end of <file>`` when it is the
    truncated tail, else a ``Corrupt batch …`` line (not tool output, so reading the text back
    quarantines it instead of losing it).
    """
    items: Iterable[RecordBatch | Corruption]
    if isinstance(source, (bytes, bytearray, memoryview)):
        items = iter_batches(bytes(source))
    else:
        items = source
    name = file_name if file_name is not None else "<input>"
    out: list[str] = _file_header(file_name) if file_name is not None else []
    for item in items:
        if isinstance(item, Corruption):
            if item.reason_code == "TRUNCATED_BATCH":
                out.append(f"Found {item.length} invalid bytes at the end of {PurePosixPath(name).name}")
            else:
                out.append(f"Corrupt batch at position {item.position} ({item.reason_code}): {item.reason}")
            continue
        out.extend(_render_batch(item, skip_record_metadata))
    return "\n".join(out) + "\n" if out else ""


def main(argv: list[str] | None = None) -> int:
    """``python -m kraft_replay.ingest.dumptext [--skip-record-metadata] FILE...``: print segments,
    snapshots or ``bootstrap.checkpoint`` files as ``kafka-dump-log --cluster-metadata-decoder`` would."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m kraft_replay.ingest.dumptext",
        description="Render KRaft metadata log segments and snapshots as kafka-dump-log text.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="print only payloads (and an empty line per control record)")
    args = parser.parse_args(argv)
    for path in args.files:
        kind = classify(path).kind
        if kind not in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP):
            print(f"error: {path}: not a segment (<20 digits>.log), snapshot (<offset>-<epoch>.checkpoint) "
                  "or bootstrap.checkpoint; pass one of those", file=sys.stderr)
            return 2
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            print(f"error: {path}: cannot read ({exc.strerror or exc}); check the path and permissions", file=sys.stderr)
            return 2
        sys.stdout.write(render_dump_text(data, file_name=path, skip_record_metadata=args.skip_record_metadata))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
