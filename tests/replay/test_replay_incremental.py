"""Incremental replay (``run_replay(incremental=True)``, ``kraft-replay replay --incremental``, each
stream micro-batch): the stored replay resumed with the bronze rows published since gives the same
silver tables as a whole replay of all of them — on the generated tiny cluster arriving in three
appends (compared with the session's whole replay, row by row) and on a hand-built cluster whose appends
end inside a metadata transaction, before a leader change, a broker's re-registration, a topic
removal and a record that cannot apply (compared with the sequential oracle). Rows that change what
was already replayed (a divergent copy at old offsets, a gap) are replayed whole, with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bronze_builder import BronzeLog, broker, change, config, mv, partition, rec, topic  # noqa: E402
from replay_oracle import first_difference, replay as oracle_replay  # noqa: E402
from replay_scenarios import T1, T2, T3, arrow_df, base_cluster  # noqa: E402
from lake_rows import assert_same_tables  # noqa: E402

from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA  # noqa: E402
from kraft_replay.lake import Lake  # noqa: E402
from kraft_replay.replay.incremental import REPLAY_PROGRESS, BronzeCounts, plan  # noqa: E402
from kraft_replay.replay.run import BRONZE_INPUTS, run_replay  # noqa: E402
from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS, SILVER_TABLES  # noqa: E402

SCHEMAS = {"metadata_log": LOG_SCHEMA, "metadata_control": CONTROL_SCHEMA, "snapshot_records": SNAPSHOT_SCHEMA}


def _quiet(_: str) -> None:
    pass


def _position(table: str):  # noqa: ANN202 - a Column
    """Where a bronze row belongs in the order a node writes its files: its batch's base offset (a
    snapshot's rows: END − 1)."""
    if table == "snapshot_records":
        return F.col("snapshot_end_offset") - 1
    base = F.coalesce(F.col("batch_base_offset"), F.col("offset"))
    if table == "metadata_control":
        return F.when(F.coalesce(F.col("source_kind"), F.lit("log")) == "log", base).otherwise(F.col("snapshot_end_offset") - 1)
    return base


def _arrive(src: Lake, dst: Lake, lo: int, hi: int) -> None:
    """The bronze rows of ``src`` whose batches start in [lo, hi) appended to ``dst`` (one ingest run each)."""
    for t in BRONZE_INPUTS:
        df = src.read(t)
        dst.create_table(t, df.schema, partition_by=["cluster_id"])
        dst.append(t, df.where((_position(t) >= lo) & (_position(t) < hi)))


def test_tiny_cluster_in_three_appends_equals_the_whole_replay(spark, tiny_generated, replayed_tiny, tmp_path,
                                                               monkeypatch) -> None:
    """Offsets < 3000 replayed whole; then 3000..4199 (a topic removal, a metadata.version change and
    a new snapshot, which moves commit certainty) and the rest (another metadata.version change)
    resumed; then nothing new. Every silver table and image_snapshots equal the session's whole replay
    of the same bronze.

    The merges of the new versions (checkpointed: no size statistics) with the stored tables plan no
    runtime Bloom filter: Spark would embed megabytes of filter in every task of those joins (task
    binaries of 20-72 MiB here; a 3 GiB driver ran out of heap). With the replay's session setting
    turned back on, the same plans have one — what the check catches.

    Small runs (spark.sized_run): the first resumed append (1,200 records) is replayed with
    interpreted expressions and without adaptive execution, and the session's settings are back
    afterwards; the second, with the threshold lowered to 0, keeps generated code and adaptive
    execution."""
    import kraft_replay.replay.incremental as inc
    import kraft_replay.spark.session as session
    from kraft_replay.replay.engine import SESSION_CONF
    from kraft_replay.spark import SMALL_RUN_CONF

    key = "spark.sql.optimizer.runtime.bloomFilter.enabled"
    mode_key = "spark.sql.codegen.factoryMode"
    aqe_key = "spark.sql.adaptive.enabled"
    plans: dict[str, list[bool]] = {"off": [], "on": []}
    codegen: list[tuple[str | None, str | None]] = []
    merge = inc.merge_versions

    def merge_checked(stored, new, table, at):  # noqa: ANN001, ANN202
        codegen.append((spark.conf.get(mode_key, None), spark.conf.get(aqe_key, None)))
        out = merge(stored, new, table, at)
        # every merge planned with the replay's setting; with the filter turned on, until one shows it
        for mode, value in (("off", SESSION_CONF[key]), ("on", "true")):
            if mode == "on" and any(plans["on"]):
                break
            spark.conf.set(key, value)
            plans[mode].append("might_contain" in out.select("*")._jdf.queryExecution().executedPlan().toString())
        spark.conf.set(key, SESSION_CONF[key])
        return out

    monkeypatch.setattr(inc, "merge_versions", merge_checked)
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    _arrive(tiny_generated.lake, lake, 0, 3000)
    first = run_replay(spark, lake, say=_quiet, incremental=True, resume_min_records=0)
    assert first.modes == {tiny_generated.cluster_id: "FULL (no earlier replay of the cluster in this lake)"}
    lines: list[str] = []
    session_mode = (spark.conf.get(mode_key, None), spark.conf.get(aqe_key, None))
    small_mode = (SMALL_RUN_CONF[mode_key], SMALL_RUN_CONF[aqe_key])
    assert session_mode[0] != small_mode[0] and session_mode[1] != small_mode[1] == "false"
    seen: list[set[tuple[str | None, str | None]]] = []
    for lo, hi in ((3000, 4200), (4200, 10**9)):
        _arrive(tiny_generated.lake, lake, lo, hi)
        if lo == 4200:
            monkeypatch.setattr(session, "SMALL_RUN_ROWS", 0)
        codegen.clear()
        s = run_replay(spark, lake, say=lines.append, incremental=True, resume_min_records=0)
        assert s.modes[tiny_generated.cluster_id].startswith("INCREMENTAL"), (s.modes, lines)
        seen.append(set(codegen))
        assert (spark.conf.get(mode_key, None), spark.conf.get(aqe_key, None)) == session_mode  # restored
    assert seen == [{small_mode}, {session_mode}], seen
    assert any(ln.strip().startswith("log_batches:") and "rewritten" in ln for ln in lines), lines  # certainty moved
    progress = lake.read(REPLAY_PROGRESS).first()
    assert (progress["mode"], progress["through_offset"]) == ("INCREMENTAL", 6011)
    before = lake.published_versions()
    idle = run_replay(spark, lake, say=_quiet, incremental=True, resume_min_records=0)
    assert idle.modes == {tiny_generated.cluster_id: "CURRENT"} and lake.published_versions() == before
    assert plans["off"] and not any(plans["off"]) and any(plans["on"]), plans
    rows = assert_same_tables(lake, replayed_tiny, [*SILVER_TABLES, IMAGE_SNAPSHOTS])
    for t in [*SILVER_TABLES, IMAGE_SNAPSHOTS]:
        assert rows[t] > 0 or t == "replay_anomalies", t


def _story() -> tuple[BronzeLog, dict[str, int]]:
    """One cluster; ``cuts``: where each append ends (the offset after it)."""
    b = BronzeLog("resumed")
    base_cluster(b)                                            # mv, brokers 1-3, topic T1 with partitions 0, 1
    b.batch(config(2, "orders", "retention.ms", "1000"), change(T1, 0, isr=[1, 2]))
    epoch3 = next(r["register_broker"]["broker_epoch"] for r in b.log
                  if r.get("register_broker") and r["register_broker"]["broker_id"] == 3)
    b.batch(rec("UNREGISTER_BROKER_RECORD", broker_id=3, broker_epoch=epoch3))
    cuts = {"first": b.offset}
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name="create t2"), topic("t2", T2), partition(T2, 0, [1, 2]))
    cuts["in_transaction"] = b.offset                          # the append ends inside the transaction
    b.batch(partition(T2, 1, [2, 1]), change(T2, 0, isr=[1]))
    b.batch(rec("END_TRANSACTION_RECORD"))
    b.leader_change()                                          # epoch 2: what came before is certainly committed
    b.batch(broker(3, b.offset, fenced=False))                 # broker 3 again: its tombstone ends
    b.batch(rec("REMOVE_TOPIC_RECORD", topic_id=T1))           # closes T1's partitions and its config
    b.batch(change(T3, 0, isr=[1]))                            # UNKNOWN_TOPIC
    cuts["after_leader_change"] = b.offset
    b.snapshot(b.offset, b.epoch, [mv(11)])                    # a snapshot alone, no new log rows: certainty moves
    cuts["snapshot_alone"] = b.offset
    b.batch(change(T2, 1, isr=[2]), at=cuts["in_transaction"], epoch=3)   # a later leader's copy of old offsets
    cuts["divergent"] = b.offset
    b.skip(3)
    b.batch(change(T2, 0, leader=2))
    cuts["gap"] = b.offset
    return b, cuts


def _bronze_upto(b: BronzeLog, hi: int, with_divergent: bool, with_snapshot: bool) -> tuple[pa.Table, pa.Table, pa.Table]:
    log, ctl, snap = b.tables()
    keep = pc.less(pc.coalesce(log.column("batch_base_offset"), log.column("offset")), hi)
    if not with_divergent:
        keep = pc.and_(keep, pc.less(log.column("batch_leader_epoch"), 3))
    is_log = pc.equal(ctl.column("source_kind"), "log")
    ctl = ctl.filter(pc.or_(pc.and_(is_log, pc.less(ctl.column("offset"), hi)), pc.and_(pc.invert(is_log), with_snapshot)))
    return log.filter(keep), ctl, snap if with_snapshot else snap.slice(0, 0)


def test_hand_built_cluster_resumed_equals_the_oracle(spark, tmp_path) -> None:
    """Each append resumed (or replayed whole, with its reason) and every silver table equal to the
    sequential oracle's replay of the bronze so far: a transaction open at the end of an append (its
    records visible at its End, in the next one), a leader change (commit certainty), a broker
    registered again after its tombstone, a topic removal closing partitions and configs, an
    anomaly; then a divergent copy of old offsets and a gap, each replayed whole."""
    b, cuts = _story()
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    done = (pa.table({}), pa.table({}), pa.table({}))
    expected_modes = {"first": "FULL", "in_transaction": "INCREMENTAL", "after_leader_change": "INCREMENTAL",
                      "snapshot_alone": "INCREMENTAL", "divergent": "FULL (log rows were added at offsets <=",
                      "gap": "FULL (an offset gap"}
    for step, hi in cuts.items():
        now = _bronze_upto(b, hi, with_divergent=step in ("divergent", "gap"),
                           with_snapshot=step in ("snapshot_alone", "divergent", "gap"))
        for t, old, new in zip(BRONZE_INPUTS, done, now):
            lake.create_table(t, arrow_df(spark, new.slice(0, 0), SCHEMAS[t]).schema, partition_by=["cluster_id"])
            if old.num_rows:  # the rows not appended yet (bronze is append-only)
                key = [c for c in ("offset", "position_in_snapshot", "batch_leader_epoch", "source_kind") if c in new.column_names]
                seen = set(zip(*[old.column(c).to_pylist() for c in key]))
                new = new.filter(pa.array([k not in seen for k in zip(*[new.column(c).to_pylist() for c in key])]))
            if new.num_rows:
                lake.append(t, arrow_df(spark, new, SCHEMAS[t]))
        done = now
        s = run_replay(spark, lake, say=_quiet, incremental=True, resume_min_records=0)
        assert s.modes["resumed"].startswith(expected_modes[step]), (step, s.modes)
        oracle = oracle_replay(*now).tables
        for t in SILVER_TABLES:  # every row and column (the first differing entity named)
            got = lake.read_arrow(t, SILVER_TABLES[t].schema.names).cast(SILVER_TABLES[t].schema)
            diff = first_difference(t, oracle[t], got)
            assert diff is None, (step, diff)
    final = lake.read("replay_anomalies").select("reason_code").collect()
    assert {r.reason_code for r in final} >= {"UNKNOWN_TOPIC", "OFFSET_GAP"}
    commit = lake.read("log_commit").first()
    assert commit["committed_through_offset"] >= cuts["after_leader_change"] - 1 and commit["divergent_records"] > 0


def _progress(**kw) -> dict:
    return {"through_offset": 999, "log_rows": 900, "control_log_rows": 100, "control_snapshot_rows": 0,
            "snapshot_rows": 0, "max_snapshot_end_offset": None, **kw}


def _commit(**kw) -> dict:
    return {"last_offset": 999, "first_offset": 0, "offset_gaps": 0, "start_snapshot_end_offset": None,
            "open_transaction_offset": None, "replayed_records": 900, **kw}


@pytest.mark.parametrize("progress, commit, now, mode, says", [
    (None, None, BronzeCounts(950, 100), "FULL", "no earlier replay"),
    (_progress(), _commit(last_offset=990), BronzeCounts(950, 100, log_after=50), "FULL", "last batch was divergent"),
    (_progress(), _commit(), BronzeCounts(951, 100, log_after=50), "FULL", "added at offsets <= 999"),
    (_progress(), _commit(), BronzeCounts(900, 101, control_after=0), "FULL", "added at offsets <= 999"),
    (_progress(), _commit(), BronzeCounts(900, 100), "CURRENT", "no new bronze rows"),
    (_progress(), _commit(replayed_records=99), BronzeCounts(950, 100, log_after=50), "FULL", "a small log (99 records"),
    (_progress(), _commit(), BronzeCounts(1901, 100, log_after=1001), "FULL", "more new records (1,001)"),
    (_progress(), _commit(offset_gaps=1), BronzeCounts(950, 100, snapshot_rows=5, log_after=50), "FULL", "gaps"),
    (_progress(), _commit(), BronzeCounts(950, 100, log_after=50), "INCREMENTAL", 999),
    (_progress(), _commit(open_transaction_offset=980), BronzeCounts(950, 100, log_after=50), "INCREMENTAL", 979),
])
def test_plan_resumes_only_what_earlier_rows_did_not_change(progress, commit, now, mode, says) -> None:
    """``plan``: a stored replay is resumed (at E, or before a transaction still open there) only when
    the bronze rows it read are all still there unchanged and the log is big enough to be worth it;
    otherwise the cluster is replayed whole, with the reason, or left alone when nothing is new."""
    p = plan("c", progress, commit, now, None, None, min_records=100)  # type: ignore[arg-type]
    assert p.mode == mode, p
    assert (p.at == says) if mode == "INCREMENTAL" else (says in p.reason), p


def test_the_log_counts_off_the_delta_log_equal_the_scan_of_the_version_read(spark, tiny_generated, tmp_path) -> None:
    """A whole replay takes the log's rows and greatest offset per cluster from the Delta log's file
    statistics (``Lake.partition_stats``) of the version it reads: the same counts as the scan of
    every record, whatever an ingest publishes after the read."""
    from kraft_replay.replay.incremental import bronze_counts
    from kraft_replay.replay.run import _read_bronze

    cid = tiny_generated.cluster_id
    lake = Lake(str(tmp_path / "lake"), spark, backend="deltars")
    _arrive(tiny_generated.lake, lake, 0, 3000)
    log, control, snapshots, version = _read_bronze(lake, None)
    _arrive(tiny_generated.lake, lake, 3000, 10**9)  # an ingest publishes more meanwhile
    stats = lake.partition_stats("metadata_log", "cluster_id", "offset", version=version)
    assert stats is not None and stats[cid][0] == log.count() < lake.read("metadata_log").count()
    scanned = bronze_counts(log, control, snapshots)
    assert bronze_counts(log, control, snapshots, log_stats=stats) == scanned
    assert scanned[cid].max_offset == stats[cid][1]
