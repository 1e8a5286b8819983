"""Hand-built bronze logs, one cluster each, for the Spark replay's rule and differential tests: each
scenario states one rule of kafka-kraft-facts §3-§6 / the silver contract (docs/design.md). All of
them are replayed together (one Spark run, one cluster per scenario) and compared with the
sequential replay (kraft_replay.replay.sequential) table by table."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))

from bronze_builder import BronzeLog, broker, change, config, feature, mv, partition, rec, topic  # noqa: E402

from kraft_replay.codec.files import classify  # noqa: E402
from kraft_replay.ingest.bronze import decode_to_arrow  # noqa: E402
from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA  # noqa: E402
from kraft_replay.replay.engine import cut, replay_tables  # noqa: E402
from kraft_replay.replay.schemas import SILVER_TABLES  # noqa: E402
from kraft_replay.spark import sized_run  # noqa: E402

T1, T2, T3 = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw"
ZERO = "AAAAAAAAAAAAAAAAAAAAAA"
D1, D2 = "AAAAAAAAAAAAAAAAAAAAAw", "AAAAAAAAAAAAAAAAAAAABA"
BRC = "BROKER_REGISTRATION_CHANGE_RECORD"

SCENARIOS: dict[str, Callable[[], BronzeLog]] = {}


def scenario(fn: Callable[[BronzeLog], None]) -> Callable[[BronzeLog], None]:
    name = fn.__name__

    def build() -> BronzeLog:
        b = BronzeLog(name)
        fn(b)
        return b
    SCENARIOS[name] = build
    return fn


def base_cluster(b: BronzeLog) -> None:
    """MV 3.5-IV2, brokers 1-3 registered and unfenced, topic T1 ("orders") with partitions 0 and 1."""
    b.batch(mv(11))
    for bid in (1, 2, 3):
        b.batch(broker(bid, b.offset, fenced=True))
    for bid in (1, 2, 3):
        epoch = next(r["register_broker"]["broker_epoch"] for r in b.log
                     if r.get("register_broker") and r["register_broker"]["broker_id"] == bid)
        b.batch(rec(BRC, broker_id=bid, broker_epoch=epoch, fenced=-1))
    b.batch(topic("orders", T1), partition(T1, 0, [1, 2, 3]), partition(T1, 1, [2, 3, 1]))


@scenario
def tiles(b: BronzeLog) -> None:
    base_cluster(b)
    b.batch(change(T1, 0, isr=[1, 2]))
    b.batch(change(T1, 0, leader=2, isr=[2]))


@scenario
def txn_commit(b: BronzeLog) -> None:
    b.batch(mv(14))
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name="create topic"), topic("t", T1))
    b.batch(partition(T1, 0, [1]), change(T1, 0, isr=[]))   # superseded inside the transaction
    b.noop()
    b.batch(rec("END_TRANSACTION_RECORD"))


@scenario
def txn_abort(b: BronzeLog) -> None:
    b.batch(mv(14))
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), topic("t", T1), partition(T1, 0, [1]))
    b.batch(rec("ABORT_TRANSACTION_RECORD", reason="test"))
    b.batch(topic("u", T2))


@scenario
def txn_failover(b: BronzeLog) -> None:
    b.batch(mv(14))
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name="big"), topic("t", T1))
    b.batch(partition(T1, 0, [1]))
    b.leader_change()
    b.batch(rec("ABORT_TRANSACTION_RECORD", reason="Controller failover"))
    b.batch(topic("u", T2))


@scenario
def txn_open(b: BronzeLog) -> None:
    b.batch(mv(14))
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), topic("t", T1))


@scenario
def txn_errors(b: BronzeLog) -> None:
    b.batch(mv(14))
    b.batch(rec("END_TRANSACTION_RECORD"))
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), rec("BEGIN_TRANSACTION_RECORD", name=None), topic("t", T1))
    b.batch(rec("END_TRANSACTION_RECORD"))
    b.batch(rec("ABORT_TRANSACTION_RECORD", reason=None))


@scenario
def sentinels(b: BronzeLog) -> None:
    base_cluster(b)
    b.batch(change(T1, 0, isr=[1, 2]))                                   # leader -2: epoch unchanged
    b.batch(change(T1, 0, leader=1))                                      # same leader: epoch + 1
    b.batch(change(T1, 0, leader=-1, isr=[]))                             # no leader: epoch + 1
    b.batch(change(T1, 0, leader_recovery_state=1))                       # only LRS
    b.batch(change(T1, 0, leader=2, isr=[2], leader_recovery_state=0, eligible_leader_replicas=[], last_known_elr=[3]))
    b.batch(change(T1, 0, replicas=[2, 3], removing_replicas=[], adding_replicas=[]))
    b.batch(rec("PARTITION_CHANGE_RECORD", topic_id=T1, partition_id=0, leader=None, leader_recovery_state=None))


@scenario
def unknown_partitions(b: BronzeLog) -> None:
    base_cluster(b)
    b.batch(partition(T2, 0, [1]))
    b.batch(change(T2, 0, isr=[1]))
    b.batch(change(T1, 7, isr=[1]))
    b.batch(change(T1, 0, leader_recovery_state=5))
    b.batch(partition(T1, 2, [1, 2], directories=[D1]))
    b.batch(partition(T1, 3, [1], leader_recovery_state=4))
    b.batch(change(T1, 1, isr=[2]))


@scenario
def directories(b: BronzeLog) -> None:
    base_cluster(b)
    b.batch(partition(T1, 5, [1, 2], directories=[D1, D2]))
    b.batch(change(T1, 5, replicas=[1, 2, 3]))                   # real dirs, none given: cannot apply
    b.batch(change(T1, 5, replicas=[1, 3], directories=[D1, D1]))
    b.batch(change(T1, 0, replicas=[1, 2], directories=[ZERO, ZERO]))
    # a chain: the first change fails, so the second (which only fits the old replica count) applies
    b.batch(partition(T1, 6, [1, 2], directories=[D1, D2]))
    b.batch(change(T1, 6, replicas=[1, 2, 3], leader=2))          # fails: neither epoch moves
    b.batch(change(T1, 6, directories=[D2, D1]))
    b.batch(change(T1, 6, replicas=[3], directories=[]))          # empty directories: MIGRATING again
    b.batch(change(T1, 6, replicas=[3, 1]))
    # fixpoint: the second change only fails because the first one did (replicas stay at 2)
    b.batch(partition(T1, 7, [1, 2], directories=[D1, D2]))
    b.batch(change(T1, 7, replicas=[1, 2, 3], leader=2))
    b.batch(change(T1, 7, directories=[D1, D2, D1], leader=1))   # fails in the second pass: no epoch moves
    b.batch(change(T1, 7, isr=[1], leader=2))


@scenario
def remove_topic(b: BronzeLog) -> None:
    base_cluster(b)
    b.batch(config(2, "orders", "retention.ms", "1000"), config(2, "orders", "cleanup.policy", "compact"),
            config(2, "payments", "retention.ms", "5"), config(4, "", "min.insync.replicas", "2"))
    b.batch(topic("payments", T2))
    b.batch(config(2, "orders", "cleanup.policy", None))
    b.batch(rec("REMOVE_TOPIC_RECORD", topic_id=T1))
    b.batch(rec("REMOVE_TOPIC_RECORD", topic_id=T1))  # gone already
    b.batch(topic("orders", T3), partition(T3, 0, [2]), config(2, "orders", "retention.ms", "7"))
    b.batch(change(T1, 0, isr=[1]))                    # the removed topic


@scenario
def topic_replaced(b: BronzeLog) -> None:
    base_cluster(b)
    b.batch(rec("REMOVE_TOPIC_RECORD", topic_id=T2))
    b.batch(topic("orders", T1))
    b.batch(partition(T1, 0, [2]))


@scenario
def fence(b: BronzeLog) -> None:
    b.batch(mv(5))
    reg = b.batch(broker(1, 1, fenced=True))
    b.batch(rec("UNFENCE_BROKER_RECORD", id=1, epoch=reg + 7))
    b.batch(rec("UNFENCE_BROKER_RECORD", id=1, epoch=1))
    b.batch(rec("FENCE_BROKER_RECORD", id=9, epoch=1))
    b.batch(rec("FENCE_BROKER_RECORD", id=1, epoch=1))


@scenario
def registration_changes(b: BronzeLog) -> None:
    b.batch(mv(17))
    b.batch(broker(1, 1))
    b.batch(rec(BRC, broker_id=1, broker_epoch=1, fenced=-1))
    b.batch(rec(BRC, broker_id=1, broker_epoch=1, fenced=0, in_controlled_shutdown=1))
    b.batch(rec(BRC, broker_id=1, broker_epoch=1, fenced=2))
    b.batch(rec(BRC, broker_id=1, broker_epoch=1, in_controlled_shutdown=-1))
    b.batch(rec(BRC, broker_id=1, broker_epoch=1, fenced=1, log_dirs=[D2]))
    b.batch(rec(BRC, broker_id=1, broker_epoch=1, log_dirs=[]))
    b.batch(rec(BRC, broker_id=1, broker_epoch=2, fenced=-1))
    b.batch(broker(1, 9, fenced=True))
    b.batch(rec("UNREGISTER_BROKER_RECORD", broker_id=1, broker_epoch=123))
    b.batch(rec("UNREGISTER_BROKER_RECORD", broker_id=1, broker_epoch=9))
    b.batch(rec(BRC, broker_id=1, broker_epoch=9, fenced=-1))


@scenario
def controllers(b: BronzeLog) -> None:
    b.batch(mv(15))
    eps = [{"name": "Z", "host": "h", "port": 2, "security_protocol": 0}, {"name": "A", "host": "h", "port": 1, "security_protocol": 1}]
    feats = [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 15},
             {"name": "kraft.version", "min_supported_version": 0, "max_supported_version": 1}]
    b.batch(rec("REGISTER_CONTROLLER_RECORD", controller_id=3000, incarnation_id="i", zk_migration_ready=False,
                end_points=eps, features=feats))
    b.batch(rec("REGISTER_CONTROLLER_RECORD", controller_id=3000, incarnation_id="i", zk_migration_ready=False,
                end_points=eps, features=feats))


@scenario
def features(b: BronzeLog) -> None:
    b.noop()
    b.batch(mv(21), feature("group.version", 1), feature("kraft.version", 0))
    b.batch(feature("group.version", 0))
    b.batch(mv(0))
    b.batch(mv(99))
    b.batch(mv(27))


@scenario
def others(b: BronzeLog) -> None:
    b.batch(mv(15))
    acl = dict(resource_type=2, resource_name="t", pattern_type=3, principal="User:a", host="*", operation=3, permission_type=3)
    b.batch(rec("ACCESS_CONTROL_ENTRY_RECORD", id="acl1", **acl))
    b.batch(rec("REMOVE_ACCESS_CONTROL_ENTRY_RECORD", id="nope"))
    b.batch(rec("USER_SCRAM_CREDENTIAL_RECORD", name="alice", mechanism=1, salt=b"s", stored_key=b"k", server_key=b"v", iterations=4096))
    b.batch(rec("USER_SCRAM_CREDENTIAL_RECORD", name="bob", mechanism=2, salt=b"s", stored_key=b"k", server_key=b"v", iterations=8192))
    b.batch(rec("REMOVE_USER_SCRAM_CREDENTIAL_RECORD", name="bob", mechanism=2))
    b.batch(rec("REMOVE_USER_SCRAM_CREDENTIAL_RECORD", name="bob", mechanism=2))
    b.batch(rec("DELEGATION_TOKEN_RECORD", owner="User:a", requester="User:a", renewers=["User:b"], issue_timestamp=1,
                max_timestamp=3, expiration_timestamp=2, token_id="tok"))
    b.batch(rec("REMOVE_DELEGATION_TOKEN_RECORD", token_id="other"))
    b.batch(rec("CLIENT_QUOTA_RECORD", entity=[{"entity_type": "user", "entity_name": "a"},
                                               {"entity_type": "client-id", "entity_name": None}],
                key="producer_byte_rate", value=1024.0, remove=False))
    b.batch(rec("CLIENT_QUOTA_RECORD", entity=[{"entity_type": "user", "entity_name": "a"}], key="k", value=1.0, remove=False))
    b.batch(rec("CLIENT_QUOTA_RECORD", entity=[{"entity_type": "user", "entity_name": "a"}], key="k", value=0.0, remove=True))
    b.batch(rec("CLIENT_QUOTA_RECORD", entity=[{"entity_type": "user", "entity_name": None}], key="k", value=0.0, remove=True))
    b.batch(rec("PRODUCER_IDS_RECORD", broker_id=1, broker_epoch=5, next_producer_id=2000))
    b.batch(rec("PRODUCER_IDS_RECORD", broker_id=2, broker_epoch=6, next_producer_id=3000))
    b.batch(rec("ZK_MIGRATION_STATE_RECORD", zk_migration_state=3))
    b.batch(config(4, "1", "log.retention.ms", "1"), config(4, "1", "log.retention.ms", None), config(4, "1", "x", None))
    b.batch(rec("ACCESS_CONTROL_ENTRY_RECORD", id="acl1", **{**acl, "host": "10.0.0.1"}))
    b.batch(rec("REMOVE_ACCESS_CONTROL_ENTRY_RECORD", id="acl1"))


@scenario
def gap(b: BronzeLog) -> None:
    base_cluster(b)
    b.skip(3)
    b.batch(change(T1, 0, isr=[1, 2]))


@scenario
def control_offsets(b: BronzeLog) -> None:
    b.batch(mv(11))
    b.leader_change()
    b.noop()
    b.leader_change()
    b.batch(topic("t", T1))


def _snapshot_of_cut(full: BronzeLog, end: int, recs: list) -> None:
    full.snapshot(end, 1, recs)


@scenario
def mid_stream(b: BronzeLog) -> None:
    full = BronzeLog(b.cluster_id)
    base_cluster(full)
    cut = full.offset
    full.batch(change(T1, 0, isr=[1, 2]))
    reg = full.offset
    full.batch(broker(4, reg))
    full.batch(rec(BRC, broker_id=2, broker_epoch=2, fenced=1))
    full.batch(topic("new", T2), partition(T2, 0, [4]))
    full.batch(rec("REMOVE_TOPIC_RECORD", topic_id=T1))
    b.log = [r for r in full.log if r["offset"] >= cut]


def _snap_records_of_base(offset_t1_leader: int = 2) -> list:
    return [mv(11), broker(1, 1, fenced=False), broker(2, 2, fenced=False), broker(3, 3, fenced=False),
            topic("orders", T1), partition(T1, 0, [1, 2, 3], isr=[1, 2], leader=offset_t1_leader, leader_epoch=1,
                                           partition_epoch=2),
            partition(T1, 1, [2, 3, 1]), config(2, "orders", "retention.ms", "1")]


def _start_from_snapshot(b: BronzeLog, first_delta: int) -> None:
    full = BronzeLog(b.cluster_id)
    full.batch(mv(11))
    for bid in (1, 2, 3):
        full.batch(broker(bid, bid, fenced=True))
    for bid in (1, 2, 3):
        full.batch(rec(BRC, broker_id=bid, broker_epoch=bid, fenced=-1))
    full.batch(topic("orders", T1), partition(T1, 0, [1, 2, 3]), partition(T1, 1, [2, 3, 1]))
    full.batch(config(2, "orders", "retention.ms", "1"))
    full.batch(change(T1, 0, isr=[1, 2], leader=2))
    end = full.offset
    full.batch(change(T1, 0, isr=[2]))
    full.batch(change(T1, 1, isr=[2, 3]))
    full.snapshot(end, 1, _snap_records_of_base())
    first = end + first_delta
    b.log = [r for r in full.log if r["offset"] >= first]
    b.snapshots, b.control = full.snapshots, full.control


@scenario
def snap_start_exact(b: BronzeLog) -> None:
    _start_from_snapshot(b, 0)


@scenario
def snap_start_overlap(b: BronzeLog) -> None:
    _start_from_snapshot(b, -3)


@scenario
def snap_start_before(b: BronzeLog) -> None:
    _start_from_snapshot(b, 1)


@scenario
def snap_at_gap(b: BronzeLog) -> None:
    base_cluster(b)
    b.batch(config(2, "orders", "retention.ms", "1"), feature("group.version", 1))
    b.batch(rec("PRODUCER_IDS_RECORD", broker_id=1, broker_epoch=1, next_producer_id=1000))
    b.batch(rec("ZK_MIGRATION_STATE_RECORD", zk_migration_state=0))
    b.batch(rec("REGISTER_CONTROLLER_RECORD", controller_id=3000, incarnation_id="i", zk_migration_ready=False,
                end_points=[], features=[]))
    gap_at = b.offset
    b.skip(5)
    end = gap_at + 4
    # the snapshot: topic T1 is gone, T2 exists, broker 3 unregistered, no config, no group.version
    b.snapshot(end, 1, [mv(11), broker(1, 4, fenced=False), broker(2, 5, fenced=False), topic("pay", T2),
                        partition(T2, 0, [1, 2], leader_epoch=4, partition_epoch=9),
                        rec(BRC, broker_id=7, broker_epoch=1, fenced=1)])  # cannot apply: an anomaly of the snapshot
    b.batch(change(T2, 0, isr=[1]))
    b.batch(change(T1, 0, isr=[1]))


@scenario
def snap_incomplete(b: BronzeLog) -> None:
    base_cluster(b)
    b.snapshot(100, 1, [mv(11)], footer=False)


@scenario
def snap_alone(b: BronzeLog) -> None:
    b.snapshot(50, 3, [mv(20), topic("t", T1), partition(T1, 0, [1], leader_epoch=7)])
    b.snapshot(40, 2, [mv(19)])


@scenario
def divergent(b: BronzeLog) -> None:
    base_cluster(b)
    fork = b.offset
    b.batch(change(T1, 0, isr=[1, 2]), change(T1, 1, isr=[2]))            # epoch 1, later truncated
    b.offset = fork
    b.leader_change()
    b.batch(change(T1, 0, isr=[1, 3]))
    b.batch(change(T1, 0, isr=[1]), at=b.offset - 1, epoch=2)             # an identical copy: one record
    b.log.pop()
    b.log.append(dict(b.log[-1], source_file="node2.log"))


@scenario
def conflicting(b: BronzeLog) -> None:
    base_cluster(b)
    b.batch(change(T1, 0, isr=[1, 2]))
    b.log.append(dict(b.log[-1], partition_change={**b.log[-1]["partition_change"], "isr": [1]}, source_file="zz.log"))


@scenario
def commit_by_epoch(b: BronzeLog) -> None:
    base_cluster(b)
    b.noop(2)
    b.leader_change()
    b.noop(3)


@scenario
def commit_by_snapshot(b: BronzeLog) -> None:
    base_cluster(b)
    b.noop(2)
    lc = b.leader_change()
    b.noop(3)
    b.snapshot(lc + 2, 2, [mv(11)])


def bronze(names: list[str] | None = None) -> tuple[pa.Table, pa.Table, pa.Table]:
    """The bronze tables of the scenarios (every one by default), one cluster per scenario."""
    logs, ctls, snaps = [], [], []
    for name in names or list(SCENARIOS):
        log, ctl, snap = SCENARIOS[name]().tables()
        logs.append(log)
        ctls.append(ctl)
        snaps.append(snap)
    return (pa.concat_tables(logs).cast(LOG_SCHEMA), pa.concat_tables(ctls).cast(CONTROL_SCHEMA),
            pa.concat_tables(snaps).cast(SNAPSHOT_SCHEMA))


def arrow_df(spark, table: pa.Table, schema: pa.Schema | None = None):
    """A Spark DataFrame of an Arrow table, computed once (a local checkpoint) so that it reads like the
    lake's files do: a plan over an in-memory relation has the optimizer evaluate its projections on
    every row each time the plan runs (``ConvertToLocalRelation``: 80 of the 188 s of a replay of
    71k rows). The chunks are combined first: PySpark 4.2's ``createDataFrame(pyarrow.Table)``
    silently drops the rows after an empty chunk (as ``concat_tables`` of empty and non-empty tables
    makes)."""
    if schema is not None:
        table = table.cast(schema) if table.num_rows else schema.empty_table()
    return spark.createDataFrame(table.combine_chunks()).localCheckpoint()


def _df(spark, table: pa.Table, schema: pa.Schema):
    return arrow_df(spark, table, schema)


def spark_replay(spark, log: pa.Table, control: pa.Table, snaps: pa.Table):
    """The Spark replay of bronze Arrow tables: ``(ReplayTables, {table: pyarrow.Table})``, on the
    settings ``run_replay`` picks for that many rows (:func:`kraft_replay.spark.sized_run`)."""
    with sized_run(spark, log.num_rows + snaps.num_rows):
        res = replay_tables(_df(spark, log, LOG_SCHEMA), _df(spark, control, CONTROL_SCHEMA),
                            _df(spark, snaps, SNAPSHOT_SCHEMA), checkpoint=cut)
        got = {t: res[t].toArrow().cast(SILVER_TABLES[t].schema) for t in SILVER_TABLES}
    return res, got


REAL = ["codecrafters", "dkoh12", "ftmhxp", "greenlemonT", "hiage", "rjmfernandes"]
PAIRS = [("dkoh12", 7209), ("ftmhxp", 7268), ("greenlemonT", 28869), ("rjmfernandes", 7752), ("rjmfernandes", 14926)]


@cache
def _decode(directory: str, prefix: str) -> tuple[pa.Table, pa.Table, pa.Table]:
    logs, ctls, snaps = [], [], []
    for p in sorted(Path(directory).iterdir()):
        if not p.is_file() or not p.name.startswith(prefix):
            continue
        info = classify(p.name)
        if info.kind.value not in ("segment", "snapshot", "bootstrap"):
            continue
        chunk = decode_to_arrow(p.read_bytes(), cluster_id=prefix, source_file=p.name, file_kind=info.kind.value,
                                snapshot_end_offset=info.end_offset, snapshot_epoch=info.epoch)
        assert chunk.quarantine.num_rows == 0, p.name
        logs.append(chunk.log)
        ctls.append(chunk.control)
        snaps.append(chunk.snapshot)
    assert logs, f"no files named {prefix}* in {directory}"
    return pa.Table.from_batches(logs), pa.Table.from_batches(ctls), pa.Table.from_batches(snaps)


def _relabel(t: pa.Table, cluster: str) -> pa.Table:
    return t.set_column(t.schema.get_field_index("cluster_id"), "cluster_id", pa.array([cluster] * t.num_rows, pa.string()))


def _snapshot_only(control: pa.Table, snaps: pa.Table, end: int, cluster: str) -> tuple[pa.Table, pa.Table]:
    ctl = control.filter(pc.equal(pc.fill_null(control.column("snapshot_end_offset"), -1), end))
    sn = snaps.filter(pc.equal(snaps.column("snapshot_end_offset"), end))
    return _relabel(ctl, cluster), _relabel(sn, cluster)


def real_bronze(real_kraft_dir: Path) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Every real file's cluster (its log with the log's control rows and every snapshot), plus one
    cluster ``<prefix>@<END>`` per log/snapshot pair holding only that snapshot."""
    logs, ctls, snaps = [], [], []
    for prefix in REAL:
        log, control, sn = _decode(str(real_kraft_dir), prefix)
        logs.append(log)
        ctls.append(control)
        snaps.append(sn)
    for prefix, end in PAIRS:
        _, control, sn = _decode(str(real_kraft_dir), prefix)
        c, s = _snapshot_only(control, sn, end, f"{prefix}@{end}")
        ctls.append(c)
        snaps.append(s)
    return (pa.concat_tables([t.cast(LOG_SCHEMA) for t in logs]), pa.concat_tables([t.cast(CONTROL_SCHEMA) for t in ctls]),
            pa.concat_tables([t.cast(SNAPSHOT_SCHEMA) for t in snaps]))
