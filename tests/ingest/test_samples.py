"""data/samples/ is what tools/make_samples.py writes (deterministic), decodes cleanly, and holds
the scenario it promises: 3 voters, 3 brokers, leader changes, fence/unfence, a feature-level change."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

from kraft_replay.codec.files import FileKind, classify
from kraft_replay.ingest.bronze import decode_to_arrow

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples" / "node1"


def _make_samples():
    spec = importlib.util.spec_from_file_location("make_samples", ROOT / "tools" / "make_samples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_samples_are_reproducible(tmp_path: Path) -> None:
    written = _make_samples().build(tmp_path)
    assert len(written) == 5
    for p in written:
        rel = p.relative_to(tmp_path / "node1")
        assert (SAMPLES / rel).read_bytes() == p.read_bytes(), f"{rel} differs: run tools/make_samples.py"


def _decode(path: Path):
    info = classify(path.name)
    return info, decode_to_arrow(path.read_bytes(), cluster_id="s", source_file=path.name, file_kind=info.kind.value,
                                 snapshot_end_offset=info.end_offset, snapshot_epoch=info.epoch)


def test_samples_decode_and_hold_the_scenario() -> None:
    files = sorted(p for p in SAMPLES.rglob("*") if classify(p.name).kind in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP))
    assert len(files) == 4
    types: Counter[str] = Counter()
    log_rows = []
    leaders = []
    for p in files:
        info, c = _decode(p)
        assert c.quarantine.num_rows == 0, p.name
        if info.kind is FileKind.SEGMENT:
            types.update(c.log.column("record_type").to_pylist())
            log_rows += c.log.to_pylist()
            leaders += [r["leader_change"]["leader_id"] for r in c.control.to_pylist()]
            assert min(c.log.column("offset").to_pylist() + c.control.column("offset").to_pylist()) == info.base_offset
    assert leaders == [3000, 3001]
    fences = [r["broker_registration_change"]["fenced"] for r in log_rows if r["record_type"] == "BROKER_REGISTRATION_CHANGE_RECORD"]
    assert fences.count(1) == 1 and fences.count(-1) == 4
    mv = [r["feature_level"]["feature_level"] for r in log_rows if r["record_type"] == "FEATURE_LEVEL_RECORD"]
    assert mv == [7, 8]
    assert types["REGISTER_BROKER_RECORD"] == 3 and types["TOPIC_RECORD"] == 3 and types["PARTITION_RECORD"] == 6
    assert types["NO_OP_RECORD"] > 0 and types["PARTITION_CHANGE_RECORD"] > 0
    # the snapshot's end offset and epoch match the log: epoch of record end-1, and it holds the state
    snap = next(p for p in files if classify(p.name).kind is FileKind.SNAPSHOT)
    info, c = _decode(snap)
    last_epoch = {r["offset"]: r["batch_leader_epoch"] for r in log_rows}[info.end_offset - 1]
    assert last_epoch == info.epoch == 2
    srows = c.snapshot.to_pylist()
    assert srows[0]["record_type"] == "FEATURE_LEVEL_RECORD" and srows[0]["feature_level"]["feature_level"] == 8
    assert all(not r["register_broker"]["fenced"] for r in srows if r["record_type"] == "REGISTER_BROKER_RECORD")
    assert [r["control_type"] for r in c.control.to_pylist()] == ["SNAPSHOT_HEADER", "SNAPSHOT_FOOTER"]
