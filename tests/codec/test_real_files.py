"""Every binary file written by real Kafka (../shared/reference/real-kraft) decodes with zero
quarantine, gives exactly the counts its README lists, and re-encodes byte-identically."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from kraft_replay.codec.batch import Corruption, RecordBatch, encode_batch, iter_batches, scan_batch_headers
from kraft_replay.codec.control import decode_control_record
from kraft_replay.codec.files import FileKind, classify
from kraft_replay.codec.records import decode_record_value
from kraft_replay.codec.schema import RECORD_TYPES
from kraft_replay.ingest.bronze import decode_to_arrow

# README short names ("PartitionChange", "ZkMigration") -> record type names
_SHORT = {rt.name.removesuffix("Record"): rt.name for rt in RECORD_TYPES.values()}
_SHORT["ZkMigration"] = "ZkMigrationStateRecord"


def _readme_rows(real_kraft_dir: Path) -> dict[str, dict]:
    rows = {}
    for line in (real_kraft_dir / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 13 or not cells[1].isdigit():
            continue
        name = cells[2].strip("`")
        first, last = (int(x) for x in cells[9].split(".."))
        types: Counter[str] = Counter()
        for m in re.finditer(r"(ctrl:)?([A-Za-z_]+) (\d+)", cells[11].split(";")[0] + ";" + ";".join(
                p for p in cells[11].split(";") if "ctrl:" in p)):
            key = m.group(2) if m.group(1) else _SHORT[m.group(2)]
            types[key] += int(m.group(3))
        rows[name] = {"batches": int(cells[7]), "first": first, "last": last, "records": int(cells[10]), "types": types}
    return rows


def _binary_files(real_kraft_dir: Path) -> list[Path]:
    return sorted(p for p in real_kraft_dir.iterdir() if classify(p.name).kind in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP))


def test_readme_lists_every_binary_file(real_kraft_dir: Path) -> None:
    rows = _readme_rows(real_kraft_dir)
    files = _binary_files(real_kraft_dir)
    assert len(files) == 15
    assert {p.name for p in files} == set(rows)


def test_counts_match_readme(real_kraft_dir: Path) -> None:
    rows = _readme_rows(real_kraft_dir)
    for path in _binary_files(real_kraft_dir):
        want = rows[path.name]
        items = list(iter_batches(path.read_bytes()))
        assert not [i for i in items if isinstance(i, Corruption)], path.name
        batches = [i for i in items if isinstance(i, RecordBatch)]
        got: Counter[str] = Counter()
        offsets = []
        for b in batches:
            for r in b.records:
                offsets.append(b.base_offset + r.offset_delta)
                if b.is_control:
                    got[decode_control_record(r.key, r.value).name] += 1
                else:
                    got[RECORD_TYPES[decode_record_value(r.value).api_key].name] += 1
        assert len(batches) == want["batches"], path.name
        assert len(offsets) == want["records"], path.name
        assert (min(offsets), max(offsets)) == (want["first"], want["last"]), path.name
        assert got == want["types"], path.name


def test_reencode_is_byte_identical(real_kraft_dir: Path) -> None:
    for path in _binary_files(real_kraft_dir):
        data = path.read_bytes()
        items = list(iter_batches(data))
        assert b"".join(encode_batch(b) for b in items) == data, path.name


def test_header_scan_matches_full_decode(real_kraft_dir: Path) -> None:
    for path in _binary_files(real_kraft_dir):
        data = path.read_bytes()
        headers, consumed = scan_batch_headers(data)
        assert consumed == len(data)
        assert [h.base_offset for h in headers] == [b.base_offset for b in iter_batches(data)]


def test_decode_to_arrow_zero_quarantine_and_counts(real_kraft_dir: Path) -> None:
    rows = _readme_rows(real_kraft_dir)
    for path in _binary_files(real_kraft_dir):
        info = classify(path.name)
        chunk = decode_to_arrow(path.read_bytes(), cluster_id="c", source_file=path.name, file_kind=info.kind.value,
                                snapshot_end_offset=info.end_offset, snapshot_epoch=info.epoch)
        want = rows[path.name]
        assert chunk.quarantine.num_rows == 0, path.name
        data = chunk.log if info.kind is FileKind.SEGMENT else chunk.snapshot
        other = chunk.snapshot if info.kind is FileKind.SEGMENT else chunk.log
        assert other.num_rows == 0
        assert data.num_rows + chunk.control.num_rows == want["records"]
        assert chunk.stats.batches == want["batches"]
        by_type = Counter(RECORD_TYPES[k].name for k in data.column("api_key").to_pylist())
        by_type.update(chunk.control.column("control_type").to_pylist())
        assert by_type == want["types"], path.name
        if info.kind is not FileKind.SEGMENT:
            assert set(data.column("snapshot_end_offset").to_pylist()) <= {info.end_offset}
            assert set(chunk.control.column("source_kind").to_pylist()) == {info.kind.value}
