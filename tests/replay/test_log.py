"""The committed-log stage of replay (facts §5.1, §4.2, §5.7; docs/design.md "Where replay starts, gaps,
divergent copies, commit certainty"): divergent copies, kept copies, the start, gaps, metadata
transactions, visibility, commit certainty and provenance — small hand-built logs, chispa
assertions on the pure DataFrame functions of :mod:`kraft_replay.replay.log`."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bronze_builder import BronzeLog, change, mv, partition, rec, topic  # noqa: E402
from replay_scenarios import arrow_df  # noqa: E402

from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA  # noqa: E402
from kraft_replay.replay import log as L  # noqa: E402
from kraft_replay.replay.engine import cut  # noqa: E402

T1 = "AAAAAAAAAAAAAAAAAAAAAQ"


class Stage:
    """The log stage's frames for hand-built logs (any number of clusters), each materialised once."""

    def __init__(self, spark, logs: list[BronzeLog]) -> None:
        tabs = [b.tables() for b in logs]
        log, ctl, snap = (pa.concat_tables([t[i] for t in tabs]) for i in range(3))
        ck = _checkpoint
        self.log = ck(arrow_df(spark, log, LOG_SCHEMA))
        self.ctl = ck(arrow_df(spark, ctl, CONTROL_SCHEMA))
        self.snap = ck(arrow_df(spark, snap, SNAPSHOT_SCHEMA))
        self.positions = ck(L.log_positions(self.log, self.ctl))
        self.batches = ck(L.mark_divergent(L.log_batches(self.positions)))
        self.catalog = ck(L.snapshot_catalog(self.snap, self.ctl))
        self.usable = ck(L.usable_snapshots(self.catalog))
        clusters = self.log.select("cluster_id").union(self.ctl.select("cluster_id")).union(self.snap.select("cluster_id")).distinct()
        self.starts = ck(L.replay_starts(self.batches, self.usable, clusters))
        self.kept = ck(L.kept_records(self.log, self.batches))
        self.gaps = ck(L.offset_gaps(self.positions, self.batches, self.starts, self.usable))
        self.txns = ck(L.transactions(self.kept, self.starts))
        self.spans = ck(L.transaction_spans(self.txns, self.starts))
        self.copies = ck(L.copy_digests(self.log, self.kept))
        self.applied = ck(L.applied_records(self.log, self.copies, self.batches, self.starts, self.spans))
        self.commit = ck(L.commit_certainty(self.batches, self.usable, self.starts))

    def of(self, cluster: str) -> "Stage":
        """A view of one cluster's rows of every frame."""
        view = object.__new__(Stage)
        for k, v in vars(self).items():
            setattr(view, k, v.where(F.col("cluster_id") == cluster))
        return view


def _checkpoint(df):
    return cut(df)


CASES: dict[str, BronzeLog] = {}


def case(fn):
    b = BronzeLog(fn.__name__)
    fn(b)
    CASES[fn.__name__] = b
    return fn


@pytest.fixture(scope="module")
def stage(spark) -> Stage:
    return Stage(spark, list(CASES.values()))


@case
def transactions(b: BronzeLog) -> None:
    b.batch(mv(14), rec("BEGIN_TRANSACTION_RECORD", name=None), topic("t", T1), rec("END_TRANSACTION_RECORD"))  # 0..3
    b.batch(rec("ABORT_TRANSACTION_RECORD", reason=None))                                                        # 4
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), rec("BEGIN_TRANSACTION_RECORD", name=None), topic("u", T1),
            rec("END_TRANSACTION_RECORD"))                                                                       # 5..8
    b.batch(rec("END_TRANSACTION_RECORD"))                                                                       # 9
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), topic("v", T1), rec("ABORT_TRANSACTION_RECORD", reason="x"))  # 10..12
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), topic("w", T1))                                          # 13..14


@case
def visibility(b: BronzeLog) -> None:
    b.batch(mv(14), rec("BEGIN_TRANSACTION_RECORD", name=None), topic("t", T1))    # 0..2
    b.batch(partition(T1, 0, [1]), rec("END_TRANSACTION_RECORD"))                  # 3..4
    b.batch(change(T1, 0, isr=[]), rec("NO_OP_RECORD"))                             # 5..6
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), change(T1, 0, isr=[1]), rec("ABORT_TRANSACTION_RECORD", reason="x"))
    b.batch(change(T1, 0, isr=[1]))                                                 # 10
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), change(T1, 0, isr=[]))     # 11..12: still open


@case
def divergence(b: BronzeLog) -> None:
    b.batch(mv(11), topic("t", T1))                                           # 0..1 epoch 1
    b.batch(change(T1, 0, isr=[1]), change(T1, 0, isr=[2]), change(T1, 0, isr=[3]), at=2, epoch=1)  # 2..4 epoch 1
    b.batch(rec("NO_OP_RECORD"), rec("NO_OP_RECORD"), rec("NO_OP_RECORD"), at=2, epoch=2)           # 2..4 epoch 2
    b.offset = 5
    b.batch(rec("NO_OP_RECORD"), rec("NO_OP_RECORD"), epoch=1)              # 5..6 epoch 1


@case
def copies(b: BronzeLog) -> None:
    b.batch(mv(11), topic("t", T1))
    b.log.append(dict(b.log[-1], source_file="b.log"))                                     # identical copy
    b.log.append(dict(b.log[0], source_file="c.log", feature_level={"name": "metadata.version", "feature_level": 12}))


def _certainty(b: BronzeLog) -> int:
    b.batch(mv(11))
    b.noop(2)                       # 1, 2
    lc = b.leader_change()          # 3: epoch 2
    b.noop(2)                       # 4, 5
    return lc


@case
def certain_by_epoch(b: BronzeLog) -> None:
    _certainty(b)


@case
def certain_by_snapshot(b: BronzeLog) -> None:
    _certainty(b)
    b.snapshot(5, 2, [mv(11)])


@case
def certain_none(b: BronzeLog) -> None:
    b.batch(mv(11))


@case
def provenance(b: BronzeLog) -> None:
    b.leader_change()
    b.batch(mv(11), topic("t", T1))
    b.leader_change()


def _mid(snapshot_end):
    def build(b: BronzeLog) -> None:
        b.offset = 100
        b.batch(mv(11), topic("t", T1), rec("NO_OP_RECORD"))   # 100..102
        b.skip(7)                                               # 103..109 missing
        b.batch(rec("NO_OP_RECORD"))                           # 110
        if snapshot_end is not None:
            b.snapshot(snapshot_end, 1, [mv(11)])
    build.__name__ = f"start_{snapshot_end}"
    return build


for _end in (None, 100, 102, 50, 106):
    case(_mid(_end))


@case
def buckets(b: BronzeLog) -> None:
    b.offset = 999_998
    b.batch(rec("NO_OP_RECORD"), rec("NO_OP_RECORD"))   # 999 998..999 999
    b.batch(rec("NO_OP_RECORD"))                        # 1 000 000
    b.skip(4)
    b.batch(rec("NO_OP_RECORD"))                        # 1 000 005
    b.snapshot(999_998, 1, [mv(11)])


@case
def stray_offsets(b: BronzeLog) -> None:
    """Hostile batches (CRC-valid, accepted by the decoder): a record whose offset delta points past
    its header's last offset, onto the next batch's offset; a batch with an offset missing inside."""
    b.batch(mv(11), topic("t", T1))                              # 0..1
    b.log.append(dict(b.log[-1], offset=2, source_position=5))   # a stray record at 2 in batch 0..1
    b.batch(rec("NO_OP_RECORD"))                                 # 2
    b.batch(rec("NO_OP_RECORD"), rec("NO_OP_RECORD"))            # 3..4
    b.log.pop()                                                  # 4 missing inside batch 3..4
    b.batch(rec("NO_OP_RECORD"))                                 # 5


def _cols(df, *names):
    return df.select(*names).orderBy(*names)


def test_transactions_committed_aborted_open_and_marker_errors(spark, stage) -> None:
    s = stage.of("transactions")
    got = _cols(s.txns, "offset", "outcome", "close_offset", "open_begin")
    want = spark.createDataFrame([
        (1, "COMMITTED", 3, 1), (3, "CLOSE", None, 1), (4, "CLOSE_WITHOUT_BEGIN", None, 1), (5, "COMMITTED", 8, 5),
        (6, "NESTED_BEGIN", None, 5), (8, "CLOSE", None, 5), (9, "CLOSE_WITHOUT_BEGIN", None, 5), (10, "ABORTED", 12, 10),
        (12, "CLOSE", None, 10), (13, "OPEN", None, 13)],
        "offset long, outcome string, close_offset long, open_begin long")
    assert_df_equality(got, want, ignore_nullable=True)
    an = _cols(L.transaction_anomalies(s.txns), "offset", "reason_code", "message")
    want = spark.createDataFrame([
        (4, "TRANSACTION_ERROR", "ABORT_TRANSACTION_RECORD without BeginTransaction"),
        (6, "TRANSACTION_ERROR", "BeginTransaction inside the transaction begun at 5"),
        (9, "TRANSACTION_ERROR", "END_TRANSACTION_RECORD without BeginTransaction")],
        "offset long, reason_code string, message string")
    assert_df_equality(an, want, ignore_nullable=True)


def test_visibility_inside_transactions(spark, stage) -> None:
    s = stage.of("visibility")
    got = _cols(s.applied, "offset", "_vis", "_vtime")
    t = {r["offset"]: r["append_time"] for r in CASES["visibility"].log}
    want = spark.createDataFrame([(0, 0, t[0]), (2, 4, t[4]), (3, 4, t[4]), (5, 5, t[5]), (10, 10, t[10])],
                                 "offset long, _vis long, _vtime timestamp")
    assert_df_equality(got, want, ignore_nullable=True)
    opened = _cols(L.log_batches_table(s.batches, s.commit, s.spans, s.starts), "batch_base_offset", "transaction_open")
    want = spark.createDataFrame([(0, True), (3, False), (5, False), (7, False), (10, False), (11, True)],
                                 "batch_base_offset long, transaction_open boolean")
    assert_df_equality(opened, want, ignore_nullable=True)


def test_divergent_batch_is_one_a_higher_epoch_overlaps(spark, stage) -> None:
    """Raft: a new leader (epoch 2) rewrote the log from offset 2: the epoch-1 batch 2..4 is divergent
    (its records go to the quarantine), the epoch-1 batch 5..6 no higher epoch covers is not."""
    s = stage.of("divergence")
    got = _cols(s.batches, "batch_base_offset", "batch_leader_epoch", "divergent", "records")
    want = spark.createDataFrame([(0, 1, False, 2), (2, 1, True, 3), (2, 2, False, 3), (5, 1, False, 2)],
                                 "batch_base_offset long, batch_leader_epoch int, divergent boolean, records int")
    assert_df_equality(got, want, ignore_nullable=True)
    q = L.divergent_quarantine(s.log, s.batches)
    assert sorted((r.offset, r.reason_code) for r in q.collect()) == [(o, "DIVERGENT_UNCOMMITTED") for o in (2, 3, 4)]
    assert q.first().reason.endswith("(2..4) that a batch of a higher epoch replaced")
    assert [r.api_key for r in _cols(s.kept.where("_copy = 1"), "offset", "api_key").collect()] == [12, 2, 20, 20, 20, 20, 20]


def test_identical_copies_are_one_record_and_different_ones_conflict(stage) -> None:
    s = stage.of("copies")
    assert s.kept.where("_copy = 1").count() == 2
    an = L.conflicting_copies(s.copies, s.starts).collect()
    assert [(a.offset, a.reason_code) for a in an] == [(0, "CONFLICTING_COPIES")]
    assert an[0].message == ("two different records at offset 0 in epoch 1 (FEATURE_LEVEL_RECORD from "
                             "00000000000000000000.log, FEATURE_LEVEL_RECORD from c.log); the first is kept")


def test_commit_certainty_by_later_epoch_or_snapshot(stage) -> None:
    got = {r.cluster_id: r.committed_through_offset for r in stage.commit.collect()}
    assert (got["certain_by_epoch"], got["certain_by_snapshot"], got["certain_none"]) == (2, 4, -1)


def test_control_batches_move_provenance(spark, stage) -> None:
    got = _cols(L.image_offsets(stage.of("provenance").batches), "image_offset", "image_epoch")
    want = spark.createDataFrame([(0, 2), (2, 2), (3, 3)], "image_offset long, image_epoch int")
    assert_df_equality(got, want, ignore_nullable=True)


@pytest.mark.parametrize(("snapshot_end", "start", "codes"), [
    (None, None, [(100, "LOG_STARTS_MID_STREAM"), (103, "OFFSET_GAP")]),
    (100, 100, [(103, "OFFSET_GAP")]),
    (102, 102, [(103, "OFFSET_GAP")]),
    (50, 50, [(50, "OFFSET_GAP"), (103, "OFFSET_GAP")]),
    (106, 106, [(106, "OFFSET_GAP")]),   # the earliest snapshot the log reaches: replay starts there
])
def test_start_gaps_and_mid_stream(stage, snapshot_end, start, codes) -> None:
    s = stage.of(f"start_{snapshot_end}")
    st = s.starts.first()
    assert st.start_snapshot_end_offset == start and st.first_offset == 100 and st.last_offset == 110
    an = L.mid_stream_anomalies(s.starts).unionByName(L.gap_anomalies(s.gaps))
    assert sorted((r.offset, r.reason_code) for r in an.collect()) == codes
    gap = L.gap_anomalies(s.gaps).where(F.col("offset") == codes[-1][0]).first()
    assert gap.message == f"offsets {codes[-1][0]}..109 ({110 - codes[-1][0]}) are absent from the log"
    loads = sorted(r.snapshot_end_offset for r in L.snapshot_loads(s.starts, s.gaps, s.catalog).collect())
    assert loads == ([] if snapshot_end is None else [snapshot_end])


def test_gap_detection_across_offset_buckets(stage) -> None:
    assert sorted((r.gap_lo, r.gap_hi) for r in stage.of("buckets").gaps.collect()) == [(1_000_001, 1_000_005)]


def _clusters(df) -> set[str]:
    return {r.cluster_id for r in df.select("cluster_id").distinct().collect()}


def test_batch_level_shortcuts_equal_the_row_level_scans(spark, stage) -> None:
    """Outside :func:`L.copy_batches` an offset has one row, so the kept records need no window; without
    :func:`L.irregular_batches` the offsets present are the batches' ranges, so the gaps come from the
    batches; where no batch overlaps another either, none is divergent and the gaps come from the
    ordering that found the overlaps (no second ordering); outside copies, and unless a batch holds
    data records on both sides of the replay start, the records replayed are the batches' data rows
    from the start on. Each equals the row-level results on every case it allows, and would be wrong
    on the hostile one it excludes."""
    copy, irregular = _clusters(L.copy_batches(stage.batches)), _clusters(L.irregular_batches(stage.batches))
    overlapping = _clusters(stage.batches.where("_overlap"))
    assert copy == {"copies", "divergence", "stray_offsets"}  # divergence: the winning batch overlaps the loser
    assert irregular == {"stray_offsets"}
    assert overlapping == {"divergence", "stray_offsets"}  # a stray offset widens its batch over the next one
    batch_key = ["cluster_id", "batch_base_offset", "batch_last_offset", "batch_leader_epoch"]
    key = ["cluster_id", "offset", "source_file", "source_position"]
    across: set[str] = set()
    for c in CASES:
        s = stage.of(c)
        if c not in copy:
            fast = L.kept_records(s.log, s.batches, copies=False)
            assert_df_equality(fast.orderBy(*key), s.kept.orderBy(*key), ignore_nullable=True)
            replayed = L.replayed_by_batch(s.batches, s.starts)
            if replayed is None:
                across.add(c)
            else:
                assert_df_equality(replayed, L.replayed_records(s.kept, s.starts), ignore_nullable=True)
        if c not in irregular:
            fast = L.offset_gaps(s.positions, s.batches, s.starts, s.usable, by_batch=True)
            assert_df_equality(fast.orderBy("gap_lo"), s.gaps.orderBy("gap_lo"), ignore_nullable=True)
        if c not in irregular | overlapping:
            plain = L.no_divergent(L.batch_overlaps(L.log_batches(s.positions)))
            assert_df_equality(plain.orderBy(*batch_key), s.batches.orderBy(*batch_key), ignore_nullable=True)
            fast = L.offset_gaps(s.positions, plain, s.starts, s.usable, by_batch=True, ordered=True)
            assert_df_equality(fast.orderBy("gap_lo"), s.gaps.orderBy("gap_lo"), ignore_nullable=True)
    assert across == {"start_102"}  # its snapshot ends inside batch 100..102
    s = stage.of("start_102")
    assert [r.replayed_records for r in L.replayed_records(s.kept, s.starts).collect()] == [2]  # 102 and 110
    s = stage.of("stray_offsets")
    assert [(r.gap_lo, r.gap_hi) for r in s.gaps.collect()] == [(4, 5)]
    assert L.offset_gaps(s.positions, s.batches, s.starts, s.usable, by_batch=True).isEmpty()
    assert [(r.offset, r._n) for r in s.kept.where("_copy = 2").collect()] == [(2, 2)]
    assert L.kept_records(s.log, s.batches, copies=False).where("_n > 1").isEmpty()


def test_batch_records_count_each_offset_present_once(spark) -> None:
    """``records`` of :func:`L.log_batches` is the number of distinct offsets in the batch, whether they
    fall in the 64-offset bit mask or are counted as a set: copies, a copy hiding a hole (rows = the
    header's span), a stray offset beyond the header, the mask's last bit (offset base + 63), a batch of
    64 offsets and more (a set); on every batch, the same count as a plain ``count(distinct)``."""
    rows = []

    def batch(base: int, last: int, offsets: list[int], epoch: int = 1) -> None:
        rows.extend(("c", o, base, last, epoch, 1_000 + o, False) for o in offsets)

    batch(0, 3, [0, 1, 2, 3, 0, 1, 2, 3])          # two identical copies: 4
    batch(4, 7, [4, 5, 5, 7])                      # a copy of 5 hides the missing 6: 3
    batch(8, 9, [8, 9, 12])                        # 12 lies beyond the header: 3
    batch(10, 73, [10, 73, 73])                    # 64 offsets in the header: the mask's bits 0 and 63 (2)
    batch(74, 200, list(range(74, 201)) + [100])   # 127 offsets: a set (127)
    batch(201, 201, [201], epoch=2)
    pos = spark.createDataFrame(rows, "cluster_id string, offset long, batch_base_offset long, batch_last_offset long, "
                                      "batch_leader_epoch int, append_time long, is_control boolean") \
        .withColumn("append_time", F.timestamp_micros("append_time"))
    got = L.log_batches(pos).select("batch_base_offset", "records", "_rows", "_min_offset", "_max_offset")
    want = spark.createDataFrame([(0, 4, 8, 0, 3), (4, 3, 4, 4, 7), (8, 3, 3, 8, 12), (10, 2, 3, 10, 73),
                                  (74, 127, 128, 74, 200), (201, 1, 1, 201, 201)],
                                 "batch_base_offset long, records int, _rows long, _min_offset long, _max_offset long")
    assert_df_equality(got.orderBy("batch_base_offset"), want.orderBy("batch_base_offset"), ignore_nullable=True)
    key = ["cluster_id", "batch_base_offset", "batch_last_offset", "batch_leader_epoch"]
    distinct = pos.groupBy(*key).agg(F.countDistinct("offset").cast("int").alias("records"))
    assert_df_equality(L.log_batches(pos).select(*key, "records").orderBy(*key), distinct.orderBy(*key),
                       ignore_nullable=True)
