"""Real Kafka files (../shared/reference/real-kraft): every record decodes, matches the README's
per-file counts per (type, version), and re-encodes to the identical bytes.

The batch walk here is deliberately minimal (uncompressed batches, facts §1.1/§1.4) so this test
depends on the record codec only; the batch layer has its own tests.
"""

from __future__ import annotations

import collections
import re
import struct
from pathlib import Path

import pytest

from kraft_replay.codec.records import decode_message, decode_record_value, encode_message, encode_record_value
from kraft_replay.codec.schema import RECORD_TYPES_BY_NAME
from kraft_replay.codec.varint import read_varint, read_varlong

CONTROL_NAMES = {
    2: ("LEADER_CHANGE", "LeaderChangeMessage"),
    3: ("SNAPSHOT_HEADER", "SnapshotHeaderRecord"),
    4: ("SNAPSHOT_FOOTER", "SnapshotFooterRecord"),
    5: ("KRAFT_VERSION", "KRaftVersionRecord"),
    6: ("KRAFT_VOTERS", "VotersRecord"),
}
README_NAME = {"ZkMigration": "ZkMigrationStateRecord"}


def walk_values(buf: bytes) -> tuple[list[bytes], list[tuple[bytes, bytes]]]:
    """(data record values, control (key, value) pairs) of an uncompressed file; asserts framing."""
    data: list[bytes] = []
    ctrl: list[tuple[bytes, bytes]] = []
    pos = 0
    while pos < len(buf):
        _base, blen = struct.unpack_from(">qi", buf, pos)
        end = pos + 12 + blen
        assert buf[pos + 16] == 2 and end <= len(buf)
        (attrs,) = struct.unpack_from(">h", buf, pos + 21)
        assert attrs & 0x07 == 0, "real files are uncompressed"
        (count,) = struct.unpack_from(">i", buf, pos + 57)
        p = pos + 61
        for _ in range(count):
            length, p = read_varint(buf, p)
            rend = p + length
            p += 1  # attributes
            _, p = read_varlong(buf, p)
            _, p = read_varint(buf, p)
            klen, p = read_varint(buf, p)
            key = buf[p : p + max(klen, 0)]
            p += max(klen, 0)
            vlen, p = read_varint(buf, p)
            value = buf[p : p + vlen]
            p = rend
            if attrs & 0x20:
                ctrl.append((key, value))
            else:
                data.append(value)
        assert p == end
        pos = end
    return data, ctrl


def readme_rows(real_kraft_dir: Path) -> dict[str, tuple[dict[tuple[str, int], int], dict[str, int]]]:
    """file -> ({(record name, version): count}, {control type: count}) from the README tables."""
    text = (real_kraft_dir / "README.md").read_text()
    versions: dict[str, dict[tuple[str, int], int]] = {}
    controls: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 4:
            continue
        if len(cells) > 12 and cells[2].startswith("`"):  # first table: "record types (count)" column
            name = cells[2].strip("`")
            controls[name] = {k: int(n) for k, n in re.findall(r"ctrl:(\w+) (\d+)", cells[11])}
        elif cells[1].endswith(".log`") or cells[1].endswith(".checkpoint`"):
            name = cells[1].strip("`")
            seen: dict[tuple[str, int], int] = {}
            for short, v, n in re.findall(r"(\w+?)v(\d+):(\d+)", cells[4]):
                seen[(README_NAME.get(short, short + "Record"), int(v))] = int(n)
            versions[name] = seen
    assert set(controls) == set(versions), "README tables disagree"
    return {f: (versions[f], controls[f]) for f in versions}


def binary_files(real_kraft_dir: Path) -> list[Path]:
    return sorted(p for p in real_kraft_dir.iterdir() if p.suffix in (".log", ".checkpoint"))


def test_readme_lists_every_binary_file(real_kraft_dir: Path) -> None:
    rows = readme_rows(real_kraft_dir)
    assert {p.name for p in binary_files(real_kraft_dir)} == set(rows)
    assert len(rows) == 15


def test_every_real_record_decodes_counts_and_reencodes(real_kraft_dir: Path) -> None:
    rows = readme_rows(real_kraft_dir)
    total = 0
    for path in binary_files(real_kraft_dir):
        values, controls = walk_values(path.read_bytes())
        counts: collections.Counter[tuple[str, int]] = collections.Counter()
        for value in values:
            rec = decode_record_value(value)
            assert "_unknown_tagged" not in rec.data, (path.name, rec)
            counts[(RECORD_TYPES_BY_NAME_BY_KEY[rec.api_key], rec.version)] += 1
            assert encode_record_value(rec) == value, (path.name, rec)
        expected_versions, expected_controls = rows[path.name]
        assert dict(counts) == expected_versions, path.name
        ctrl_counts: collections.Counter[str] = collections.Counter()
        for key, value in controls:
            key_version, ctype = struct.unpack(">hh", key)
            assert key_version == 0
            tool, schema = CONTROL_NAMES[ctype]
            body, end = decode_message(schema, 0, value)
            assert end == len(value)
            assert encode_message(schema, 0, body) == value
            ctrl_counts[tool] += 1
        assert dict(ctrl_counts) == expected_controls, path.name
        total += len(values) + len(controls)
    assert total == 72810  # facts: 72 810 records including control records


RECORD_TYPES_BY_NAME_BY_KEY = {rt.api_key: name for name, rt in RECORD_TYPES_BY_NAME.items()}


def test_known_values_from_a_real_snapshot(real_kraft_dir: Path) -> None:
    path = real_kraft_dir / "dkoh12__Systems__bootstrap.checkpoint"
    values, controls = walk_values(path.read_bytes())
    recs = [decode_record_value(v) for v in values]
    features = {r.data["name"]: r.data["feature_level"] for r in recs if r.api_key == 12}
    assert features == {
        "metadata.version": 27,
        "eligible.leader.replicas.version": 1,
        "group.version": 1,
        "transaction.version": 2,
    }  # README row 30
    assert [struct.unpack(">hh", k)[1] for k, _ in controls] == [3, 4]


@pytest.mark.parametrize("name", ["hiage__kafka-raft__kafka1__00000000000000000000.log"])
def test_partition_records_carry_replicas(real_kraft_dir: Path, name: str) -> None:
    values, _ = walk_values((real_kraft_dir / name).read_bytes())
    parts = [decode_record_value(v) for v in values if v[1] == 3]
    assert len(parts) == 60
    for p in parts:
        assert p.data["leader"] in p.data["replicas"] and set(p.data["isr"]) <= set(p.data["replicas"])
        assert len(p.data["topic_id"]) == 22
