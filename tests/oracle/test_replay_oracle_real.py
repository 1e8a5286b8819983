"""Ground truth no one here wrote: Kafka's own snapshots. For every log + ``.checkpoint`` pair of one
cluster in ../shared/reference/real-kraft/, the oracle's image replayed from the log up to the
snapshot's end offset - 1 equals the image of the snapshot's own records (facts §4.2: a snapshot
``<END>-<epoch>.checkpoint`` is the image at END - 1) — topics, every partition field, brokers,
controllers, configs, features, producer ids. Plus the real logs' structural cases (mid-stream
start, gaps, a missing first segment, a divergent tail) and the versioned tables' invariants."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from replay_oracle import first_image_difference, replay  # tests/oracle is on sys.path (pytest prepend mode)

from kraft_replay.codec.files import classify
from kraft_replay.ingest.bronze import decode_to_arrow
from kraft_replay.replay.schemas import SILVER_TABLES, VERSIONED_TABLES

pytestmark = pytest.mark.reference

ROOT = Path(__file__).resolve().parents[2]
# (file-name prefix, snapshot end offset): every log + snapshot pair of one cluster
PAIRS = [("dkoh12", 7209), ("ftmhxp", 7268), ("greenlemonT", 28869), ("rjmfernandes", 7752), ("rjmfernandes", 14926)]


@cache
def _decode_dir(directory: str, prefix: str) -> tuple[pa.Table, pa.Table, pa.Table]:
    """The bronze tables of every segment/snapshot/bootstrap file of one cluster (no quarantine)."""
    logs, ctls, snaps = [], [], []
    files = sorted(p for p in Path(directory).rglob("*") if p.is_file() and p.name.startswith(prefix))
    for p in files:
        info = classify(p.name)
        if info.kind.value not in ("segment", "snapshot", "bootstrap"):
            continue
        chunk = decode_to_arrow(p.read_bytes(), cluster_id=prefix or Path(directory).name, source_file=p.name, file_kind=info.kind.value,
                                snapshot_end_offset=info.end_offset, snapshot_epoch=info.epoch)
        assert chunk.quarantine.num_rows == 0, p.name
        logs.append(chunk.log)
        ctls.append(chunk.control)
        snaps.append(chunk.snapshot)
    assert logs, f"no files named {prefix}* in {directory}"
    return (pa.Table.from_batches(logs), pa.Table.from_batches(ctls), pa.Table.from_batches(snaps))


def _bronze(real_kraft_dir: Path, prefix: str) -> tuple[pa.Table, pa.Table, pa.Table]:
    return _decode_dir(str(real_kraft_dir), prefix)


def _log_only(control: pa.Table) -> pa.Table:
    return control.filter(pc.equal(control.column("source_kind"), "log"))


def _snapshot(control: pa.Table, snaps: pa.Table, end: int) -> tuple[pa.Table, pa.Table]:
    return (control.filter(pc.equal(pc.fill_null(control.column("snapshot_end_offset"), -1), end)),
            snaps.filter(pc.equal(snaps.column("snapshot_end_offset"), end)))


@cache
def _full(directory: str, prefix: str):  # noqa: ANN202 - a SequentialResult
    log, control, _ = _decode_dir(directory, prefix)
    return replay(log, _log_only(control))


@pytest.mark.parametrize(("prefix", "end"), PAIRS, ids=[f"{p}-{e}" for p, e in PAIRS])
def test_log_replay_equals_kafkas_snapshot(real_kraft_dir: Path, prefix: str, end: int) -> None:
    log, control, snaps = _bronze(real_kraft_dir, prefix)
    from_log = _full(str(real_kraft_dir), prefix).image_at(end - 1)
    own = replay(None, *_snapshot(control, snaps, end))
    from_snapshot = own.image_at(end - 1)
    assert own.anomalies() == [] and _full(str(real_kraft_dir), prefix).anomalies() == []
    assert from_log == from_snapshot, f"{prefix} snapshot {end}: {first_image_difference(from_log, from_snapshot)}"
    # the comparison has something to compare, and the log moves on after the snapshot
    assert from_snapshot["topics"] and from_snapshot["partitions"] and from_snapshot["brokers"]
    assert from_snapshot["configs"] and from_snapshot["features"]
    assert snaps.filter(pc.equal(snaps.column("snapshot_end_offset"), end)).num_rows == \
        1 + len(from_snapshot["topics"]) + len(from_snapshot["partitions"]) + len(from_snapshot["brokers"]) + \
        len(from_snapshot["controllers"]) + len(from_snapshot["configs"]) + len(from_snapshot["features"]) - 1 + \
        (from_snapshot["producer_ids"]["next_producer_id"] != -1) + (from_snapshot["zk_migration_state"] is not None)
    assert _full(str(real_kraft_dir), prefix).final_image() != {**from_log, "offset": log.column("offset").to_pylist()[-1]}


def test_snapshots_with_epoch_changes_are_matched(real_kraft_dir: Path) -> None:
    """greenlemonT's snapshot (Raft epoch 189, 3 600+ partition changes before it) is the one whose
    partitions carry non-zero leader and partition epochs: the §5.2 increments are what is checked."""
    img = _full(str(real_kraft_dir), "greenlemonT").image_at(28868)
    assert max(p["leader_epoch"] for p in img["partitions"]) >= 10
    assert max(p["partition_epoch"] for p in img["partitions"]) >= 10
    assert sum(p["partition_epoch"] > p["leader_epoch"] for p in img["partitions"]) >= 10


def test_bootstrap_records_open_the_log(real_kraft_dir: Path) -> None:
    """bootstrap.checkpoint is not replayed (the controller copies it into the empty log, facts §7.5):
    its features are those of the log's image once the bootstrap records are visible."""
    checked = 0
    for prefix in ("dkoh12", "greenlemonT", "rjmfernandes", "hiage"):
        _, control, snaps = _bronze(real_kraft_dir, prefix)
        boot = snaps.filter(pc.equal(snaps.column("snapshot_kind"), "bootstrap"))
        assert boot.num_rows > 0, prefix
        relabelled = boot.set_column(boot.schema.get_field_index("snapshot_kind"), "snapshot_kind",
                                     pa.array(["snapshot"] * boot.num_rows))
        boot_img = replay(None, None, relabelled).image_at(-1)
        full = _full(str(real_kraft_dir), prefix)
        first_mv = min(r["valid_from_offset"] for r in full.rows("features") if r["name"] == "metadata.version")
        assert full.image_at(first_mv)["features"] == boot_img["features"], prefix
        checked += 1
    assert checked == 4


@pytest.mark.parametrize("prefix", ["rjmfernandes", "greenlemonT", "dkoh12"])
def test_first_segment_missing_replays_from_the_snapshot(real_kraft_dir: Path, prefix: str) -> None:
    """A log whose head was cleaned (first present offset > 0): replay starts from the earliest
    snapshot the log continues from, and reaches the same images as the full log."""
    log, control, snaps = _bronze(real_kraft_dir, prefix)
    full = _full(str(real_kraft_dir), prefix)
    ends = sorted(set(snaps.filter(pc.equal(snaps.column("snapshot_kind"), "snapshot")).column("snapshot_end_offset").to_pylist()))
    cut = ends[0] - 500  # the first present segment starts before the snapshot's end
    tail_log = log.filter(pc.greater_equal(log.column("offset"), cut))
    ctl = control.filter(pc.or_(pc.not_equal(control.column("source_kind"), "log"),
                                pc.greater_equal(control.column("offset"), cut)))
    res = replay(tail_log, ctl, snaps)
    assert res.anomalies() == []
    commit = res["log_commit"].to_pylist()[0]
    assert commit["first_offset"] == cut and commit["start_snapshot_end_offset"] == ends[0]
    assert commit["replay_start_offset"] == ends[0]
    assert res.final_image() == full.final_image()
    for end in ends:
        assert res.image_at(end - 1) == full.image_at(end - 1)
    last = log.column("offset").to_pylist()[-1]
    for off in range(ends[0], last + 1, max(1, (last - ends[0]) // 7)):
        assert res.image_at(off) == full.image_at(off), off


def test_real_log_with_offset_gaps(real_kraft_dir: Path) -> None:
    """codecrafters' trimmed log: two real batches at offsets 1-4 and 34-35 (the LEADER_CHANGE at 0 and
    everything between cut out by hand) — mid-stream start and a gap, replay goes on."""
    log, control, snaps = _bronze(real_kraft_dir, "codecrafters")
    res = replay(log, _log_only(control), snaps)
    assert [(a["offset"], a["reason_code"]) for a in res.anomalies()] == [(1, "LOG_STARTS_MID_STREAM"), (5, "OFFSET_GAP")]
    assert "5..33 (29)" in res.anomalies()[1]["message"]
    img = res.final_image()
    assert img["metadata_version"] == "3.8-IV0" and len(img["topics"]) == 1 and len(img["partitions"]) == 1
    assert img["zk_migration_state"] == "NONE"
    features = [r for r in res.rows("features")]
    assert [(r["record_offset"], r["valid_from_offset"]) for r in features] == [(2, 4)]  # the bootstrap transaction


def test_divergent_tail_at_a_higher_epoch_wins(real_kraft_dir: Path) -> None:
    """dkoh12's log with its tail (the broker's shutdown: ELR changes from 7652 on) also present as a
    copy that a new leader (epoch 2) rewrote from offset 7652 with a LEADER_CHANGE and NoOps: the old
    tail is quarantined as DIVERGENT_UNCOMMITTED and the image is the old one at 7651."""
    log, control, _ = _bronze(real_kraft_dir, "dkoh12")
    full = _full(str(real_kraft_dir), "dkoh12")
    fork = 7652
    last = log.column("offset").to_pylist()[-1]
    template = log.filter(pc.equal(log.column("record_type"), "NO_OP_RECORD")).slice(0, 1).to_pylist()[0]
    ctl_template = _log_only(control).slice(0, 1).to_pylist()[0]
    new_rows = [dict(ctl_template, offset=fork, batch_base_offset=fork, batch_last_offset=fork, batch_leader_epoch=2,
                     source_file="node2.log")]
    new_noops = [dict(template, offset=o, offset_bucket=0, batch_base_offset=o, batch_last_offset=o, batch_leader_epoch=2,
                      source_file="node2.log") for o in range(fork + 1, last + 5)]
    log2 = pa.concat_tables([log, pa.Table.from_pylist(new_noops, schema=log.schema)])
    ctl2 = pa.concat_tables([_log_only(control), pa.Table.from_pylist(new_rows, schema=control.schema)])
    res = replay(log2, ctl2)
    old_tail = log.filter(pc.greater_equal(log.column("offset"), fork))
    q = res.quarantine
    assert q.num_rows == old_tail.num_rows > 0
    assert set(q.column("reason_code").to_pylist()) == {"DIVERGENT_UNCOMMITTED"}
    assert sorted(q.column("offset").to_pylist()) == sorted(old_tail.column("offset").to_pylist())
    assert res.anomalies() == []
    assert res.final_image() == {**full.image_at(fork - 1), "offset": last + 4}
    assert full.final_image()["partitions"] != full.image_at(fork - 1)["partitions"]  # the old tail did change things
    commit = res["log_commit"].to_pylist()[0]
    assert commit["committed_through_offset"] == fork - 1 and commit["last_batch_leader_epoch"] == 2


@pytest.mark.parametrize("prefix", ["dkoh12", "ftmhxp", "rjmfernandes", "hiage", "greenlemonT"])
def test_versioned_tables_equal_sequential_replay_at_any_offset(real_kraft_dir: Path, prefix: str) -> None:
    """image_at(O) from the versioned tables == the state of a replay of the records up to O only."""
    log, control, _ = _bronze(real_kraft_dir, prefix)
    ctl = _log_only(control)
    full = _full(str(real_kraft_dir), prefix)
    changes = sorted({r["valid_from_offset"] for t in VERSIONED_TABLES for r in full.rows(t)})
    last = log.column("offset").to_pylist()[-1]
    picks = sorted({0, 1, last, *changes[:: max(1, len(changes) // 5)], *(c - 1 for c in changes[-3:])})
    if prefix == "greenlemonT":
        picks = picks[::3]
    for off in picks:
        cut = replay(log.filter(pc.less_equal(log.column("offset"), off)),
                     ctl.filter(pc.less_equal(ctl.column("offset"), off)))
        assert cut.final_image() == {**full.image_at(off), "offset": cut.final_image()["offset"]}, off


@pytest.mark.parametrize("prefix", ["greenlemonT", "hiage"])  # logs with enough closed versions to spill
def test_spilling_closed_versions_gives_the_same_tables(real_kraft_dir: Path, prefix: str) -> None:
    """``replay(spill_rows=N)`` (the benchmark's mode at 10M records) writes closed versions to Arrow
    files along the way: every silver table holds the plain replay's rows (in another order)."""
    log, control, _ = _bronze(real_kraft_dir, prefix)
    full = _full(str(real_kraft_dir), prefix)
    lean = replay(log, _log_only(control), spill_rows=4)
    assert any(lean._runs[c].img.spilled[t] for c in lean.cluster_ids for t in VERSIONED_TABLES)  # it did spill
    for t in SILVER_TABLES:
        key = [(c, "ascending", "at_start") for c in SILVER_TABLES[t].sort_key]
        assert lean[t].sort_by(key).equals(full[t]), t
    with pytest.raises(ValueError, match="spill_rows"):
        lean.image_at(0)


@pytest.mark.parametrize("prefix", ["dkoh12", "ftmhxp", "greenlemonT", "rjmfernandes", "hiage"])
def test_version_invariants(real_kraft_dir: Path, prefix: str) -> None:
    res = _full(str(real_kraft_dir), prefix)
    for t in VERSIONED_TABLES:
        spec = SILVER_TABLES[t]
        rows = res[t].to_pylist()
        by_entity: dict[tuple, list[dict]] = {}
        for r in rows:
            by_entity.setdefault(tuple(r[k] for k in ("cluster_id", *spec.key_names)), []).append(r)
        for key, vs in by_entity.items():
            for a, b in zip(vs, vs[1:]):
                assert a["valid_to_offset"] == b["valid_from_offset"] and a["valid_to_time"] == b["valid_from_time"], (t, key)
                assert not (a["deleted"] and b["deleted"]), (t, key)
            assert vs[-1]["valid_to_offset"] is None, (t, key)
            assert not vs[0]["deleted"], (t, key)
            for v in vs:
                assert v["valid_from_time"] is not None and v["record_type"], (t, key)
                assert v["valid_to_offset"] is None or v["valid_from_offset"] <= v["valid_to_offset"], (t, key)
                assert v["record_offset"] <= v["valid_from_offset"], (t, key)
                if v["deleted"]:
                    assert all(v[f] is None for f in spec.field_names), (t, key)
    batches = res["log_batches"].to_pylist()
    assert all(b["transaction_open"] is not None for b in batches)
    commit = res["log_commit"].to_pylist()[0]
    assert commit["offset_gaps"] == 0 and commit["batches"] == len(batches)


def test_log_commit_of_the_real_logs(real_kraft_dir: Path) -> None:
    """greenlemonT: ~60 leader changes, so everything before the last epoch's first batch is certainly
    committed; hiage: one epoch and no snapshot, so nothing is certain."""
    g = _full(str(real_kraft_dir), "greenlemonT")["log_commit"].to_pylist()[0]
    batches = _full(str(real_kraft_dir), "greenlemonT")["log_batches"].to_pylist()
    first_of_last_epoch = min(b["batch_base_offset"] for b in batches if b["batch_leader_epoch"] == g["last_batch_leader_epoch"])
    assert g["committed_through_offset"] == first_of_last_epoch - 1
    assert g["last_batch_leader_epoch"] == 190 and g["replayed_records"] > 30_000
    h = _full(str(real_kraft_dir), "hiage")["log_commit"].to_pylist()[0]
    assert h["committed_through_offset"] == -1 and h["start_snapshot_end_offset"] is None


def test_samples_log_equals_their_snapshot() -> None:
    """data/samples/node1 (our own encoder, tools/make_samples.py): the log replayed to 46 equals the
    snapshot 47-2, and the second segment alone replays from that snapshot to the same end."""
    node = ROOT / "data" / "samples" / "node1"
    if not node.is_dir():
        pytest.fail("data/samples/node1 is missing: run tools/make_samples.py")
    log, control, snaps = _decode_dir(str(node), "")
    res = replay(log, control, snaps)
    end = 47
    assert res.image_at(end - 1) == replay(None, *_snapshot(control, snaps, end)).image_at(end - 1)
    second = copy.copy(log.filter(pc.greater_equal(log.column("offset"), 24)))
    ctl = control.filter(pc.or_(pc.not_equal(control.column("source_kind"), "log"),
                                pc.greater_equal(control.column("offset"), 24)))
    tail = replay(second, ctl, snaps)
    assert tail.anomalies() == [] and tail.final_image() == res.final_image()
    assert tail["log_commit"].to_pylist()[0]["start_snapshot_end_offset"] == end
