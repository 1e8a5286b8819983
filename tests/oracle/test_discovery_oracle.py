"""The ``feature_discovery`` oracle on hand-built inputs (docs/design.md, "``feature_discovery``,
``feature_discovery_summary``"; seed 004, facts §5.4, §9.3): each test pins one rule with values computed
by hand.

The world (cluster ``c``, times in seconds after T0 = 10:59:30 UTC, so 30 s is 11:00:00):

- brokers 1, 2, 3 known (9 is not); log batches [0-4] @0, [5-9] @1, [10-19] @10, [20-29] @20, [30-39] @30,
  [40-49] @40;
- features: metadata.version 7 from 0 (@0), 8 from 25 (@20), 8 again from 38 (@30, a no-op);
  group.version 1 from 12 (@10), tombstone from 35 (@30); share.version 1 never visible (15-15);
  eligible.leader.replicas.version level 0 from 20 (@20, omitted); transaction.version 1 from 45 (@40);
  kraft.version 1 from a log KRAFT_VERSION record at offset 5 (@1);
- so the timeline is 0 [mv7] @0, 5 [kv1 mv7] @1, 12 [g1 kv1 mv7] @10, 25 [g1 kv1 mv8] @20,
  35 [kv1 mv8] @30, 45 [kv1 mv8 tv1] @40 (20 and 38 change nothing);
- broker_applied: 1: 9 [0,20), 29 [20,30), 39 [30,40), 49 [40,-) | 2: 9 [0,15), 19 [15,50), 49 [50,-) |
  3: 19 [0,20), NO_SAMPLES [20,35), 37 [35,-); log span [0, 50] (horizon = broker 2's last from_time).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from discovery_oracle import (COLUMNS, SUMMARY_COLUMNS, feature_discovery, feature_discovery_summary,
                              feature_timeline, features_at)  # tests/oracle on sys.path

C = "c"
T0 = datetime(2025, 1, 1, 10, 59, 30, tzinfo=timezone.utc)
H10 = datetime(2025, 1, 1, 10, tzinfo=timezone.utc)
H11 = datetime(2025, 1, 1, 11, tzinfo=timezone.utc)
MV, KV, G, TV = "metadata.version", "kraft.version", "group.version", "transaction.version"


def s(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


def fl(levels: dict) -> list[dict]:
    return [{"name": n, "level": levels[n]} for n in sorted(levels)]


def fv(name, level, frm, to, at, deleted=False, cid=C):
    return {"cluster_id": cid, "name": name, "feature_level": None if deleted else level, "metadata_version": None,
            "deleted": deleted, "valid_from_offset": frm, "valid_to_offset": to, "valid_from_time": s(at),
            "valid_to_time": None, "record_offset": frm, "snapshot_end_offset": None}


def kvrec(level, offset=None, end=None, kind="log", at=1, cid=C, ctype="KRAFT_VERSION"):
    return {"cluster_id": cid, "offset": offset, "append_time": s(at), "control_type": ctype, "source_kind": kind,
            "snapshot_end_offset": end, "kraft_version": None if level is None else {"kraft_version": level}}


def batch(base, last, at, cid=C):
    return {"cluster_id": cid, "batch_base_offset": base, "batch_last_offset": last, "append_time": s(at)}


def iv(broker, frm, to, offset=None, state="APPLIED", cid=C):
    return {"cluster_id": cid, "broker_id": broker, "from_time": s(frm), "to_time": None if to is None else s(to),
            "state": state, "applied_offset": offset if state == "APPLIED" else None}


def bv(broker, cid=C):
    return {"cluster_id": cid, "broker_id": broker, "deleted": False, "valid_from_offset": 0, "valid_to_offset": None}


FEATURES = [
    fv(MV, 7, 0, 25, 0), fv(MV, 8, 25, 38, 20), fv(MV, 8, 38, None, 30),
    fv(G, 1, 12, 35, 10), fv(G, None, 35, None, 30, deleted=True),
    fv("share.version", 1, 15, 15, 10),
    fv("eligible.leader.replicas.version", 0, 20, None, 20),
    fv(TV, 1, 45, None, 40),
]
CONTROL = [kvrec(1, offset=5, at=1), kvrec(None, offset=3, at=0, ctype="LEADER_CHANGE")]
BATCHES = [batch(0, 4, 0), batch(5, 9, 1), batch(10, 19, 10), batch(20, 29, 20), batch(30, 39, 30), batch(40, 49, 40)]
APPLIED = [iv(1, 0, 20, 9), iv(1, 20, 30, 29), iv(1, 30, 40, 39), iv(1, 40, None, 49),
           iv(2, 0, 15, 9), iv(2, 15, 50, 19), iv(2, 50, None, 49),
           iv(3, 0, 20, 19), iv(3, 20, 35, state="NO_SAMPLES"), iv(3, 35, None, 37)]
BROKERS = [bv(1), bv(2), bv(3)]

F9 = fl({KV: 1, MV: 7})
F19 = fl({G: 1, KV: 1, MV: 7})
F29 = fl({G: 1, KV: 1, MV: 8})
F39 = fl({KV: 1, MV: 8})  # also the features at 37
F49 = fl({KV: 1, MV: 8, TV: 1})
FEAT = {None: None, 9: F9, 19: F19, 29: F29, 37: F39, 39: F39, 49: F49}


def req(rid, sec, client, target, token=False, group=None, api=18, cid=C):
    return {"cluster_id": cid, "request_id": rid, "request_time": s(sec), "client_id": client, "context_group": group,
            "api_key": api, "reads_metadata_cache": False, "routing": "least_loaded", "target_broker": target,
            "cluster_id_sent": None, "uses_consistency_token": token, "request_timeout_ms": 30000}


def run(*requests, applied=APPLIED, control=CONTROL):
    return feature_discovery(list(requests), applied, BROKERS, BATCHES, FEATURES, control)


def exp(rid, sec, client, target, epoch, log_end, *, status="ANSWERED", stale=False, prior=None, held=None,
        ereg=False, creg=False, changed=None, kept=None, missed=None, caught=None, dis=None, scope=None, group=None):
    return {"cluster_id": C, "request_id": rid, "request_time": s(sec), "client_id": client, "context_group": group,
            "scope": client if scope is None else scope, "target_broker": target, "status": status,
            "finalized_features_epoch": epoch, "finalized_features": FEAT[epoch], "log_end_offset": log_end,
            "content_stale": stale, "prior_epoch": prior, "prior_features": FEAT[prior],
            "held_since": None if held is None else s(held), "epoch_regressed": ereg, "content_regressed": creg,
            "changed_features": changed, "kept_epoch": kept, "kept_features": FEAT[kept],
            "missed_change_offset": missed, "target_caught_up_at": None if caught is None else s(caught),
            "disagreement_ms": dis}


# ---- features_at and the timeline ---------------------------------------------------------------------------

def test_features_at_metadata_version_default_and_omitted_levels() -> None:
    assert features_at([], None, C, 10) == fl({MV: 1})  # §5.4: no record -> 3.0-IV1
    assert features_at(FEATURES, None, C, -1) == fl({MV: 1})  # before the first version
    assert features_at(FEATURES, None, C, 0) == fl({MV: 7})
    # share.version (never visible at 15) and elr at level 0 (from 20) are not listed
    assert features_at(FEATURES, None, C, 15) == fl({G: 1, MV: 7})
    assert features_at(FEATURES, None, C, 24) == fl({G: 1, MV: 7})
    assert features_at(FEATURES, None, C, 25) == fl({G: 1, MV: 8})
    assert features_at(FEATURES, None, C, 35) == fl({MV: 8})  # group.version tombstoned
    assert features_at(FEATURES, None, C, 45) == fl({MV: 8, TV: 1})
    assert features_at(FEATURES, None, "other", 45) == fl({MV: 1})  # per cluster


def test_features_at_kraft_version_from_log_snapshot_and_bootstrap() -> None:
    assert features_at(FEATURES, CONTROL, C, 4) == fl({MV: 7})
    assert features_at(FEATURES, CONTROL, C, 5) == fl({KV: 1, MV: 7})  # the log record at its own offset
    snap = [kvrec(1, offset=3, end=10, kind="snapshot")]  # position = END - 1 = 9, not its offset 3
    assert features_at(FEATURES, snap, C, 8) == fl({MV: 7})
    assert features_at(FEATURES, snap, C, 9) == fl({KV: 1, MV: 7})
    boot = [kvrec(1, offset=0, end=0, kind="bootstrap")]  # position -1
    assert features_at(FEATURES, boot, C, -1) == fl({KV: 1, MV: 1})
    assert features_at(FEATURES, boot, C, 0) == fl({KV: 1, MV: 7})
    # a later record at level 0: not listed from there on
    down = CONTROL + [kvrec(0, offset=20, at=20)]
    assert features_at(FEATURES, down, C, 19) == fl({G: 1, KV: 1, MV: 7})
    assert features_at(FEATURES, down, C, 20) == fl({G: 1, MV: 7})


def test_kraft_version_tie_at_one_position_log_wins() -> None:
    log0, snap1 = kvrec(0, offset=9), kvrec(1, offset=0, end=10, kind="snapshot")  # both at position 9
    for ctl in ([log0, snap1], [snap1, log0]):
        assert features_at(FEATURES, CONTROL + ctl, C, 9) == fl({MV: 7})
    log1, snap0 = kvrec(1, offset=9), kvrec(0, offset=0, end=10, kind="snapshot")
    for ctl in ([log1, snap0], [snap0, log1]):
        assert features_at(FEATURES, ctl, C, 9) == fl({KV: 1, MV: 7})
        assert features_at(FEATURES, ctl, C, 8) == fl({MV: 7})


def test_timeline_keeps_only_changes() -> None:
    got = feature_timeline(FEATURES, CONTROL)
    assert got == [
        {"cluster_id": C, "offset": 0, "time": s(0), "features": fl({MV: 7})},
        {"cluster_id": C, "offset": 5, "time": s(1), "features": F9},  # the control record's append_time
        {"cluster_id": C, "offset": 12, "time": s(10), "features": F19},
        # 15 (never visible) is no candidate; 20 (elr level 0) changes nothing
        {"cluster_id": C, "offset": 25, "time": s(20), "features": F29},
        {"cluster_id": C, "offset": 35, "time": s(30), "features": F39},
        # 38 (metadata.version 8 again) changes nothing
        {"cluster_id": C, "offset": 45, "time": s(40), "features": F49},
    ]
    # without control records offset 5 is no candidate; clusters in order
    other = [fv(MV, 5, 3, None, 2, cid="b")]
    got = feature_timeline(FEATURES + other, None)
    assert [(e["cluster_id"], e["offset"]) for e in got] == [("b", 3), (C, 0), (C, 12), (C, 25), (C, 35), (C, 45)]


# ---- feature_discovery ---------------------------------------------------------------------------------------

def test_broker_behind_a_metadata_version_raise() -> None:
    got = run(req(2, 30, "a", 2), req(1, 25, "a", 1))
    assert all(list(r) == COLUMNS for r in got)
    assert got == [
        exp(1, 25, "a", 1, 29, 29, kept=29),
        # broker 2 still at 19 (mv 7) after the client saw 29 (mv 8) from broker 1; the log is at 39 (mv 8,
        # group.version gone): stale and regressed; missed 25 = the raise; broker 2 applies 49 at 50 s
        exp(2, 30, "a", 2, 19, 39, stale=True, prior=29, held=25, ereg=True, creg=True,
            changed=[{"name": MV, "advertised": 7, "held": 8}], kept=29, missed=25, caught=50, dis=25000),
    ]


def test_broker_caught_up_is_no_regression() -> None:
    got = run(req(1, 25, "e", 1), req(2, 28, "e", 1), req(3, 50, "e", 2))
    assert got == [
        exp(1, 25, "e", 1, 29, 29, kept=29),
        exp(2, 28, "e", 1, 29, 29, prior=29, held=25, kept=29),  # the same epoch again: no regression
        # broker 2's interval starting at 50 s counts; held_since stays the first answer with 29
        exp(3, 50, "e", 2, 49, 49, prior=29, held=25, kept=49),
    ]


def test_epoch_only_regression() -> None:
    got = run(req(1, 31, "b", 1), req(2, 36, "b", 3))
    assert got == [
        exp(1, 31, "b", 1, 39, 39, kept=39),
        # 37 < 39 but the features are the same ([kv1 mv8]): content neither regressed nor stale
        exp(2, 36, "b", 3, 37, 39, prior=39, held=31, ereg=True, kept=39),
    ]


def test_first_answer_stale_is_no_regression() -> None:
    got = run(req(1, 30, "f", 2), req(2, 31, "f", 1))
    assert got == [
        exp(1, 30, "f", 2, 19, 39, stale=True, kept=19),  # behind the log's features, nothing held before
        exp(2, 31, "f", 1, 39, 39, prior=19, held=30, kept=39),
    ]


def test_never_caught_up() -> None:
    got = run(req(1, 45, "d", 1), req(2, 46, "d", 3))
    assert got[1] == exp(2, 46, "d", 3, 37, 49, stale=True, prior=49, held=45, ereg=True, creg=True,
                         changed=[{"name": TV, "advertised": 0, "held": 1}], kept=49, missed=45)
    assert got[1]["target_caught_up_at"] is None and got[1]["disagreement_ms"] is None  # broker 3 stays at 37


def test_missed_change_is_the_smallest_offset_with_the_held_features() -> None:
    # held 39 ([kv1 mv8]) while broker 2 answers 19 ([g1 kv1 mv7]): timeline offsets in (19, 39] are 25
    # ([g1 kv1 mv8]) and 35 ([kv1 mv8]): only 35 has the held features; two names changed
    got = run(req(1, 31, "m", 1), req(2, 32, "m", 2))
    assert got[1] == exp(2, 32, "m", 2, 19, 39, stale=True, prior=39, held=31, ereg=True, creg=True,
                         changed=[{"name": G, "advertised": 1, "held": 0}, {"name": MV, "advertised": 7, "held": 8}],
                         kept=39, missed=35, caught=50, dis=19000)


def test_scope_token_users_share_a_context_group() -> None:
    got = run(req(1, 25, "g1", 1, token=True, group="G"), req(2, 30, "g2", 2, token=True, group="G"),
              req(3, 30.5, "h", 2, token=False, group="G"), req(4, 31, "t", 1, token=True),
              req(5, 32, "t", 2, token=True))
    assert [(r["request_id"], r["scope"], r["context_group"]) for r in got] == [
        (1, "G", "G"), (2, "G", "G"), (3, "h", "G"), (4, "t", None), (5, "t", None)]
    # g2 regresses against g1's answer (one store)
    assert got[1] == exp(2, 30, "g2", 2, 19, 39, stale=True, prior=29, held=25, ereg=True, creg=True,
                         changed=[{"name": MV, "advertised": 7, "held": 8}], kept=29, missed=25, caught=50,
                         dis=25000, scope="G", group="G")
    # h does not use tokens: its own scope, nothing held
    assert got[2] == exp(3, 30.5, "h", 2, 19, 39, stale=True, kept=19, group="G")
    # a token user without a group is its own scope (client id)
    assert (got[4]["prior_epoch"], got[4]["epoch_regressed"], got[4]["missed_change_offset"]) == (39, True, 35)


def test_scope_does_not_cross_clusters_and_only_api_versions_count() -> None:
    got = run(req(1, 25, "a", 1), req(2, 30, "a", 2, cid="x"), req(3, 26, "a", 1, api=3))
    assert [(r["cluster_id"], r["request_id"], r["status"]) for r in got] == [(C, 1, "ANSWERED"),
                                                                              ("x", 2, "UNKNOWN_BROKER")]
    assert got[1]["prior_epoch"] is None and got[1]["kept_epoch"] is None and got[1]["log_end_offset"] == -1


def test_status_rows_do_not_change_the_held_view() -> None:
    got = run(req(1, 25, "s", 1), req(2, 26, "s", 9), req(3, 27, "s", 3), req(4, 55, "s", 1), req(5, 56, "s", 9),
              req(6, -1, "s", 1), req(7, 30, "s", 2))
    assert [(r["request_id"], r["status"]) for r in got] == [
        (6, "OUTSIDE_LOG"), (1, "ANSWERED"), (2, "UNKNOWN_BROKER"), (3, "NO_BROKER_STATE"), (7, "ANSWERED"),
        (4, "OUTSIDE_LOG"), (5, "UNKNOWN_BROKER")]  # unknown broker is checked before the span
    assert got[0] == exp(6, -1, "s", 1, None, -1, status="OUTSIDE_LOG")  # before any batch
    assert got[2] == exp(2, 26, "s", 9, None, 29, status="UNKNOWN_BROKER", prior=29, held=25, kept=29)
    assert got[3] == exp(3, 27, "s", 3, None, 29, status="NO_BROKER_STATE", prior=29, held=25, kept=29)
    # the answer after them still regresses against the first answer, held since 25 s
    assert got[4] == exp(7, 30, "s", 2, 19, 39, stale=True, prior=29, held=25, ereg=True, creg=True,
                         changed=[{"name": MV, "advertised": 7, "held": 8}], kept=29, missed=25, caught=50, dis=25000)
    assert got[5] == exp(4, 55, "s", 1, None, 49, status="OUTSIDE_LOG", prior=29, held=25, kept=29)  # after 50 s


def test_no_samples_and_no_interval_are_no_broker_state() -> None:
    got = run(req(1, 10, "n", 1), applied=[iv(1, 5, 8, 9), iv(1, 20, None, 29)])  # a hole from 8 s to 20 s
    assert got[0]["status"] == "NO_BROKER_STATE" and got[0]["kept_epoch"] is None
    got = run(req(1, 8, "n", 1), req(2, 20, "n", 1), applied=[iv(1, 5, 8, 9), iv(1, 20, None, 29)])
    assert [(r["status"], r["finalized_features_epoch"]) for r in got] == [("NO_BROKER_STATE", None),
                                                                           ("ANSWERED", 29)]  # to_time open


def test_ties_in_request_time_follow_request_id() -> None:
    # listed out of order: 100 (broker 1, 39) comes before 101 (broker 2, 19) at the same time
    got = run(req(101, 30, "t", 2), req(100, 30, "t", 1))
    assert got == [
        exp(100, 30, "t", 1, 39, 39, kept=39),
        exp(101, 30, "t", 2, 19, 39, stale=True, prior=39, held=30, ereg=True, creg=True,
            changed=[{"name": G, "advertised": 1, "held": 0}, {"name": MV, "advertised": 7, "held": 8}],
            kept=39, missed=35, caught=50, dis=20000),
    ]
    swapped = run(req(100, 30, "t", 2), req(101, 30, "t", 1))
    assert [(r["request_id"], r["prior_epoch"], r["epoch_regressed"], r["kept_epoch"]) for r in swapped] == [
        (100, None, False, 19), (101, 19, False, 39)]


def test_held_since_is_the_first_answer_with_the_largest_epoch() -> None:
    got = run(req(1, 21, "k", 1), req(2, 25, "k", 1), req(3, 26, "k", 2), req(4, 30, "k", 2))
    # 29 first answered at 21 s (broker 1's interval from 20 s); the two regressions both hold since 21 s
    assert [(r["prior_epoch"], r["held_since"], r["disagreement_ms"]) for r in got] == [
        (None, None, None), (29, s(21), None), (29, s(21), 29000), (29, s(21), 29000)]


def test_caught_up_time_is_never_before_the_request() -> None:
    # broker 2 answers 19 at 30 s; its earlier interval at 29 ended (10 s) before the request, so it does not
    # count: the first one at 25+ still open after 30 s starts at 33 s
    applied = [iv(1, 0, None, 29), iv(2, 0, 10, 29), iv(2, 10, 33, 19), iv(2, 33, None, 30)]
    got = run(req(1, 25, "u", 1), req(2, 30, "u", 2), applied=applied)
    assert (got[1]["missed_change_offset"], got[1]["target_caught_up_at"], got[1]["disagreement_ms"]) == \
        (25, s(33), 8000)


# ---- feature_discovery_summary -------------------------------------------------------------------------------

def test_summary_per_broker_and_hour() -> None:
    rows = run(req(1, 25, "a", 1), req(2, 30, "a", 2), req(3, 31, "b", 1), req(4, 36, "b", 3),
               req(5, 45, "d", 1), req(6, 46, "d", 3), req(7, 26, "z", 9))
    got = feature_discovery_summary(rows, feature_timeline(FEATURES, CONTROL))
    assert all(list(r) == SUMMARY_COLUMNS for r in got)

    def srow(tb, hour, requests, answered, ereg=0, creg=0, behind=None, dis=None, changed=(), missed=(),
             changes=(5, 12, 25)):
        return {"cluster_id": C, "target_broker": tb, "hour": hour, "requests": requests, "answered": answered,
                "epoch_regressions": ereg, "content_regressions": creg, "max_epochs_behind": behind,
                "max_disagreement_ms": dis, "changed_features": list(changed), "missed_change_offsets": list(missed),
                "feature_changes": list(changes)}

    # timeline times: 0 and 5 @10:59:30-31 (0 is the cluster's first: excluded), 12, 25 in hour 10;
    # 35 (@11:00:00) and 45 in hour 11
    assert got == [
        srow(1, H10, 1, 1),
        srow(1, H11, 2, 2, changes=(35, 45)),
        srow(2, H11, 1, 1, 1, 1, 10, 25000, [MV], [25], changes=(35, 45)),
        # b: 39 -> 37 (epoch only, 2 behind); d: 49 -> 37 (content, 12 behind, never caught up)
        srow(3, H11, 2, 2, 2, 1, 12, None, [TV], [45], changes=(35, 45)),
        srow(9, H10, 1, 0),
    ]


def test_summary_merges_distinct_names_and_offsets() -> None:
    # two content regressions at broker 2 in one hour: missed 25 (mv) and 35 (group.version, mv)
    rows = run(req(1, 25, "a", 1), req(2, 30, "a", 2), req(3, 31, "m", 1), req(4, 32, "m", 2))
    got = [r for r in feature_discovery_summary(rows, feature_timeline(FEATURES, CONTROL)) if r["target_broker"] == 2]
    assert len(got) == 1
    g = got[0]
    assert (g["requests"], g["content_regressions"], g["max_epochs_behind"], g["max_disagreement_ms"]) == \
        (2, 2, 20, 25000)
    assert g["changed_features"] == [G, MV] and g["missed_change_offsets"] == [25, 35]
