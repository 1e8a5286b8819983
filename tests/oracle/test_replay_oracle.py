"""The replay oracle on hand-built bronze rows: each test states a rule of kafka-kraft-facts §3-§6 (or of
the silver contract in docs/design.md) and checks the versioned tables and images it implies."""

from __future__ import annotations

import pyarrow as pa
import pytest
from bronze_builder import BronzeLog, broker, change, config, feature, mv, partition, rec, topic  # tests/oracle on sys.path
from replay_oracle import MV_NAMES, ZERO_UUID, first_difference, replay

from kraft_replay.replay.schemas import REASON_CODES, SILVER_TABLES, silver_schema

T1, T2 = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"


def _run(b: BronzeLog):
    return replay(*b.tables())


def _versions(res, table: str, **key) -> list[dict]:
    rows = res[table].to_pylist()
    return [r for r in rows if all(r[k] == v for k, v in key.items())]


def _part(img: dict, tid: str, pid: int) -> dict | None:
    return next((p for p in img["partitions"] if p["topic_id"] == tid and p["partition_id"] == pid), None)


def _codes(res) -> list[str]:
    codes = [a["reason_code"] for a in res.anomalies()]
    assert set(codes) <= set(REASON_CODES), set(codes) - set(REASON_CODES)  # the contract's list
    return codes


def _cluster(b: BronzeLog) -> None:
    """MV 3.5-IV2, brokers 1-3 registered and unfenced, topic T1 with partitions 0 and 1."""
    b.batch(mv(11))
    for bid in (1, 2, 3):
        b.batch(broker(bid, b.offset, fenced=True))
    for bid in (1, 2, 3):
        epoch = next(r["register_broker"]["broker_epoch"] for r in b.log
                     if r.get("register_broker") and r["register_broker"]["broker_id"] == bid)
        b.batch(rec("BROKER_REGISTRATION_CHANGE_RECORD", broker_id=bid, broker_epoch=epoch, fenced=-1))
    b.batch(topic("orders", T1), partition(T1, 0, [1, 2, 3]), partition(T1, 1, [2, 3, 1]))


# --- contract --------------------------------------------------------------------------------------


def test_every_table_has_its_contract_schema_and_stable_sort_key() -> None:
    b = BronzeLog()
    _cluster(b)
    res = _run(b)
    assert set(res.tables) == set(SILVER_TABLES)
    for name, t in res.tables.items():
        assert t.schema == silver_schema(name), name
        key = SILVER_TABLES[name].sort_key
        rows = t.select(list(key)).to_pylist()
        tuples = [tuple((v is not None, v) for v in r.values()) for r in rows]
        assert tuples == sorted(tuples), f"{name} not in sort-key order"
        assert len(set(tuples)) == len(tuples), f"{name}: sort key {key} is not unique"


def test_silver_fields_have_the_bronze_payload_types_where_names_coincide() -> None:
    from kraft_replay.codec.arrow_payload import PAYLOAD_STRUCT_TYPES

    sources = {"topics": "topic", "partitions": "partition", "brokers": "register_broker",
               "controllers": "register_controller", "features": "feature_level", "configs": "config",
               "acls": "access_control_entry", "scram_credentials": "user_scram_credential",
               "delegation_tokens": "delegation_token", "producer_ids": "producer_ids",
               "zk_migration_state": "zk_migration_state", "client_quotas": "client_quota"}
    checked = 0
    for table, column in sources.items():
        st = PAYLOAD_STRUCT_TYPES[column]
        bronze = {st.field(i).name: st.field(i).type for i in range(st.num_fields)}
        for f in silver_schema(table):
            if f.name in bronze:
                assert f.type == bronze[f.name], f"{table}.{f.name}: {f.type} vs bronze {column}.{f.name} {bronze[f.name]}"
                checked += 1
    assert checked > 40
    for table in ("scram_credentials", "delegation_tokens"):  # secrets never leave bronze
        assert not {"salt", "stored_key", "server_key", "hmac"} & set(silver_schema(table).names)


def test_metadata_version_names_match_the_generators_table() -> None:
    from kraft_replay.generate.mv import MV_LEVELS

    assert MV_NAMES == {level: name for level, (name, _) in MV_LEVELS.items()}
    assert MV_NAMES[21] == "3.9-IV0" and MV_NAMES[27] == "4.1-IV1"


def test_versions_tile_offsets_and_image_follows_them() -> None:
    b = BronzeLog()
    _cluster(b)
    b.batch(change(T1, 0, isr=[1, 2]))
    b.batch(change(T1, 0, leader=2, isr=[2]))
    res = _run(b)
    vs = _versions(res, "partitions", topic_id=T1, partition_id=0)
    assert [v["record_type"] for v in vs] == ["PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "PARTITION_CHANGE_RECORD"]
    for a, nxt in zip(vs, vs[1:]):
        assert a["valid_to_offset"] == nxt["valid_from_offset"] and a["valid_to_time"] == nxt["valid_from_time"]
    assert vs[-1]["valid_to_offset"] is None and vs[-1]["valid_to_time"] is None
    assert vs[1]["valid_from_offset"] == vs[1]["record_offset"]
    # image as of each offset: the version whose range holds it
    assert _part(res.image_at(vs[1]["valid_from_offset"] - 1), T1, 0)["isr"] == [1, 2, 3]
    assert _part(res.image_at(vs[1]["valid_from_offset"]), T1, 0)["isr"] == [1, 2]
    assert _part(res.image_at(vs[2]["valid_from_offset"]), T1, 0)["leader"] == 2
    assert res.image_at(10**9) == {**res.final_image(), "offset": 10**9}


# --- transactions (§5.1) ---------------------------------------------------------------------------


def test_committed_transaction_becomes_visible_at_end_transaction() -> None:
    b = BronzeLog()
    b.batch(mv(14))
    begin = b.batch(rec("BEGIN_TRANSACTION_RECORD", name="create topic"), topic("t", T1))
    b.batch(partition(T1, 0, [1]), change(T1, 0, isr=[]))   # superseded inside the transaction
    b.noop()
    end = b.batch(rec("END_TRANSACTION_RECORD"))
    res = _run(b)
    for off in range(begin, end):
        assert res.image_at(off)["topics"] == [], off
    img = res.image_at(end)
    assert img["topics"] == [{"topic_id": T1, "name": "t"}]
    assert _part(img, T1, 0)["isr"] == [] and _part(img, T1, 0)["partition_epoch"] == 1
    topic_v = _versions(res, "topics", topic_id=T1)[0]
    assert (topic_v["valid_from_offset"], topic_v["record_offset"]) == (end, begin + 1)
    assert topic_v["valid_from_time"] == b.log[-1]["append_time"]
    p = _versions(res, "partitions", topic_id=T1)
    assert [(v["valid_from_offset"], v["valid_to_offset"]) for v in p] == [(end, end), (end, None)]  # never visible
    assert [v["record_offset"] for v in p] == [begin + 2, begin + 3]
    assert res["log_commit"].to_pylist()[0]["open_transaction_offset"] is None
    assert res.anomalies() == []


def test_aborted_transaction_applies_nothing() -> None:
    b = BronzeLog()
    b.batch(mv(14))
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), topic("t", T1), partition(T1, 0, [1]))
    b.batch(rec("ABORT_TRANSACTION_RECORD", reason="test"))
    b.batch(topic("u", T2))
    res = _run(b)
    assert [t["name"] for t in res.final_image()["topics"]] == ["u"]
    assert res["partitions"].num_rows == 0 and _versions(res, "topics", topic_id=T1) == []
    assert res.anomalies() == []


def test_dangling_transaction_closed_by_failover_abort_applies_nothing() -> None:
    b = BronzeLog()
    b.batch(mv(14))
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name="big"), topic("t", T1))
    b.batch(partition(T1, 0, [1]))
    b.leader_change()  # the controller fails over mid-transaction
    b.batch(rec("ABORT_TRANSACTION_RECORD", reason="Controller failover"))
    b.batch(topic("u", T2))
    res = _run(b)
    assert [t["name"] for t in res.final_image()["topics"]] == ["u"]
    assert res["partitions"].num_rows == 0
    batches = res["log_batches"].to_pylist()
    assert [x["transaction_open"] for x in batches] == [False, True, True, True, False, False]
    assert [x["is_control"] for x in batches] == [False, False, False, True, False, False]
    assert res.anomalies() == []


def test_log_ending_inside_a_transaction_shows_none_of_it() -> None:
    b = BronzeLog()
    b.batch(mv(14))
    begin = b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), topic("t", T1))
    res = _run(b)
    assert res.final_image()["topics"] == [] and res["topics"].num_rows == 0
    assert res["log_commit"].to_pylist()[0]["open_transaction_offset"] == begin


def test_transaction_errors_are_anomalies() -> None:
    b = BronzeLog()
    b.batch(mv(14))
    b.batch(rec("END_TRANSACTION_RECORD"))
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name=None), rec("BEGIN_TRANSACTION_RECORD", name=None), topic("t", T1))
    end = b.batch(rec("END_TRANSACTION_RECORD"))
    b.batch(rec("ABORT_TRANSACTION_RECORD", reason=None))
    res = _run(b)
    assert [(a["offset"], a["reason_code"]) for a in res.anomalies()] == [
        (1, "TRANSACTION_ERROR"), (3, "TRANSACTION_ERROR"), (end + 1, "TRANSACTION_ERROR")]
    assert _versions(res, "topics", topic_id=T1)[0]["valid_from_offset"] == end  # the outer transaction still commits


# --- partitions (§5.2) -----------------------------------------------------------------------------


def test_partition_change_sentinels_and_epochs() -> None:
    b = BronzeLog()
    _cluster(b)
    b.batch(change(T1, 0, isr=[1, 2]))                                   # leader -2: epoch unchanged
    b.batch(change(T1, 0, leader=1))                                      # same leader: epoch + 1
    b.batch(change(T1, 0, leader=-1, isr=[]))                             # no leader: epoch + 1
    b.batch(change(T1, 0, leader_recovery_state=1))                       # only LRS
    b.batch(change(T1, 0, leader=2, isr=[2], leader_recovery_state=0,
                   eligible_leader_replicas=[], last_known_elr=[3]))
    b.batch(change(T1, 0, replicas=[2, 3], removing_replicas=[], adding_replicas=[]))
    b.batch(rec("PARTITION_CHANGE_RECORD", topic_id=T1, partition_id=0, leader=None, leader_recovery_state=None))  # nulls = unchanged
    res = _run(b)
    vs = _versions(res, "partitions", topic_id=T1, partition_id=0)
    got = [(v["leader"], v["leader_epoch"], v["partition_epoch"], v["isr"], v["leader_recovery_state"]) for v in vs]
    assert got == [
        (1, 0, 0, [1, 2, 3], 0),
        (1, 0, 1, [1, 2], 0),
        (1, 1, 2, [1, 2], 0),
        (-1, 2, 3, [], 0),
        (-1, 2, 4, [], 1),
        (2, 3, 5, [2], 0),
        (2, 3, 6, [2], 0),
        (2, 3, 7, [2], 0),
    ]
    assert vs[5]["last_known_elr"] == [3] and vs[5]["eligible_leader_replicas"] == []
    assert vs[6]["replicas"] == [2, 3] and vs[6]["directories"] == [ZERO_UUID] * 2  # MIGRATING per replica
    assert [v["changed_fields"] for v in vs[1:]] == [
        ["isr", "partition_epoch"],
        ["leader_epoch", "partition_epoch"],
        ["isr", "leader", "leader_epoch", "partition_epoch"],
        ["leader_recovery_state", "partition_epoch"],
        ["isr", "leader", "leader_recovery_state", "leader_epoch", "partition_epoch", "last_known_elr"],
        ["replicas", "partition_epoch", "directories"],
        ["partition_epoch"],
    ]
    assert vs[0]["changed_fields"] == [f for f in SILVER_TABLES["partitions"].field_names if f != "changed_fields"]
    other = _versions(res, "partitions", topic_id=T1, partition_id=1)
    assert len(other) == 1 and other[0]["topic_name"] == "orders"
    assert res.anomalies() == []


def test_partition_records_for_unknown_topics_and_partitions_are_anomalies() -> None:
    b = BronzeLog()
    _cluster(b)
    b.batch(partition(T2, 0, [1]))
    b.batch(change(T2, 0, isr=[1]))
    b.batch(change(T1, 7, isr=[1]))
    b.batch(change(T1, 0, leader_recovery_state=5))
    b.batch(partition(T1, 2, [1, 2], directories=["AAAAAAAAAAAAAAAAAAAAAw"]))
    b.batch(change(T1, 1, isr=[2]))  # still applies
    res = _run(b)
    assert _codes(res) == ["UNKNOWN_TOPIC", "UNKNOWN_TOPIC", "UNKNOWN_PARTITION", "INVALID_FIELD_VALUE", "DIRECTORIES_MISMATCH"]
    assert {a["entity"] for a in res.anomalies()[:2]} == {f"partition {T2}-0"}
    assert all(a["record_type"].startswith("PARTITION") for a in res.anomalies())
    img = res.final_image()
    assert _part(img, T1, 0)["partition_epoch"] == 0 and _part(img, T1, 2) is None
    assert _part(img, T1, 1)["isr"] == [2]


def test_directories_defaults_and_mismatch() -> None:
    d1, d2 = "AAAAAAAAAAAAAAAAAAAAAw", "AAAAAAAAAAAAAAAAAAAABA"
    b = BronzeLog()
    _cluster(b)
    b.batch(partition(T1, 5, [1, 2], directories=[d1, d2]))
    b.batch(change(T1, 5, replicas=[1, 2, 3]))                   # real dirs, no new ones: cannot apply
    b.batch(change(T1, 5, replicas=[1, 3], directories=[d1, d1]))
    b.batch(change(T1, 0, replicas=[1, 2], directories=[ZERO_UUID, ZERO_UUID]))
    res = _run(b)
    assert _codes(res) == ["DIRECTORIES_MISMATCH"]
    img = res.final_image()
    assert _part(img, T1, 5)["directories"] == [d1, d1] and _part(img, T1, 5)["partition_epoch"] == 1
    assert _part(img, T1, 0)["directories"] == [ZERO_UUID, ZERO_UUID]


def test_remove_topic_closes_partitions_and_topic_configs() -> None:
    b = BronzeLog()
    _cluster(b)
    b.batch(config(2, "orders", "retention.ms", "1000"), config(2, "orders", "cleanup.policy", "compact"),
            config(2, "payments", "retention.ms", "5"), config(4, "", "min.insync.replicas", "2"))
    b.batch(topic("payments", T2))
    rm = b.batch(rec("REMOVE_TOPIC_RECORD", topic_id=T1))
    b.batch(rec("REMOVE_TOPIC_RECORD", topic_id=T1))  # gone already
    T3 = "AAAAAAAAAAAAAAAAAAAAAw"
    again = b.batch(topic("orders", T3), partition(T3, 0, [2]))
    res = _run(b)
    img = res.final_image()
    assert sorted(t["name"] for t in img["topics"]) == ["orders", "payments"]
    assert {t["topic_id"] for t in img["topics"]} == {T2, T3}
    assert [(p["topic_id"], p["partition_id"]) for p in img["partitions"]] == [(T3, 0)]
    assert {(c["resource_type"], c["resource_name"], c["name"]) for c in img["configs"]} == {
        (2, "payments", "retention.ms"), (4, "", "min.insync.replicas")}
    for tbl, key in (("partitions", {"topic_id": T1, "partition_id": 0}), ("partitions", {"topic_id": T1, "partition_id": 1}),
                     ("topics", {"topic_id": T1}), ("configs", {"resource_name": "orders", "name": "retention.ms"})):
        vs = _versions(res, tbl, **key)
        tomb = vs[-1]
        assert tomb["deleted"] and tomb["valid_from_offset"] == rm and tomb["valid_to_offset"] is None, (tbl, key)
        assert tomb["record_type"] == "REMOVE_TOPIC_RECORD" and tomb["record_offset"] == rm
        assert vs[-2]["valid_to_offset"] == rm and not vs[-2]["deleted"]
    tomb = _versions(res, "topics", topic_id=T1)[-1]
    assert tomb["name"] is None  # a tombstone's fields are null
    assert [(a["offset"], a["reason_code"]) for a in res.anomalies()] == [(rm + 1, "UNKNOWN_ENTITY")]
    assert res.image_at(rm - 1)["configs"] != img["configs"] and again > rm


def test_topic_record_for_an_existing_id_drops_its_partitions() -> None:
    b = BronzeLog()
    _cluster(b)
    b.batch(topic("orders", T1))
    res = _run(b)
    assert _codes(res) == ["TOPIC_REPLACED"]
    assert res.final_image()["partitions"] == [] and len(res.final_image()["topics"]) == 1


# --- brokers, controllers (§5.3) -------------------------------------------------------------------


def test_fence_and_unfence_need_the_current_broker_epoch() -> None:
    b = BronzeLog()
    b.batch(mv(5))
    reg = b.batch(broker(1, 1, fenced=True))
    b.batch(rec("UNFENCE_BROKER_RECORD", id=1, epoch=reg + 7))      # wrong epoch
    b.batch(rec("UNFENCE_BROKER_RECORD", id=1, epoch=1))
    b.batch(rec("FENCE_BROKER_RECORD", id=9, epoch=1))              # unknown broker
    b.batch(rec("FENCE_BROKER_RECORD", id=1, epoch=1))
    res = _run(b)
    assert [(a["offset"], a["reason_code"], a["entity"]) for a in res.anomalies()] == [
        (2, "BROKER_EPOCH_MISMATCH", "broker 1"), (4, "UNKNOWN_BROKER", "broker 9")]
    vs = _versions(res, "brokers", broker_id=1)
    assert [(v["fenced"], v["record_type"]) for v in vs] == [
        (True, "REGISTER_BROKER_RECORD"), (False, "UNFENCE_BROKER_RECORD"), (True, "FENCE_BROKER_RECORD")]
    assert [v["changed_fields"] for v in vs[1:]] == [["fenced"], ["fenced"]]


def test_broker_registration_change_values() -> None:
    b = BronzeLog()
    b.batch(mv(17))
    b.batch(broker(1, 1))
    brc = "BROKER_REGISTRATION_CHANGE_RECORD"
    b.batch(rec(brc, broker_id=1, broker_epoch=1, fenced=-1))                                   # unfence
    b.batch(rec(brc, broker_id=1, broker_epoch=1, fenced=0, in_controlled_shutdown=1))          # controlled shutdown
    b.batch(rec(brc, broker_id=1, broker_epoch=1, fenced=2))                                    # invalid
    b.batch(rec(brc, broker_id=1, broker_epoch=1, in_controlled_shutdown=-1))                  # invalid
    b.batch(rec(brc, broker_id=1, broker_epoch=1, fenced=1, log_dirs=["AAAAAAAAAAAAAAAAAAAABA"]))
    b.batch(rec(brc, broker_id=1, broker_epoch=1, log_dirs=[]))                                 # no change
    b.batch(rec(brc, broker_id=1, broker_epoch=2, fenced=-1))                                   # stale epoch
    b.batch(broker(1, 9, fenced=True))                                                          # new incarnation
    b.batch(rec("UNREGISTER_BROKER_RECORD", broker_id=1, broker_epoch=123))                     # epoch not checked
    b.batch(rec("UNREGISTER_BROKER_RECORD", broker_id=1, broker_epoch=9))
    res = _run(b)
    assert _codes(res) == ["INVALID_FIELD_VALUE", "INVALID_FIELD_VALUE", "BROKER_EPOCH_MISMATCH", "UNKNOWN_ENTITY"]
    vs = _versions(res, "brokers", broker_id=1)
    got = [(v["fenced"], v["in_controlled_shutdown"], v["log_dirs"], v["broker_epoch"], v["deleted"]) for v in vs]
    assert got == [
        (True, False, [], 1, False), (False, False, [], 1, False), (False, True, [], 1, False),
        (True, True, ["AAAAAAAAAAAAAAAAAAAABA"], 1, False), (True, True, ["AAAAAAAAAAAAAAAAAAAABA"], 1, False),
        (True, False, [], 9, False), (None, None, None, None, True)]
    assert vs[-1]["changed_fields"] is None
    assert res.final_image()["brokers"] == []


def test_controllers_and_end_points_sorted_by_name() -> None:
    b = BronzeLog()
    b.batch(mv(15))
    eps = [{"name": "Z", "host": "h", "port": 2, "security_protocol": 0}, {"name": "A", "host": "h", "port": 1, "security_protocol": 1}]
    b.batch(rec("REGISTER_CONTROLLER_RECORD", controller_id=3000, incarnation_id="i", zk_migration_ready=False,
                end_points=eps, features=[{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 15}]))
    res = _run(b)
    (c,) = res.final_image()["controllers"]
    assert c["controller_id"] == 3000 and [e["name"] for e in c["end_points"]] == ["A", "Z"]


# --- features (§5.4, §6) ---------------------------------------------------------------------------


def test_features_levels_names_and_removal() -> None:
    b = BronzeLog()
    b.noop()
    b.batch(mv(21), feature("group.version", 1), feature("kraft.version", 0))
    b.batch(feature("group.version", 0))
    b.batch(mv(0))
    b.batch(mv(99))
    b.batch(mv(27))
    res = _run(b)
    assert res.image_at(0)["metadata_version"] == "3.0-IV1" and res.image_at(0)["metadata_version_level"] == 1
    assert res.image_at(1)["metadata_version"] == "3.9-IV0"
    assert res.image_at(3)["features"] == {"group.version": 1, "metadata.version": 21}
    assert res.image_at(4)["features"] == {"metadata.version": 21}
    assert res.final_image()["metadata_version"] == "4.1-IV1"
    assert _codes(res) == ["UNKNOWN_METADATA_VERSION", "UNKNOWN_METADATA_VERSION"]
    mvs = _versions(res, "features", name="metadata.version")
    assert [(v["feature_level"], v["metadata_version"]) for v in mvs] == [(21, "3.9-IV0"), (27, "4.1-IV1")]
    gv = _versions(res, "features", name="group.version")
    assert [(v["feature_level"], v["deleted"], v["metadata_version"]) for v in gv] == [(1, False, None), (None, True, None)]
    assert _versions(res, "features", name="kraft.version") == []  # level 0 of an absent feature: nothing


# --- the other record types (§5.5) -----------------------------------------------------------------


def test_other_record_types() -> None:
    b = BronzeLog()
    b.batch(mv(15))
    acl = dict(resource_type=2, resource_name="t", pattern_type=3, principal="User:a", host="*", operation=3, permission_type=3)
    b.batch(rec("ACCESS_CONTROL_ENTRY_RECORD", id="acl1", **acl))
    b.batch(rec("REMOVE_ACCESS_CONTROL_ENTRY_RECORD", id="nope"))
    b.batch(rec("USER_SCRAM_CREDENTIAL_RECORD", name="alice", mechanism=1, salt=b"s", stored_key=b"k", server_key=b"v", iterations=4096))
    b.batch(rec("USER_SCRAM_CREDENTIAL_RECORD", name="bob", mechanism=2, salt=b"s", stored_key=b"k", server_key=b"v", iterations=8192))
    b.batch(rec("REMOVE_USER_SCRAM_CREDENTIAL_RECORD", name="bob", mechanism=2))
    b.batch(rec("DELEGATION_TOKEN_RECORD", owner="User:a", requester="User:a", renewers=["User:b"], issue_timestamp=1,
                max_timestamp=3, expiration_timestamp=2, token_id="tok"))
    b.batch(rec("REMOVE_DELEGATION_TOKEN_RECORD", token_id="other"))
    b.batch(rec("CLIENT_QUOTA_RECORD", entity=[{"entity_type": "user", "entity_name": "a"},
                                               {"entity_type": "client-id", "entity_name": None}],
                key="producer_byte_rate", value=1024.0, remove=False))
    b.batch(rec("CLIENT_QUOTA_RECORD", entity=[{"entity_type": "user", "entity_name": "a"}], key="k", value=1.0, remove=False))
    b.batch(rec("CLIENT_QUOTA_RECORD", entity=[{"entity_type": "user", "entity_name": "a"}], key="k", value=0.0, remove=True))
    b.batch(rec("PRODUCER_IDS_RECORD", broker_id=1, broker_epoch=5, next_producer_id=2000))
    b.batch(rec("ZK_MIGRATION_STATE_RECORD", zk_migration_state=3))
    b.batch(config(4, "1", "log.retention.ms", "1"), config(4, "1", "log.retention.ms", None), config(4, "1", "x", None))
    res = _run(b)
    img = res.final_image()
    assert img["acls"] == [{"id": "acl1", **acl}]
    assert img["scram_credentials"] == [{"name": "alice", "mechanism": 1, "iterations": 4096, "credential_fingerprint": None}]
    assert img["delegation_tokens"] == [{"token_id": "tok", "owner": "User:a", "requester": "User:a", "renewers": ["User:b"],
                                         "issue_timestamp": 1, "max_timestamp": 3, "expiration_timestamp": 2}]
    assert img["client_quotas"] == [{"entity_key": '[["client-id",null],["user","a"]]', "key": "producer_byte_rate",
                                     "entity": [{"entity_type": "client-id", "entity_name": None},
                                                {"entity_type": "user", "entity_name": "a"}], "value": 1024.0}]
    assert img["producer_ids"] == {"next_producer_id": 2000}
    assert _versions(res, "producer_ids")[0]["broker_id"] == 1
    assert img["zk_migration_state"] == "POST_MIGRATION"
    assert img["configs"] == []
    assert [v["deleted"] for v in _versions(res, "configs", name="log.retention.ms")] == [False, True]
    assert _codes(res) == ["UNKNOWN_ENTITY", "UNKNOWN_ENTITY"]
    assert [a["entity"] for a in res.anomalies()] == ["ACL nope", "delegation token other"]
    assert set(REASON_CODES) >= set(_codes(res))


# --- the log: gaps, mid-stream starts, snapshots, divergence, commit certainty --------------------


def test_offset_gap_is_an_anomaly_and_replay_goes_on() -> None:
    b = BronzeLog()
    _cluster(b)
    gap_at = b.offset
    b.skip(3)
    b.batch(change(T1, 0, isr=[1, 2]))
    res = _run(b)
    (a,) = res.anomalies()
    assert (a["offset"], a["reason_code"]) == (gap_at, "OFFSET_GAP")
    assert f"{gap_at}..{gap_at + 2} (3)" in a["message"]
    assert _part(res.final_image(), T1, 0)["isr"] == [1, 2]
    assert res["log_commit"].to_pylist()[0]["offset_gaps"] == 1


def test_missing_control_offsets_count_as_gaps_unless_given() -> None:
    b = BronzeLog()
    b.batch(mv(11))
    b.leader_change()
    b.noop()
    log, control, snaps = b.tables()
    assert replay(log, control, snaps).anomalies() == []
    assert [a["reason_code"] for a in replay(log).anomalies()] == ["OFFSET_GAP"]


def test_log_starting_mid_stream_without_snapshot_gives_anomalies_not_a_crash() -> None:
    full = BronzeLog()
    _cluster(full)
    cut = full.offset
    full.batch(change(T1, 0, isr=[1, 2]))
    reg = full.offset
    full.batch(broker(4, reg))
    full.batch(rec("BROKER_REGISTRATION_CHANGE_RECORD", broker_id=2, broker_epoch=2, fenced=1))
    full.batch(topic("new", T2), partition(T2, 0, [4]))
    tail = BronzeLog()
    tail.log = [r for r in full.log if r["offset"] >= cut]
    res = _run(tail)
    assert [(a["offset"], a["reason_code"]) for a in res.anomalies()] == [
        (cut, "LOG_STARTS_MID_STREAM"), (cut, "UNKNOWN_TOPIC"), (reg + 1, "UNKNOWN_BROKER")]
    img = res.final_image()
    assert [t["name"] for t in img["topics"]] == ["new"] and [b_["broker_id"] for b_ in img["brokers"]] == [4]
    assert res.image_at(cut)["topics"] == []
    with pytest.raises(ValueError, match="replay starts at offset"):
        res.image_at(cut - 1)


def _snapshot_of(b: BronzeLog, res, end: int, epoch: int = 1) -> None:
    """Write the oracle's own image at end - 1 as snapshot records (facts §4.3 order)."""
    img = res.image_at(end - 1)
    recs = [mv(img["metadata_version_level"])]
    recs += [feature(n, lv) for n, lv in img["features"].items() if n != "metadata.version"]
    for br in img["brokers"]:
        d = {k: v for k, v in br.items()}
        recs.append(rec("REGISTER_BROKER_RECORD", **d))
    for t in img["topics"]:
        recs.append(topic(t["name"], t["topic_id"]))
        for p in img["partitions"]:
            if p["topic_id"] == t["topic_id"]:
                d = {k: v for k, v in p.items() if k != "topic_name"}
                recs.append(rec("PARTITION_RECORD", **d))
    recs += [config(c["resource_type"], c["resource_name"], c["name"], c["value"]) for c in img["configs"]]
    b.snapshot(end, epoch, recs)


def test_log_starting_from_a_snapshot() -> None:
    full = BronzeLog()
    _cluster(full)
    full.batch(config(2, "orders", "retention.ms", "1"))
    full.batch(change(T1, 0, isr=[1, 2], leader=2))
    end = full.offset
    full.batch(change(T1, 0, isr=[2]))
    full.batch(change(T1, 1, isr=[2, 3]))
    whole = _run(full)
    _snapshot_of(full, whole, end)
    for first in (end, end - 3):  # the segment before the snapshot is gone / partly still there
        tail = BronzeLog()
        tail.log = [r for r in full.log if r["offset"] >= first]
        tail.snapshots, tail.control = full.snapshots, full.control
        res = _run(tail)
        assert res.anomalies() == [], first
        assert res.final_image() == whole.final_image()
        assert res.image_at(end - 1) == whole.image_at(end - 1)
        commit = res["log_commit"].to_pylist()[0]
        assert (commit["start_snapshot_end_offset"], commit["replay_start_offset"], commit["first_offset"]) == (end, end, first)
        p0 = _versions(res, "partitions", topic_id=T1, partition_id=0)
        assert (p0[0]["valid_from_offset"], p0[0]["record_offset"], p0[0]["snapshot_end_offset"]) == (end - 1, None, end)
        assert p0[0]["record_type"] == "PARTITION_RECORD" and p0[0]["leader_epoch"] == 1
        assert p0[0]["valid_from_time"] == tail.control[0]["append_time"]
        assert p0[1]["valid_from_offset"] == end and p0[1]["partition_epoch"] == 2
        with pytest.raises(ValueError):
            res.image_at(end - 2)
    # a snapshot older than the log's start: the offsets between are a gap
    tail = BronzeLog()
    tail.log = [r for r in full.log if r["offset"] >= end + 1]
    tail.snapshots, tail.control = full.snapshots, full.control
    res = _run(tail)
    assert [(a["offset"], a["reason_code"]) for a in res.anomalies()] == [(end, "OFFSET_GAP")]
    assert _part(res.final_image(), T1, 1)["isr"] == [2, 3] and _part(res.final_image(), T1, 0)["isr"] == [1, 2]


def test_snapshot_loaded_at_a_gap_deletes_what_it_does_not_mention() -> None:
    b = BronzeLog()
    _cluster(b)
    b.batch(config(2, "orders", "retention.ms", "1"), feature("group.version", 1))
    b.batch(rec("PRODUCER_IDS_RECORD", broker_id=1, broker_epoch=1, next_producer_id=1000))
    gap = b.offset
    b.skip(5)
    end = gap + 4
    # the snapshot: topic T1 is gone, T2 exists, broker 3 unregistered, no config, no group.version
    b.snapshot(end, 1, [mv(11), broker(1, 1, fenced=False), broker(2, 2, fenced=False), topic("pay", T2),
                        partition(T2, 0, [1, 2], leader_epoch=4, partition_epoch=9)])
    b.batch(change(T2, 0, isr=[1]))
    res = _run(b)
    assert [(a["offset"], a["reason_code"]) for a in res.anomalies()] == [(gap, "OFFSET_GAP")]
    assert "resynchronised from snapshot" in res.anomalies()[0]["message"]
    img = res.image_at(end - 1)
    assert [t["topic_id"] for t in img["topics"]] == [T2]
    assert [x["broker_id"] for x in img["brokers"]] == [1, 2] and img["configs"] == []
    assert img["features"] == {"metadata.version": 11}
    assert img["producer_ids"] == {"next_producer_id": 1000}  # a snapshot only sets the counter
    tomb = _versions(res, "topics", topic_id=T1)[-1]
    assert tomb["deleted"] and tomb["valid_from_offset"] == end - 1 and tomb["record_type"] is None
    assert tomb["snapshot_end_offset"] == end
    b1 = _versions(res, "brokers", broker_id=1)
    assert len(b1) == 2 and b1[-1]["snapshot_end_offset"] is None  # unchanged by the snapshot: no new version
    assert _part(res.final_image(), T2, 0)["partition_epoch"] == 10


def test_incomplete_snapshot_is_not_used() -> None:
    b = BronzeLog()
    _cluster(b)
    b.snapshot(100, 1, [mv(11)], footer=False)
    res = _run(b)
    assert _codes(res) == ["SNAPSHOT_INCOMPLETE"]


def test_snapshot_alone_gives_its_image() -> None:
    b = BronzeLog()
    b.snapshot(50, 3, [mv(20), topic("t", T1), partition(T1, 0, [1], leader_epoch=7)])
    b.snapshot(40, 2, [mv(19)])
    res = _run(b)
    img = res.image_at(49)
    assert img["metadata_version"] == "3.8-IV0" and _part(img, T1, 0)["leader_epoch"] == 7
    assert res["log_commit"].to_pylist()[0]["start_snapshot_end_offset"] == 50


def test_divergent_copies_higher_epoch_wins() -> None:
    b = BronzeLog()
    _cluster(b)
    fork = b.offset
    b.batch(change(T1, 0, isr=[1, 2]), change(T1, 1, isr=[2]))            # epoch 1, later truncated
    b.offset = fork
    b.leader_change()                                                      # epoch 2 starts at the fork
    b.batch(change(T1, 0, isr=[1, 3]))
    b.batch(change(T1, 0, isr=[1]), at=b.offset - 1, epoch=2)             # an identical copy: one record
    b.log.pop()
    b.log.append(dict(b.log[-1], source_file="node2.log"))
    res = _run(b)
    img = res.final_image()
    assert _part(img, T1, 0)["isr"] == [1, 3] and _part(img, T1, 1)["isr"] == [2, 3, 1]
    q = res.quarantine.to_pylist()
    assert [(x["offset"], x["reason_code"]) for x in q] == [(fork, "DIVERGENT_UNCOMMITTED"), (fork + 1, "DIVERGENT_UNCOMMITTED")]
    assert "epoch 1" in q[0]["reason"]
    assert res.anomalies() == []
    commit = res["log_commit"].to_pylist()[0]
    assert commit["divergent_records"] == 2 and commit["committed_through_offset"] == fork - 1


def test_conflicting_copies_in_one_epoch_are_an_anomaly() -> None:
    b = BronzeLog()
    _cluster(b)
    at = b.batch(change(T1, 0, isr=[1, 2]))
    b.log.append(dict(b.log[-1], partition_change={**b.log[-1]["partition_change"], "isr": [1]}, source_file="zz.log"))
    res = _run(b)
    assert [(a["offset"], a["reason_code"]) for a in res.anomalies()] == [(at, "CONFLICTING_COPIES")]
    assert _part(res.final_image(), T1, 0)["isr"] == [1, 2]


def test_commit_certainty() -> None:
    b = BronzeLog()
    _cluster(b)
    b.noop(2)
    lc = b.leader_change()
    b.noop(3)
    res = _run(b)
    rows = res["log_batches"].to_pylist()
    assert all(r["certainly_committed"] == (r["batch_last_offset"] < lc) for r in rows)
    assert res["log_commit"].to_pylist()[0]["committed_through_offset"] == lc - 1
    b.snapshot(lc + 2, 2, [mv(11)])
    res = _run(b)
    assert res["log_commit"].to_pylist()[0]["committed_through_offset"] == lc + 1


def test_several_clusters_replay_independently() -> None:
    a, c = BronzeLog("a"), BronzeLog("b")
    _cluster(a)
    c.batch(mv(20))
    la, ca, _ = a.tables()
    lc, cc, _ = c.tables()
    res = replay(pa.concat_tables([la, lc]), pa.concat_tables([ca, cc]))
    assert res.cluster_ids == ["a", "b"]
    assert res.image_at(0, "b")["metadata_version"] == "3.8-IV0" and res.final_image("a")["topics"]
    with pytest.raises(ValueError):
        res.image_at(0)


def test_first_difference_names_entity_and_offset() -> None:
    b = BronzeLog()
    _cluster(b)
    at = b.batch(change(T1, 0, isr=[1, 2]))
    res = _run(b)
    t = res["partitions"]
    assert first_difference("partitions", t, t) is None
    rows = t.to_pylist()
    idx = next(i for i, r in enumerate(rows) if r["valid_from_offset"] == at)
    rows[idx]["isr"] = [9]
    bad = pa.Table.from_pylist(rows, schema=t.schema)
    msg = first_difference("partitions", t, bad)
    assert f"topic_id='{T1}'" in msg and "partition_id=0" in msg and f"valid_from_offset={at}" in msg
    assert "isr: expected [1, 2], got [9]" in msg
    assert "missing row" in first_difference("partitions", t, t.slice(0, t.num_rows - 1))

