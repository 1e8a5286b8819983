"""File naming in a metadata directory (facts §0, §4)."""

from __future__ import annotations

import pytest

from kraft_replay.codec.files import FileKind, classify, segment_name, snapshot_name


def test_names() -> None:
    assert segment_name(12345) == "00000000000000012345.log"
    assert snapshot_name(4321, 7) == "00000000000000004321-0000000007.checkpoint"
    with pytest.raises(ValueError):
        segment_name(-1)
    with pytest.raises(ValueError):
        snapshot_name(1, -1)


@pytest.mark.parametrize(
    ("name", "kind", "base", "end", "epoch"),
    [
        ("00000000000000012345.log", FileKind.SEGMENT, 12345, None, None),
        ("/x/__cluster_metadata-0/00000000000000000000.log", FileKind.SEGMENT, 0, None, None),
        ("node1__00000000000000000007.log", FileKind.SEGMENT, 7, None, None),
        ("00000000000000004321-0000000007.checkpoint", FileKind.SNAPSHOT, None, 4321, 7),
        ("bootstrap.checkpoint", FileKind.BOOTSTRAP, None, 0, 0),
        ("a__bootstrap.checkpoint", FileKind.BOOTSTRAP, None, 0, 0),
        ("00000000000000004321-0000000007.checkpoint.part", FileKind.IGNORED, None, None, None),
        ("00000000000000004321-0000000007.checkpoint.deleted", FileKind.IGNORED, None, None, None),
        ("00000000000000000000.index", FileKind.IGNORED, None, None, None),
        ("00000000000000000000.timeindex", FileKind.IGNORED, None, None, None),
        ("quorum-state", FileKind.IGNORED, None, None, None),
        ("meta.properties", FileKind.IGNORED, None, None, None),
        ("leader-epoch-checkpoint", FileKind.IGNORED, None, None, None),
        ("dump.txt", FileKind.DUMP_TEXT, None, None, None),
        ("README.md", FileKind.UNKNOWN, None, None, None),
        ("123.log", FileKind.UNKNOWN, None, None, None),
        ("100000000000000000000.log", FileKind.UNKNOWN, None, None, None),  # 21 digits
    ],
)
def test_classify(name: str, kind: FileKind, base: int | None, end: int | None, epoch: int | None) -> None:
    f = classify(name)
    assert (f.kind, f.base_offset, f.end_offset, f.epoch) == (kind, base, end, epoch)


def test_source_kind() -> None:
    assert classify("00000000000000000000.log").source_kind == "log"
    assert classify("bootstrap.checkpoint").source_kind == "bootstrap"
    assert classify("00000000000000000010-0000000001.checkpoint").source_kind == "snapshot"
