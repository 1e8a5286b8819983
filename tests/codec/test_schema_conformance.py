"""Conformance of the project's field tables with Kafka's schema files.

Reads every ``*.json`` in the reference schema directory (with its own small parser, independent
of tools/gen_schemas.py) and fails if a metadata record type or one of the five control schemas,
or any of its versions, is missing from ``kraft_replay.codec.schema`` or laid out differently:
field order per version, types, nullable/tagged versions, tags, defaults, nested structs.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from kraft_replay.codec.schema import (
    CONTROL_SCHEMAS,
    MESSAGE_SCHEMAS,
    RECORD_TYPES,
    FieldSpec,
    MessageSchema,
    fields_for,
)

ROOT = Path(__file__).resolve().parents[2]
CONTROL_NAMES = {
    "LeaderChangeMessage",
    "SnapshotHeaderRecord",
    "SnapshotFooterRecord",
    "KRaftVersionRecord",
    "VotersRecord",
}


def _load(path: Path) -> dict[str, Any]:
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
    return json.loads(text)


def _in(spec: str | None, v: int) -> bool:
    """Version-range membership per the schema language ("3", "0-2", "1+", "none")."""
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return v >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= v <= int(hi or lo)


def _range(spec: str) -> range:
    lo, _, hi = spec.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def _relevant(schemas_dir: Path) -> list[Path]:
    out = []
    for p in sorted(schemas_dir.glob("*.json")):
        doc = _load(p)
        if doc["type"] == "metadata" or doc["name"] in CONTROL_NAMES:
            out.append(p)
    return out


def _check_fields(
    raw_fields: list[dict[str, Any]],
    ours: tuple[FieldSpec, ...],
    version: int,
    common: dict[str, list[dict[str, Any]]],
    where: str,
) -> None:
    expected = [f for f in raw_fields if _in(f["versions"], version)]
    got = [f for f in ours if f.present_in(version)]
    assert [f["name"] for f in expected] == [g.name for g in got], f"{where} v{version}: field order/set differs"
    for f, g in zip(expected, got, strict=True):
        w = f"{where}.{f['name']} v{version}"
        assert g.type == f["type"], w
        assert g.nullable_in(version) == _in(f.get("nullableVersions"), version), f"{w}: nullable"
        assert g.tagged_in(version) == _in(f.get("taggedVersions"), version), f"{w}: tagged"
        if "tag" in f:
            assert g.tag == int(f["tag"]), f"{w}: tag"
        else:
            assert g.tag is None, f"{w}: tag"
        assert g.default_raw == f.get("default"), f"{w}: default"
        assert (
            g.snake
            == re.sub(
                r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", f["name"].replace("KRaft", "Kraft")
            ).lower()
        ), w
        assert g.json_name == f["name"][0].lower() + f["name"][1:], w
        base = f["type"].removeprefix("[]")
        sub = f.get("fields") or common.get(base)
        if sub is None:
            assert g.fields is None, w
        else:
            assert g.fields is not None and g.struct_name == base, w
            _check_fields(sub, g.fields, version, common, w)


def test_every_schema_file_is_covered(schemas_dir: Path) -> None:
    files = _relevant(schemas_dir)
    docs = [_load(p) for p in files]
    meta = {d["apiKey"]: d["name"] for d in docs if d["type"] == "metadata"}
    assert len(meta) == 25, "the reference holds 25 metadata record schemas"
    assert {k: rt.name for k, rt in RECORD_TYPES.items()} == meta
    assert set(CONTROL_SCHEMAS) == CONTROL_NAMES
    assert {d["name"] for d in docs} == set(MESSAGE_SCHEMAS)


@pytest.mark.parametrize("name", sorted(MESSAGE_SCHEMAS))
def test_layout_matches_schema(schemas_dir: Path, name: str) -> None:
    ours: MessageSchema = MESSAGE_SCHEMAS[name]
    doc = _load(schemas_dir / ours.file)
    assert doc["name"] == name
    common = {s["name"]: s["fields"] for s in doc.get("commonStructs", [])}
    assert ours.kind == doc["type"]
    assert ours.api_key == (doc.get("apiKey") if doc["type"] == "metadata" else None)
    assert list(ours.versions()) == list(_range(doc["validVersions"]))
    for v in _range(doc["validVersions"]):
        assert ours.is_flexible(v) == _in(doc["flexibleVersions"], v)
        _check_fields(doc["fields"], ours.fields, v, common, name)
        if doc["type"] == "metadata":
            assert [f.name for f in fields_for(doc["apiKey"], v)] == [
                f["name"] for f in doc["fields"] if _in(f["versions"], v)
            ]
    # a version just outside the range is not valid
    assert not ours.is_valid_version(max(_range(doc["validVersions"])) + 1)


def test_record_type_names() -> None:
    rt = RECORD_TYPES[5]
    assert (rt.name, rt.tool_name, rt.column) == (
        "PartitionChangeRecord",
        "PARTITION_CHANGE_RECORD",
        "partition_change",
    )
    assert RECORD_TYPES[21].tool_name == "ZK_MIGRATION_STATE_RECORD"
    assert RECORD_TYPES[20].tool_name == "NO_OP_RECORD" and not RECORD_TYPES[20].has_body
    assert RECORD_TYPES[24].column == "end_transaction" and not RECORD_TYPES[24].has_body
    assert set(RECORD_TYPES).isdisjoint({6, 13, 16})
    with pytest.raises(ValueError, match="no version 3"):
        fields_for(5, 3)


def test_defaults_follow_schema_language() -> None:
    by = {f.snake: f for f in MESSAGE_SCHEMAS["PartitionChangeRecord"].fields}
    assert by["leader"].default_value(0) == -2
    assert by["isr"].default_value(0) is None
    assert by["leader_recovery_state"].default_value(0) == -1
    assert by["topic_id"].default_value(0) == "AAAAAAAAAAAAAAAAAAAAAA"
    rb = {f.snake: f for f in MESSAGE_SCHEMAS["RegisterBrokerRecord"].fields}
    assert rb["fenced"].default_value(0) is True
    assert rb["log_dirs"].default_value(3) == []
    voters = {f.snake: f for f in MESSAGE_SCHEMAS["VotersRecord"].fields}["voters"]
    feat = {f.snake: f for f in voters.fields or ()}["kraft_version_feature"]
    assert feat.default_value(0) == {"min_supported_version": 0, "max_supported_version": 0}


def test_generated_tables_are_up_to_date(schemas_dir: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_schemas
    finally:
        sys.path.pop(0)
    out = tmp_path / "gen.py"
    assert gen_schemas.main(["--schemas", str(schemas_dir), "--out", str(out)]) == 0
    committed = (ROOT / "lib/kraft_replay/codec/_generated_schemas.py").read_text()
    assert out.read_text() == committed, "run python tools/gen_schemas.py and commit the result"
    assert gen_schemas.main(["--schemas", str(schemas_dir), "--out", str(out), "--check"]) == 0
    assert gen_schemas.main(["--schemas", str(tmp_path / "missing")]) == 2
