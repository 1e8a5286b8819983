"""``kraft-replay ingest DIR --follow``: a node dir written while it is tailed — a half-written batch
waits, whole batches are committed once, rolled segments and new snapshots are picked up, a restart
(also one that lost its positions) adds no duplicate, a rewritten tail is taken again as divergent
copies — and the bronze log ends equal to one ingest of the finished files."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from kraft_replay.ingest import run_ingest
from kraft_replay.ingest.follow import FOLLOW_POSITIONS, _mark_at, follow
from kraft_replay.ingest.plan import walk_batches
from kraft_replay.lake import Lake
from kraft_replay.serve.cli import main

KEY = ["cluster_id", "offset", "batch_base_offset", "batch_leader_epoch", "record_type", "payload_json"]


def _quiet(_: str) -> None:
    pass


def _batch_ends(path: Path) -> list[int]:
    end, ends = 0, []
    data = path.read_bytes()
    while end + 12 <= len(data):
        end += 12 + struct.unpack(">i", data[end + 8:end + 12])[0]
        ends.append(end)
    return ends


def test_the_chain_walk_stops_before_a_half_written_batch(tiny_generated, tmp_path) -> None:
    seg = tiny_generated.segments_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    ends = _batch_ends(seg)
    cut = tmp_path / "cut.log"
    cut.write_bytes(seg.read_bytes()[: ends[2] + 30])  # two... three whole batches and 30 bytes of the fourth
    size = cut.stat().st_size
    walk = walk_batches(str(cut), size, size + 1)
    assert (walk.framed_end, walk.last_start) == (ends[2], ends[1])
    head = seg.read_bytes()[ends[1]: ends[1] + 21]
    assert _mark_at(str(cut), walk.last_start) == (struct.unpack(">i", head[12:16])[0], struct.unpack(">I", head[17:21])[0])
    rest = walk_batches(str(cut), size, size + 1, start=ends[2])
    assert (rest.framed_end, rest.last_start, rest.batches) == (ends[2], -1, 0)


def test_follow_a_node_dir_while_it_is_written(spark, tiny_generated, tmp_path) -> None:
    cid = tiny_generated.cluster_id
    src = tiny_generated.segments_dir / "__cluster_metadata-0"
    logs = sorted(p for p in src.iterdir() if p.suffix == ".log")
    snaps = sorted(p for p in src.iterdir() if p.suffix == ".checkpoint")
    node = tmp_path / "node"
    part = node / "__cluster_metadata-0"
    part.mkdir(parents=True)
    shutil.copy(tiny_generated.segments_dir / "bootstrap.checkpoint", node / "bootstrap.checkpoint")
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")

    def poll() -> None:
        follow(spark, lake, [str(node)], cluster_id=cid, interval=0.01, polls=1, say=_quiet)

    def offsets() -> list[int]:
        return [r.offset for r in lake.read("metadata_log").select("offset").orderBy("offset").collect()]

    # the active segment, cut in the middle of a batch: only the whole batches are taken
    first = logs[0].read_bytes()
    ends = _batch_ends(logs[0])
    (part / logs[0].name).write_bytes(first[: ends[9] + 17])
    poll()
    got = offsets()
    assert got and len(got) == len(set(got))
    taken = lake.read(FOLLOW_POSITIONS).where(F.col("file_name") == logs[0].name).first()
    assert taken["position"] == ends[9] and taken["last_batch_start"] == ends[8]
    assert lake.read("ingest_quarantine").count() == 0  # the half batch waited, nothing quarantined

    # Kafka finishes the batch and appends more; nothing new -> no run
    (part / logs[0].name).write_bytes(first)
    poll()
    versions = lake.published_versions()
    poll()
    assert lake.published_versions() == versions

    # segments roll, snapshots appear
    for p in [*logs[1:], *snaps]:
        shutil.copy(p, part / p.name)
    poll()
    got = offsets()
    assert len(got) == len(set(got))

    # a restart that lost its positions (killed after the ingest published): no duplicate
    lake.overwrite(FOLLOW_POSITIONS, lake.read(FOLLOW_POSITIONS).limit(0))
    poll()
    assert offsets() == got

    whole = Lake(str(tmp_path / "whole"), spark, backend="deltars")
    run_ingest(spark, whole, [str(node)], cluster_id=cid, say=_quiet)
    for t, cols in (("metadata_log", KEY), ("snapshot_records", ["cluster_id", "snapshot_end_offset", "position_in_snapshot"]),
                    ("metadata_control", ["cluster_id", "offset", "control_type", "source_kind", "snapshot_end_offset"])):
        assert_df_equality(lake.read(t).select(*cols), whole.read(t).select(*cols), ignore_row_order=True,
                           ignore_nullable=True)


def test_two_nodes_with_segments_of_one_base_offset_in_one_poll(spark, tmp_path) -> None:
    """Two node dirs of one cluster hold segments with the same base offsets: one poll spools both
    (apart: same file name) and the bronze log holds each offset once, as a plain ingest of one node."""
    samples = Path(__file__).resolve().parents[2] / "data" / "samples" / "node1"
    for n in ("node1", "node2"):
        shutil.copytree(samples, tmp_path / n)
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    follow(spark, lake, [str(tmp_path / "node1"), str(tmp_path / "node2")], interval=0.01, polls=1, say=_quiet)
    plain = Lake(str(tmp_path / "plain"), spark, backend="deltars")
    run_ingest(spark, plain, [str(samples)], say=_quiet)
    got, want = (sorted(r.offset for r in x.read("metadata_log").select("offset").collect()) for x in (lake, plain))
    assert got == want and len(got) == len(set(got)) > 0


def test_a_rewritten_tail_is_taken_again(spark, tiny_generated, tmp_path) -> None:
    """A follower truncates its uncommitted tail and a new leader's batches replace it: the changed
    bytes are noticed (last batch's CRC) and the file is taken again; identical batches are not
    duplicated, the rewritten one is a second copy for replay to judge."""
    cid = tiny_generated.cluster_id
    seg = tiny_generated.segments_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    data = seg.read_bytes()
    ends = _batch_ends(seg)
    node = tmp_path / "node" / "__cluster_metadata-0"
    node.mkdir(parents=True)
    live = node / seg.name
    live.write_bytes(data[: ends[5]])
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    lines: list[str] = []
    follow(spark, lake, [str(node)], cluster_id=cid, interval=0.01, polls=1, say=_quiet)
    before = lake.read("metadata_log").count()
    # the last batch written again by a new leader: same records, higher leader epoch (which the
    # CRC does not cover, so the batch stays valid)
    last = bytearray(data[ends[4]: ends[5]])
    epoch = struct.unpack(">i", bytes(last[12:16]))[0]
    last[12:16] = (epoch + 1).to_bytes(4, "big", signed=True)
    live.write_bytes(data[: ends[4]] + bytes(last))
    report = follow(spark, lake, [str(node)], cluster_id=cid, interval=0.01, polls=1, say=lines.append)
    assert report.retaken == [seg.name], lines
    after = lake.read("metadata_log")
    base = struct.unpack(">q", data[ends[4]:ends[4] + 8])[0]
    copies = after.where(F.col("batch_base_offset") == base)
    n = copies.where(F.col("batch_leader_epoch") == epoch).count()
    assert n > 0 and copies.where(F.col("batch_leader_epoch") == epoch + 1).count() == n
    assert after.count() == before + n  # the unchanged batches were not added again
    assert after.select("offset", "batch_leader_epoch").distinct().count() == after.count()


def test_cli_follow_options(capsys, tmp_path) -> None:
    code = main(["ingest", str(tmp_path), "--lake", str(tmp_path / "lake"), "--polls", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--polls is an option of --follow" in err[0]
    code = main(["ingest", str(tmp_path / "nope"), "--follow", "--polls", "1", "--lake", str(tmp_path / "lake")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no such file or directory" in err[0]


@pytest.mark.parametrize("args, says", [(["--interval", "0"], "--interval must be > 0"), (["--strict"], "exclude each other")])
def test_cli_follow_bad_values(capsys, tmp_path, args, says) -> None:
    code = main(["ingest", str(tmp_path), "--follow", *args, "--lake", str(tmp_path / "lake")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0]
