"""The features oracle on hand-built silver rows (docs/design.md, "feature_transitions,
feature_protection_violations" and "feature_update_outcomes, downgrade_losses"; seeds 004, 001, facts
§5.4, §6, §7): each test pins one rule with values computed by hand. No Spark.

Update requests play against cluster ``c`` (T0 = 2024-05-01 10:00:00 UTC) whose log batches are
[0-9] appended at T0 and [10-19] at T0+10 s: a request at T0+5 s sees the image as of offset 9. The
default image: metadata.version 22 (4.0-IV0) and group.version 1 from offset 0; brokers 1 and 2 and
controllers 10, 11, 12 registered from offset 0, each with metadata.version [1, 22], group.version
[0, 1], kraft.version [0, 1], transaction.version [0, 2]; a LEADER_CHANGE at offset 1: leader 10, voters
10, 11, 12. Tests replace parts of it.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from features_oracle import (  # tests/oracle on sys.path
    LOSS_COLUMNS,
    OUTCOME_COLUMNS,
    TRANSITION_COLUMNS,
    VIOLATION_COLUMNS,
    feature_protection_violations,
    feature_transitions,
    feature_update_outcomes,
)

T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
PREFIX = "The update failed for all features since the following feature had an error: "
MV = "metadata.version"
FULL = {MV: (1, 22), "group.version": (0, 1), "kraft.version": (0, 1), "transaction.version": (0, 2)}
Z = "AAAAAAAAAAAAAAAAAAAAAA"


def s(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


def _franges(ranges: dict) -> list[dict]:
    return [{"name": n, "min_supported_version": lo, "max_supported_version": hi}
            for n, (lo, hi) in sorted(ranges.items())]


def _ver(frm, to, deleted=False, rec=None, snap=None, cid="c"):
    return {"cluster_id": cid, "deleted": deleted, "valid_from_offset": frm, "valid_to_offset": to,
            "valid_from_time": s(frm), "valid_to_time": None if to is None else s(to),
            "record_offset": (frm if rec is None else rec) if snap is None else None,
            "record_type": None, "snapshot_end_offset": snap}


def feat(name, level, frm=0, to=None, deleted=False, rec=None, snap=None, cid="c"):
    v = _ver(frm, to, deleted, rec, snap, cid)
    v.update({"name": name, "feature_level": None if deleted else level,
              "metadata_version": None, "record_type": None if deleted else "FEATURE_LEVEL_RECORD"})
    return v


def broker(bid, ranges=None, frm=0, to=None, fenced=False, deleted=False, ics=False, zk=False, log_dirs=(), cid="c"):
    v = _ver(frm, to, deleted, cid=cid)
    live = not deleted
    v.update({"broker_id": bid, "broker_epoch": 100 + bid if live else None, "incarnation_id": "inc" if live else None,
              "is_migrating_zk_broker": zk if live else None, "end_points": [] if live else None,
              "features": _franges(FULL if ranges is None else ranges) if live else None, "rack": None,
              "fenced": fenced if live else None, "in_controlled_shutdown": ics if live else None,
              "log_dirs": list(log_dirs) if live else None, "changed_fields": None})
    return v


def controller(cid_, ranges=None, frm=0, to=None):
    v = _ver(frm, to)
    v.update({"controller_id": cid_, "incarnation_id": "inc", "zk_migration_ready": False, "end_points": [],
              "features": _franges(FULL if ranges is None else ranges)})
    return v


def lc(offset, leader, voters, source_kind="log"):
    return {"cluster_id": "c", "offset": offset, "control_type": "LEADER_CHANGE", "source_kind": source_kind,
            "leader_change": {"version": 0, "leader_id": leader,
                              "voters": [{"voter_id": v, "voter_directory_id": None} for v in voters],
                              "granting_voters": []},
            "kraft_voters": None}


def kv(offset, voters, source_kind="log"):
    return {"cluster_id": "c", "offset": offset, "control_type": "KRAFT_VOTERS", "source_kind": source_kind,
            "leader_change": None,
            "kraft_voters": {"version": 0, "voters": [{"voter_id": v, "voter_directory_id": None} for v in voters]}}


def zkstate(name):
    v = _ver(0, None)
    v.update({"zk_migration_state": {"NONE": 0, "POST_MIGRATION": 1, "PRE_MIGRATION": 2, "MIGRATION": 3}[name],
              "zk_migration_state_name": name})
    return v


def part(tid, pid, frm=0, to=None, directories=(Z, Z), elr=(), lke=(), deleted=False):
    v = _ver(frm, to, deleted)
    live = not deleted
    v.update({"topic_id": tid, "partition_id": pid, "topic_name": "t" if live else None,
              "replicas": [1, 2] if live else None, "isr": [1, 2] if live else None, "leader": 1 if live else None,
              "directories": list(directories) if live else None,
              "eligible_leader_replicas": list(elr) if live else None, "last_known_elr": list(lke) if live else None})
    return v


def scram(name, mech):
    v = _ver(0, None)
    v.update({"name": name, "mechanism": mech, "iterations": 4096})
    return v


def token(tid):
    v = _ver(0, None)
    v.update({"token_id": tid, "owner": "User:a"})
    return v


BATCHES = [{"cluster_id": "c", "batch_base_offset": b, "batch_last_offset": e, "batch_leader_epoch": 1,
            "append_time": s(at), "is_control": False} for b, e, at in [(0, 9, 0), (10, 19, 10)]]
TYPES = {1: "UPGRADE", 2: "SAFE_DOWNGRADE", 3: "UNSAFE_DOWNGRADE"}


def req(rid, feature, level, code=1, validate_only=False, at=5):
    return {"cluster_id": "c", "request_id": rid, "request_time": at if isinstance(at, datetime) else s(at),
            "client_id": "admin", "request_version": 1, "feature": feature, "max_version_level": level,
            "upgrade_type": TYPES.get(code, "UNKNOWN"), "upgrade_type_code": code, "validate_only": validate_only}


def run(reqs, features=None, brokers=None, controllers=None, control=None, zk=(), partitions=(), scrams=(),
        tokens=(), events=None, capable=None):
    features = [feat(MV, 22), feat("group.version", 1)] if features is None else features
    brokers = [broker(1), broker(2)] if brokers is None else brokers
    controllers = [controller(10), controller(11), controller(12)] if controllers is None else controllers
    control = [lc(1, 10, [10, 11, 12])] if control is None else control
    rows, losses = feature_update_outcomes(list(reqs), features, brokers, controllers, list(zk), BATCHES, control,
                                           list(partitions), list(scrams), list(tokens), scenario_events=events,
                                           downgrade_capable_level=capable)
    for r in rows:
        assert list(r) == OUTCOME_COLUMNS
    for x in losses:
        assert list(x) == LOSS_COLUMNS
    return rows, losses


def one(*args, **kw) -> dict:
    rows, _ = run(*args, **kw)
    assert len(rows) == 1
    return rows[0]


def assert_rejected(r, check, message):
    assert (r["failed_check"], r["feature_error_message"]) == (check, message)
    assert (r["error_code"], r["error_message"], r["outcome"]) == (95, PREFIX + message, "REJECTED")


def assert_accepted(r):
    assert (r["failed_check"], r["feature_error_message"]) == (None, None)
    assert (r["error_code"], r["error_message"], r["outcome"]) == (0, None, "ACCEPTED")


# --- feature_update_outcomes: the checks in order -----------------------------------------------------

def test_upgrade_type():
    r = one([req(1, "group.version", 1, code=4)])
    assert_rejected(r, "UPGRADE_TYPE", "Invalid update version 1 for feature group.version. "
                                       "The controller does not support the given upgrade type.")
    assert (r["as_of_offset"], r["metadata_version_level"], r["current_level"], r["active_controller"]) == (
        9, 22, 1, 10)
    assert r["skipped_checks"] == [] and r["rule_followed"] == "kafka"
    assert (r["kip1155_outcome"], r["kip1155_failed_check"], r["kip1155_error_message"], r["loss_count"]) == (None,) * 4
    assert (r["upgrade_type"], r["upgrade_type_code"], r["client_id"], r["request_version"]) == (
        "UNKNOWN", 4, "admin", 1)


def test_negative_level():
    r = one([req(1, "group.version", -1)])
    assert_rejected(r, "NEGATIVE_LEVEL", "Invalid update version -1 for feature group.version. "
                                         "A feature version cannot be less than 0.")


def test_local_controller_does_not_support():
    r = one([req(1, "share.version", 1)])
    assert_rejected(r, "LOCAL_CONTROLLER", "Invalid update version 1 for feature share.version. "
                                           "Local controller 10 does not support this feature.")
    assert r["current_level"] == 0


def test_local_controller_range_texts():
    r = one([req(1, MV, 23)])
    assert_rejected(r, "LOCAL_CONTROLLER", "Invalid update version 23 for feature metadata.version. "
                                           "Local controller 10 only supports versions 1-22")
    single = {**FULL, "group.version": (1, 1)}
    r = one([req(1, "group.version", 0, code=2)], controllers=[controller(10, single), controller(11), controller(12)])
    assert_rejected(r, "LOCAL_CONTROLLER", "Invalid update version 0 for feature group.version. "
                                           "Local controller 10 only supports versions 1")


def test_active_controller_is_latest_leader_change():
    r = one([req(1, "share.version", 1)], control=[lc(1, 10, [10, 11, 12]), lc(4, 11, [10, 11, 12]),
                                                   lc(12, 12, [10, 11, 12])])
    assert r["active_controller"] == 11
    assert r["feature_error_message"].endswith("Local controller 11 does not support this feature.")


def test_broker_checks_every_registered_broker_by_id():
    brokers = [broker(1, {**FULL, MV: (1, 20)}), broker(2, {MV: (1, 22)}, fenced=True),
               broker(3, {MV: (1, 5)}, frm=0, to=5), broker(3, frm=5, deleted=True),  # unregistered at 9
               broker(4, {MV: (1, 5)}, frm=12)]  # registered after the image
    r = one([req(1, MV, 21)], brokers=brokers)
    assert_rejected(r, "BROKER", "Invalid update version 21 for feature metadata.version. "
                                 "Broker 1 only supports versions 1-20")
    r = one([req(1, "group.version", 1)], brokers=brokers)  # fenced broker 2 (KAFKA-17492: unlisted) counts
    assert_rejected(r, "BROKER", "Invalid update version 1 for feature group.version. "
                                 "Broker 2 does not support this feature.")
    assert_accepted(one([req(1, MV, 20, code=2)], brokers=brokers))  # brokers 3 and 4 not registered at 9


def test_controller_checks_each_voter():
    ctls = [controller(10), controller(11, {**FULL, "group.version": (0, 0)})]  # 12 never registered
    r = one([req(1, "group.version", 1)], controllers=ctls)
    assert_rejected(r, "CONTROLLER", "Invalid update version 1 for feature group.version. "
                                     "Controller 11 does not support this feature.")
    r = one([req(1, MV, 22)], controllers=[controller(10), controller(11, {**FULL, MV: (1, 21)})])
    assert_rejected(r, "CONTROLLER", "Invalid update version 22 for feature metadata.version. "
                                     "Controller 11 only supports versions 1-21")
    r = one([req(1, MV, 22)], controllers=[controller(10), controller(11)])
    assert_rejected(r, "CONTROLLER", "Invalid update version 22 for feature metadata.version. "
                                     "controller 12 has not registered, and may not support this feature")


def test_local_controller_skipped_below_3_7_iv0():
    feats = [feat(MV, 14), feat("group.version", 1)]
    r = one([req(1, "group.version", 1)], features=feats, controllers=[])
    assert_accepted(r)
    assert r["skipped_checks"] == ["local controller 10 not registered"]
    assert r["metadata_version_level"] == 14
    # from 3.7-IV0 the voters are checked: the unregistered local controller fails there
    r = one([req(1, "group.version", 1)], features=[feat(MV, 15), feat("group.version", 1)], controllers=[])
    assert_rejected(r, "CONTROLLER", "Invalid update version 1 for feature group.version. "
                                     "controller 10 has not registered, and may not support this feature")
    assert r["skipped_checks"] == ["local controller 10 not registered"]
    # no skip recorded when the validation stops before step 4
    assert one([req(1, "group.version", -1)], features=feats, controllers=[])["skipped_checks"] == []


def test_no_leader_change():
    r = one([req(1, "group.version", 1)], features=[feat(MV, 14), feat("group.version", 1)], control=[])
    assert_accepted(r)
    assert r["active_controller"] is None and r["skipped_checks"] == ["no active controller"]


def test_voters_from_kraft_voters_else_leader_change():
    ctls = [controller(10), controller(11)]
    lc_only = [lc(1, 10, [10, 11, 12])]
    r = one([req(1, MV, 22)], controllers=ctls, control=lc_only)
    assert r["failed_check"] == "CONTROLLER" and "controller 12 has not registered" in r["feature_error_message"]
    # KRAFT_VOTERS (latest, offset <= 9) wins over LEADER_CHANGE, even an older one than a later LEADER_CHANGE
    assert_accepted(one([req(1, MV, 22)], controllers=ctls, control=[*lc_only, kv(2, [10, 11])]))
    r = one([req(1, MV, 22)], controllers=ctls, control=[lc(1, 10, [10]), kv(2, [10, 11]), lc(4, 11, [10, 11, 12])])
    assert_accepted(r)
    assert r["active_controller"] == 11
    # the latest KRAFT_VOTERS at or below O: a later one names 12 again
    r = one([req(1, MV, 22)], controllers=ctls, control=[*lc_only, kv(2, [10, 11]), kv(3, [10, 12])])
    assert "controller 12 has not registered" in r["feature_error_message"]
    # rows after O and snapshot rows do not count
    r = one([req(1, MV, 22)], controllers=ctls, control=[*lc_only, kv(15, [10, 11]), kv(2, [10, 11], "snapshot")])
    assert r["failed_check"] == "CONTROLLER"


def test_direction():
    r = one([req(1, MV, 21)])
    assert_rejected(r, "DIRECTION", "Invalid update version 21 for feature metadata.version. Can't downgrade the "
                                    "version of this feature without setting the upgrade type to either safe or "
                                    "unsafe downgrade.")
    r = one([req(1, "transaction.version", 2, code=2)])
    assert_rejected(r, "DIRECTION", "Invalid update version 2 for feature transaction.version. "
                                    "Can't downgrade to a newer version.")
    assert_accepted(one([req(1, "group.version", 1, code=2)]))  # equal passes
    assert_accepted(one([req(1, "group.version", 0, code=3)]))  # a removal is a downgrade


def test_unknown_metadata_version():
    wide = {**FULL, MV: (1, 40)}
    r = one([req(1, MV, 35)], brokers=[broker(1, wide)], controllers=[controller(c, wide) for c in (10, 11, 12)])
    assert_rejected(r, "UNKNOWN_METADATA_VERSION", "Invalid metadata.version 35. Unknown metadata.version.")


def test_zk_migration():
    for state in ("PRE_MIGRATION", "MIGRATION"):
        r = one([req(1, MV, 22)], zk=[zkstate(state)])
        assert_rejected(r, "ZK_MIGRATION", "Invalid metadata.version 22. "
                                           "Unable to modify metadata.version while a ZK migration is in progress.")
    assert_accepted(one([req(1, MV, 22)], zk=[zkstate("POST_MIGRATION")]))
    assert_accepted(one([req(1, "group.version", 1)], zk=[zkstate("MIGRATION")]))  # other features are not held


def test_metadata_version_floor():
    r = one([req(1, MV, 3, code=2)], features=[feat(MV, 5), feat("group.version", 1)], controllers=[])
    msg = "Invalid metadata.version 3. Unable to set a metadata.version less than 3.3-IV0"
    assert_rejected(r, "METADATA_VERSION_FLOOR", msg)
    # a downgrade row: loss and the KIP-1155 verdict are filled (the floor is shared)
    assert (r["loss_count"], r["kip1155_outcome"], r["kip1155_failed_check"], r["kip1155_error_message"]) == (
        1, "REJECTED", "METADATA_VERSION_FLOOR", PREFIX + msg)


def test_metadata_changed():
    assert_accepted(one([req(1, MV, 20, code=2)]))  # 21, 22: no metadata change
    r = one([req(1, MV, 16, code=2)])
    assert_rejected(r, "METADATA_CHANGED", "Invalid metadata.version 16. Refusing to perform the requested "
                                           "downgrade because it might delete metadata information.")
    r = one([req(1, MV, 16, code=3)])
    assert_rejected(r, "METADATA_CHANGED", "Invalid metadata.version 16. "
                                           "Unsafe metadata downgrade is not supported in this version.")


def test_unknown_feature_and_undefined_level():
    r = one([req(1, "foo.version", 0)])
    assert_rejected(r, "UNKNOWN_FEATURE",
                    "Invalid update version 0 for feature foo.version. Feature foo.version not found.")
    wide = {**FULL, "group.version": (0, 3)}
    r = one([req(1, "group.version", 2)], brokers=[broker(1, wide)],
            controllers=[controller(c, wide) for c in (10, 11, 12)])
    assert_rejected(r, "UNDEFINED_LEVEL", "Invalid update version 2 for feature group.version. "
                                          "Feature group.version has no level 2.")


def test_dependency_against_proposed_metadata_version():
    r = one([req(1, "group.version", 1)], features=[feat(MV, 3)], controllers=[])
    assert_rejected(r, "DEPENDENCY", "Invalid update version 1 for feature group.version. group.version could not "
                                     "be set to 1 because it depends on metadata.version=4 (3.3-IV0)")
    feats20 = [feat(MV, 20), feat("group.version", 1)]
    r = one([req(1, "kraft.version", 1)], features=feats20)
    assert_rejected(r, "DEPENDENCY", "Invalid update version 1 for feature kraft.version. kraft.version could not "
                                     "be set to 1 because it depends on metadata.version level 21")
    rows, _ = run([req(2, "kraft.version", 1), req(2, MV, 21)], features=feats20)
    assert [(x["feature"], x["failed_check"], x["outcome"], x["error_code"]) for x in rows] == [
        ("kraft.version", None, "ACCEPTED", 0), (MV, None, "ACCEPTED", 0)]


def test_request_level_rule():
    rows, _ = run([req(7, MV, 23), req(7, "transaction.version", 2, code=2), req(7, "group.version", -1)])
    group_msg = "Invalid update version -1 for feature group.version. A feature version cannot be less than 0."
    assert [(x["feature"], x["failed_check"], x["error_code"], x["error_message"], x["outcome"]) for x in rows] == [
        ("group.version", "NEGATIVE_LEVEL", 95, PREFIX + group_msg, "REJECTED"),
        (MV, "LOCAL_CONTROLLER", 95, PREFIX + group_msg, "REJECTED"),
        ("transaction.version", "DIRECTION", 95, PREFIX + group_msg, "REJECTED")]
    # metadata.version goes last even though "metadata.version" < "transaction.version"
    rows, _ = run([req(8, MV, 23), req(8, "transaction.version", 2, code=2)])
    assert {x["error_message"] for x in rows} == {
        PREFIX + "Invalid update version 2 for feature transaction.version. Can't downgrade to a newer version."}
    # a passing update of a failing request is rejected with the other's message; other requests are apart
    rows, _ = run([req(9, "group.version", 1), req(9, MV, 23), req(10, "group.version", 1)])
    assert [(x["request_id"], x["feature"], x["failed_check"], x["error_code"], x["outcome"]) for x in rows] == [
        (9, "group.version", None, 95, "REJECTED"), (9, MV, "LOCAL_CONTROLLER", 95, "REJECTED"),
        (10, "group.version", None, 0, "ACCEPTED")]
    assert rows[0]["error_message"] == PREFIX + ("Invalid update version 23 for feature metadata.version. "
                                                 "Local controller 10 only supports versions 1-22")


def test_validate_only():
    r = one([req(1, "group.version", 1, validate_only=True)])
    assert (r["error_code"], r["error_message"], r["outcome"]) == (0, None, "VALIDATED")
    r = one([req(1, "group.version", -1, validate_only=True)])
    assert r["outcome"] == "REJECTED"


def test_before_log():
    rows, losses = run([req(1, MV, 20, code=2, at=-1), req(2, MV, 20, code=2, at=T0), req(3, MV, 20, code=2, at=10)])
    for r in rows[:2]:
        assert (r["as_of_offset"], r["outcome"], r["rule_followed"]) == (-1, "BEFORE_LOG", "kafka")
        for c in ("metadata_version_level", "current_level", "active_controller", "failed_check",
                  "feature_error_message", "skipped_checks", "error_code", "error_message", "kip1155_outcome",
                  "kip1155_failed_check", "kip1155_error_message", "loss_count", "matches_truth"):
            assert r[c] is None, c
    # a batch appended exactly at the request time is not in the controller's image yet
    assert (rows[2]["as_of_offset"], rows[2]["outcome"], rows[2]["loss_count"]) == (9, "ACCEPTED", 0)
    assert losses == []


# --- KIP-1155 verdicts --------------------------------------------------------------------------------

def kip(r):
    return r["kip1155_outcome"], r["kip1155_failed_check"], r["kip1155_error_message"]


def test_kip1155_floor():
    r = one([req(1, MV, 14, code=2)])
    assert r["failed_check"] == "METADATA_CHANGED"
    assert kip(r) == ("REJECTED", "DOWNGRADE_FLOOR",
                      PREFIX + "Invalid metadata.version 14. Unable to downgrade metadata.version below 3.7-IV0")
    assert r["loss_count"] == 3  # the three controller registrations (T < 15)


def test_kip1155_capable_level():
    cap = {**FULL, MV: (1, 23)}
    brokers = [broker(1, cap), broker(2, cap)]
    ctls = [controller(10, cap), controller(11), controller(12, cap)]
    r = one([req(1, MV, 20, code=2)], brokers=brokers, controllers=ctls, capable=23)
    assert_accepted(r)  # today: 21, 22 changed nothing
    assert kip(r) == ("REJECTED", "DOWNGRADE_SUPPORT",
                      PREFIX + "Invalid metadata.version 20. Controller 11 does not support metadata.version downgrade")
    r = one([req(1, MV, 20, code=2)], brokers=[broker(1, cap), broker(2)], controllers=ctls, capable=23)
    assert kip(r) == ("REJECTED", "DOWNGRADE_SUPPORT",
                      PREFIX + "Invalid metadata.version 20. Broker 2 does not support metadata.version downgrade")
    r = one([req(1, MV, 20, code=2)], brokers=brokers, controllers=ctls)  # default: every node capable
    assert kip(r) == ("ACCEPTED", None, None)


def test_kip1155_feature_dependency():
    feats = [feat(MV, 22), feat("group.version", 1), feat("kraft.version", 1)]
    r = one([req(1, MV, 20, code=2)], features=feats)
    assert_accepted(r)  # today's rule does not re-check dependencies
    assert kip(r) == ("REJECTED", "FEATURE_DEPENDENCY",
                      PREFIX + "Invalid metadata.version 20. "
                      "kraft.version level 1 depends on metadata.version level 21")
    assert kip(one([req(1, MV, 21, code=2)], features=feats)) == ("ACCEPTED", None, None)


def _elr_cluster():
    wide = {**FULL, MV: (1, 23)}
    return {"features": [feat(MV, 23)], "brokers": [broker(1, wide)],
            "controllers": [controller(c, wide) for c in (10, 11, 12)],
            "partitions": [part("T1", 0, elr=[2]), part("T1", 1)]}


def test_kip1155_safe_refused_on_loss():
    rows, losses = run([req(1, MV, 22, code=2)], **_elr_cluster())
    r = rows[0]
    assert_rejected(r, "METADATA_CHANGED", "Invalid metadata.version 22. Refusing to perform the requested downgrade "
                                           "because it might delete metadata information.")
    assert r["loss_count"] == 1
    assert kip(r) == ("REJECTED", "LOSS", PREFIX + "Invalid metadata.version 22. Refusing to perform the requested "
                      'downgrade because it would lose metadata: 1 item(s), first: partitions '
                      '{"partition_id":0,"topic_id":"T1"} eligible_leader_replicas')
    assert losses == [{"cluster_id": "c", "request_id": 1, "as_of_offset": 9, "target_level": 22,
                       "domain": "partitions", "entity": '{"partition_id":0,"topic_id":"T1"}',
                       "field": "eligible_leader_replicas", "what": "the eligible leader replicas"}]


def test_kip1155_unsafe_accepted_with_loss():
    r = one([req(1, MV, 22, code=3)], **_elr_cluster())
    assert r["failed_check"] == "METADATA_CHANGED" and r["outcome"] == "REJECTED"
    assert kip(r) == ("ACCEPTED_WITH_LOSS", None, None)
    assert r["loss_count"] == 1


def test_kip1155_safe_without_loss_and_request_level():
    c = _elr_cluster()
    c["partitions"] = [part("T1", 1)]
    r = one([req(1, MV, 22, code=2)], **c)
    assert (r["outcome"], r["loss_count"]) == ("REJECTED", 0)
    assert kip(r) == ("ACCEPTED", None, None)
    # request level: another update's failure rejects the downgrade under the proposal too
    rows, _ = run([req(2, MV, 22, code=2), req(2, "group.version", -1)], **c)
    msg = PREFIX + "Invalid update version -1 for feature group.version. A feature version cannot be less than 0."
    assert [(x["feature"], *kip(x)) for x in rows] == [("group.version", None, None, None),
                                                        (MV, "REJECTED", None, msg)]
    assert rows[1]["error_message"] == msg  # group.version comes before metadata.version today as well


def test_non_downgrade_rows_have_no_kip_columns():
    for rq in (req(1, MV, 22), req(1, "group.version", 0, code=2)):
        r = one([rq])
        assert kip(r) == (None, None, None) and r["loss_count"] is None


# --- loss rules ---------------------------------------------------------------------------------------

def _loss_image():
    wide = {**FULL, MV: (1, 33)}
    return {
        "features": [feat(MV, 33), feat("group.version", 1), feat("share.version", 1, to=5),
                     feat("share.version", None, frm=5, deleted=True)],
        "brokers": [broker(1, wide, ics=True, zk=True, log_dirs=["d1"]), broker(2, wide)],
        "controllers": [controller(c, wide) for c in (10, 11, 12)],
        "partitions": [part("T1", 0, directories=[Z, "AAAAAAAAAAAAAAAAAAAAAQ"], elr=[2], lke=[3]),
                       part("T1", 1), part("T2", 0, to=4, elr=[1]), part("T2", 0, frm=4, deleted=True),
                       part("T3", 0, frm=0, to=5, elr=[1]), part("T3", 0, frm=5)],
        "scrams": [scram("alice", "SCRAM-SHA-256")], "tokens": [token("tok1")], "zk": [zkstate("POST_MIGRATION")],
    }


P0 = '{"partition_id":0,"topic_id":"T1"}'


def test_each_loss_rule_at_level_3():
    rows, losses = run([req(1, MV, 3, code=3)], **_loss_image())
    assert rows[0]["failed_check"] == "METADATA_VERSION_FLOOR" and rows[0]["loss_count"] == 13
    assert [(x["domain"], x["entity"], x["field"], x["what"]) for x in losses] == [
        ("partitions", P0, "directories", "the directory assignment state of one or more replicas"),
        ("partitions", P0, "eligible_leader_replicas", "the eligible leader replicas"),
        ("partitions", P0, "last_known_elr", "the eligible leader replicas"),
        ("brokers", '{"broker_id":1}', "in_controlled_shutdown",
         "the inControlledShutdown state of one or more brokers"),
        ("brokers", '{"broker_id":1}', "is_migrating_zk_broker",
         "the isMigratingZkBroker state of one or more brokers"),
        ("brokers", '{"broker_id":1}', "log_dirs", "the online log directories of one or more brokers"),
        ("controllers", '{"controller_id":10}', None, "controller registration data"),
        ("controllers", '{"controller_id":11}', None, "controller registration data"),
        ("controllers", '{"controller_id":12}', None, "controller registration data"),
        ("scram_credentials", '{"mechanism":"SCRAM-SHA-256","name":"alice"}', None, "SCRAM credentials"),
        ("delegation_tokens", '{"token_id":"tok1"}', None, "delegation tokens"),
        ("zk_migration_state", "{}", None, "the ZK Migration state which was POST_MIGRATION"),
        ("features", '{"name":"group.version"}', None, "feature flag(s)"),
    ]
    assert {(x["cluster_id"], x["request_id"], x["as_of_offset"], x["target_level"]) for x in losses} == {
        ("c", 1, 9, 3)}


def test_loss_thresholds():
    rows, losses = run([req(1, MV, 16, code=3), req(2, MV, 22, code=2), req(3, MV, 22, code=1)], **_loss_image())
    got: dict[int, list] = {}
    for x in losses:
        got.setdefault(x["request_id"], []).append((x["domain"], x["field"]))
    assert [r["loss_count"] for r in rows] == [4, 2, 2]
    assert got[1] == [("partitions", "directories"), ("partitions", "eligible_leader_replicas"),
                      ("partitions", "last_known_elr"), ("brokers", "log_dirs")]
    assert got[2] == got[3] == [("partitions", "eligible_leader_replicas"), ("partitions", "last_known_elr")]
    assert rows[2]["failed_check"] == "DIRECTION"  # an UPGRADE-typed downgrade still reports its loss


def test_loss_thresholds_exact():
    img = _loss_image()
    cases = {
        7: ["p.directories", "p.eligible_leader_replicas", "p.last_known_elr", "b.is_migrating_zk_broker", "b.log_dirs",
            "controllers", "controllers", "controllers", "scram_credentials", "delegation_tokens",
            "zk_migration_state"],
        8: ["p.directories", "p.eligible_leader_replicas", "p.last_known_elr", "b.log_dirs",
            "controllers", "controllers", "controllers", "scram_credentials", "delegation_tokens"],
        11: ["p.directories", "p.eligible_leader_replicas", "p.last_known_elr", "b.log_dirs",
             "controllers", "controllers", "controllers", "delegation_tokens"],
        14: ["p.directories", "p.eligible_leader_replicas", "p.last_known_elr", "b.log_dirs",
             "controllers", "controllers", "controllers"],
        15: ["p.directories", "p.eligible_leader_replicas", "p.last_known_elr", "b.log_dirs"],
        17: ["p.eligible_leader_replicas", "p.last_known_elr"],
        23: [],
    }
    reqs = [req(t, MV, t, code=3) for t in cases]
    rows, losses = run(reqs, **img)
    got: dict[int, list] = {t: [] for t in cases}
    for x in losses:
        got[x["request_id"]].append(x["domain"] if x["field"] is None else f"{x['domain'][0]}.{x['field']}")
    assert got == cases
    assert [r["loss_count"] for r in rows] == [len(v) for v in cases.values()]


# --- truth ----------------------------------------------------------------------------------------------

def _event(eid, feature, level, accepted, code, msg, at=5):
    return {"cluster_id": "c", "event_id": eid, "event_type": "feature_update", "start_time": s(at), "end_time": s(at),
            "details": json.dumps({"feature": feature, "target_level": level, "accepted": accepted,
                                   "error_code": code, "error_message": msg})}


def test_truth_columns():
    local = PREFIX + ("Invalid update version 23 for feature metadata.version. "
                      "Local controller 10 only supports versions 1-22")
    events = [_event(1, "group.version", 1, True, 0, None), _event(2, MV, 23, False, 95, local),
              _event(3, "transaction.version", 1, False, 95, "something else"),
              _event(4, "group.version", 1, False, 95, "later duplicate"),
              {"cluster_id": "c", "event_id": 5, "event_type": "snapshot", "start_time": s(5), "end_time": s(5),
               "details": "{}"}]
    reqs = [req(1, "group.version", 1), req(2, MV, 23), req(3, "transaction.version", 1), req(4, "group.version", 0, 2),
            req(5, "group.version", 1, at=-1)]
    rows, _ = run(reqs, events=events)
    assert [(r["request_id"], r["truth_accepted"], r["truth_error_code"], r["matches_truth"]) for r in rows] == [
        (1, True, 0, True), (2, False, 95, True), (3, False, 95, False), (4, None, None, None), (5, None, None, None)]
    assert rows[1]["truth_error_message"] == local
    rows, _ = run(reqs)
    assert all(r[c] is None for r in rows for c in ("truth_accepted", "truth_error_code", "truth_error_message",
                                                    "matches_truth"))


# --- feature_transitions ----------------------------------------------------------------------------------

def _transition_tables():
    features = [
        feat(MV, 7, 0, 5), feat(MV, 9, 5, 5, rec=4), feat(MV, 8, 5, 12), feat(MV, 8, 12, 15), feat(MV, 4, 15, None),
        feat("group.version", 1, 3, 8), feat("group.version", None, 8, 14, deleted=True),
        feat("group.version", 1, 14, None),
        feat("transaction.version", 2, 3, 10), feat("transaction.version", 1, 10, None, snap=11),
    ]
    brokers = [broker(1, {MV: (1, 8), "group.version": (0, 1)}), broker(2, {MV: (1, 7)}, frm=6, fenced=True)]
    controllers = [controller(10, {MV: (1, 8), "group.version": (0, 1)})]
    return features, brokers, controllers


def test_transitions_kinds():
    rows = feature_transitions(*_transition_tables())
    assert all(list(r) == TRANSITION_COLUMNS for r in rows)
    assert [(r["feature"], r["offset"], r["from_level"], r["to_level"], r["from_version"], r["to_version"], r["kind"],
             r["metadata_changed"]) for r in rows] == [
        ("group.version", 3, 0, 1, None, None, "UPGRADE", None),
        ("group.version", 8, 1, 0, None, None, "REMOVAL", None),
        ("group.version", 14, 0, 1, None, None, "UPGRADE", None),
        (MV, 0, None, 7, None, "3.3-IV3", "INITIAL", None),
        (MV, 5, 7, 8, "3.3-IV3", "3.4-IV0", "UPGRADE", True),  # the never-visible level 9 is left out
        (MV, 12, 8, 8, "3.4-IV0", "3.4-IV0", "UNCHANGED", False),
        (MV, 15, 8, 4, "3.4-IV0", "3.3-IV0", "DOWNGRADE", True),
        ("transaction.version", 3, 0, 2, None, None, "UPGRADE", None),
        ("transaction.version", 10, 2, 1, None, None, "DOWNGRADE", None),
    ]
    snap = rows[-1]
    assert (snap["record_offset"], snap["snapshot_end_offset"], snap["time"], snap["cluster_id"]) == (
        None, 11, s(10), "c")
    assert (rows[0]["record_offset"], rows[0]["snapshot_end_offset"], rows[0]["time"]) == (3, None, s(3))


def test_metadata_changed_false_range():
    rows = feature_transitions([feat(MV, 22, 0, 3), feat(MV, 20, 3, None)], [], [])
    assert [(r["kind"], r["metadata_changed"], r["nodes"], r["unsupported_nodes"]) for r in rows] == [
        ("INITIAL", None, [], []), ("DOWNGRADE", False, [], [])]


def test_transitions_nodes():
    rows = {(r["feature"], r["offset"]): r for r in feature_transitions(*_transition_tables())}

    def n(t, i, fenced, lo, hi, ok):
        return {"node_type": t, "node_id": i, "fenced": fenced, "min_supported": lo, "max_supported": hi,
                "supports": ok}

    assert rows[("group.version", 3)]["nodes"] == [n("broker", 1, False, 0, 1, True),
                                                   n("controller", 10, None, 0, 1, True)]
    assert rows[("group.version", 8)]["nodes"] == [n("broker", 1, False, 0, 1, True), n("broker", 2, True, 0, 0, True),
                                                   n("controller", 10, None, 0, 1, True)]
    assert rows[("group.version", 8)]["unsupported_nodes"] == []
    assert rows[("group.version", 14)]["unsupported_nodes"] == ["broker 2 [0-0]"]
    assert rows[("transaction.version", 3)]["unsupported_nodes"] == ["broker 1 [0-0]", "controller 10 [0-0]"]
    assert rows[(MV, 12)]["nodes"] == [n("broker", 1, False, 1, 8, True), n("broker", 2, True, 1, 7, False),
                                      n("controller", 10, None, 1, 8, True)]
    assert rows[(MV, 12)]["unsupported_nodes"] == ["broker 2 [1-7]"]
    assert rows[(MV, 5)]["unsupported_nodes"] == []  # broker 2 registers at 6


# --- feature_protection_violations ------------------------------------------------------------------------

def test_protection_violations_intervals():
    features = [feat(MV, 7, 0, 10), feat(MV, 8, 10, None),
                feat("group.version", 1, 0, 20), feat("group.version", None, 20, 30, deleted=True),
                feat("group.version", 1, 30, None)]
    brokers = [
        broker(1, {MV: (1, 7), "group.version": (0, 1)}, frm=2, to=12),
        broker(1, {MV: (1, 7), "group.version": (0, 1)}, frm=12, to=25),  # re-registration: same piece
        broker(1, frm=25, deleted=True),
        broker(2, {MV: (1, 8)}, frm=4),  # group.version unlisted = [0, 0]
        broker(3, {MV: (1, 6), "group.version": (2, 2), "share.version": (1, 1)}, frm=5),
    ]
    rows = feature_protection_violations(features, brokers)
    assert all(list(r) == VIOLATION_COLUMNS for r in rows)
    got = [(r["broker_id"], r["feature"], r["finalized_level"], r["min_supported"], r["max_supported"], r["listed"],
            r["from_offset"], r["to_offset"]) for r in rows]
    assert got == [
        (1, MV, 8, 1, 7, True, 10, 25),
        (2, "group.version", 1, 0, 0, False, 4, 20),
        (2, "group.version", 1, 0, 0, False, 30, None),
        (3, "group.version", 1, 2, 2, True, 5, 20),
        (3, "group.version", 0, 2, 2, True, 20, 30),
        (3, "group.version", 1, 2, 2, True, 30, None),
        (3, MV, 7, 1, 6, True, 5, 10),
        (3, MV, 8, 1, 6, True, 10, None),
        (3, "share.version", 0, 1, 1, True, 5, None),
    ]
    assert [(r["from_time"], r["to_time"]) for r in rows[:2]] == [(s(10), s(25)), (s(4), s(20))]
    assert rows[2]["to_time"] is None and rows[0]["cluster_id"] == "c"


def test_protection_metadata_version_defaults_to_1():
    rows = feature_protection_violations([], [broker(1, {MV: (4, 22)}, frm=3, cid="d")])
    assert rows == [{"cluster_id": "d", "broker_id": 1, "feature": MV, "finalized_level": 1, "min_supported": 4,
                     "max_supported": 22, "listed": True, "from_offset": 3, "to_offset": None, "from_time": s(3),
                     "to_time": None}]
