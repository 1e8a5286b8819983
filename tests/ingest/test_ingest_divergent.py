"""Divergent copies (issue 10, docs/design.md "divergent copies"): two nodes' data dirs of one cluster
where the second node's log has its tail rewritten by a later leader (a higher ``batch_leader_epoch``).

Ingest keeps every different copy of an offset (identical copies are one row), whether both dirs come
in one run (overlapping inputs) or one after the other (rows already in the table); replay applies
Raft's rule — the copy from the batch with the higher epoch wins — and moves the losing copies to
``ingest_quarantine`` as ``DIVERGENT_UNCOMMITTED``: nothing dropped silently.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from kraft_replay.codec.batch import RecordBatch, encode_batch, iter_batches
from kraft_replay.ingest import run_ingest
from kraft_replay.lake import Lake
from kraft_replay.replay.run import run_replay

NAME = "rjmfernandes__flink-on-prem__00000000000000000000.log"
SEGMENT = "00000000000000000000.log"
TAIL_BATCHES = 40
#: the segment's first batches (offsets 0..2315, 184 kB of its 1.2 MB): its topics, partitions and configs,
#: then heartbeats, up to 40 data batches past the three topics created at offsets 2273..2278 -- so the
#: rewritten tail creates topics and their partitions. The other 14,553 batches (heartbeats, and near the
#: end partition and broker registration changes: divergence is decided per offset by the batch epoch,
#: whatever the records) only made every ingest and replay of the test 7x larger.
HEAD_BATCHES = 1787


def _quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def node_dirs(real_kraft_dir: Path, tmp_path_factory) -> tuple[Path, Path, dict]:
    """Node A: the real segment's first :data:`HEAD_BATCHES` batches (a log cut at a batch boundary, as
    a segment rolled there). Node B: the same log whose last data batches were rewritten at a higher
    epoch (what a new leader does to an uncommitted tail)."""
    whole = (real_kraft_dir / NAME).read_bytes()
    batches = [b for b in iter_batches(whole)][:HEAD_BATCHES]
    data = whole[:batches[-1].position + batches[-1].size]
    assert all(isinstance(b, RecordBatch) for b in batches)
    assert [b.base_offset for b in iter_batches(data)] == [b.base_offset for b in batches]
    tail = [b for b in batches if not b.is_control][-TAIL_BATCHES:]
    cut = tail[0].position
    epoch = max(b.partition_leader_epoch for b in batches) + 1
    rewritten = b"".join(encode_batch(replace(b, partition_leader_epoch=epoch))
                         for b in batches if b.position >= cut)
    root = tmp_path_factory.mktemp("nodes")
    a, b = root / "node-a" / "__cluster_metadata-0", root / "node-b" / "__cluster_metadata-0"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    (a / SEGMENT).write_bytes(data)
    (b / SEGMENT).write_bytes(data[:cut] + rewritten)
    tail_records = sum(len(x.records) for x in batches if x.position >= cut)
    # the rewritten tail holds state changes, not only heartbeats: TopicRecord and PartitionRecord (api
    # keys 2 and 3: a record value's second byte)
    assert {r.value[1] for x in tail for r in x.records} >= {2, 3}
    facts = {"tail_records": tail_records, "first_tail_offset": tail[0].base_offset, "epoch": epoch,
             "rows": sum(len(x.records) for x in batches if not x.is_control)}
    return a, b, facts


def _log_rows(lake: Lake) -> int:
    return lake.read("metadata_log").count()


def test_one_run_keeps_both_copies_and_replay_quarantines_the_losers(spark, tmp_path, node_dirs) -> None:
    a, b, facts = node_dirs
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    run_ingest(spark, lake, [str(a)], cluster_id="d", say=_quiet)
    assert _log_rows(lake) == facts["rows"]
    # node B in a later run: its rewritten tail is new (other epoch), its head is already there
    s = run_ingest(spark, lake, [str(b)], cluster_id="d", say=_quiet)
    data_tail = (lake.read("metadata_log").where(F.col("batch_leader_epoch") == facts["epoch"]).count())
    assert s.rows["metadata_log"] == data_tail > 0
    assert _log_rows(lake) == facts["rows"] + data_tail

    # both dirs in one run (overlapping inputs) give the same rows
    other = Lake(str(tmp_path / "lake2"), spark, backend="deltars")
    s2 = run_ingest(spark, other, [str(a), str(b)], cluster_id="d", say=_quiet)
    assert s2.rows["metadata_log"] == facts["rows"] + data_tail
    cols = [c for c in lake.read("metadata_log").columns if c != "source_file"]
    x, y = lake.read("metadata_log").select(*cols), other.read("metadata_log").select(*cols)
    assert x.exceptAll(y).count() == 0 and y.exceptAll(x).count() == 0

    summary = run_replay(spark, lake, say=_quiet)
    (commit,) = summary.commit
    assert commit["divergent_records"] == data_tail == summary.quarantined
    q = lake.read("ingest_quarantine").where(F.col("reason_code") == "DIVERGENT_UNCOMMITTED")
    rows = q.select("offset", "reason").collect()
    assert len(rows) == data_tail
    # the losers are node A's copies, of the epoch before the rewrite
    assert all(f"in a batch of epoch {facts['epoch'] - 1} " in r.reason for r in rows), rows[0].reason
    assert min(r.offset for r in rows) == facts["first_tail_offset"]
    # silver holds the winners: every batch from the tail on is the higher epoch's
    tail_batches = lake.read("log_batches").where(F.col("batch_base_offset") >= facts["first_tail_offset"])
    assert tail_batches.count() > 0
    assert {r.batch_leader_epoch for r in tail_batches.select("batch_leader_epoch").distinct().collect()} == {facts["epoch"]}
    # a rerun of the replay replaces the divergent rows, never doubles them
    run_replay(spark, lake, say=_quiet)
    assert lake.read("ingest_quarantine").where(F.col("reason_code") == "DIVERGENT_UNCOMMITTED").count() == data_tail
