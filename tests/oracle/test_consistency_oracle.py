"""The sequential consistency oracle on hand-built inputs: each test pins one rule of docs/design.md
("`consistency_outcomes`, `consistency_summary`", seed 000) with values computed by hand.

The world (cluster C, times in ms after T0 = 10:59:57 UTC, so 3000 ms is 11:00:00):

- brokers 1, 2, 3 registered; log batches [0-9] @0, [10-19] @1000, [20-29] @2000, [30-39] @3000,
  [40-49] @4000;
- broker_applied: 1: 9 from 0, 29 from 2000 | 2: 9 from 0, 49 from 5000 | 3: 19 from 0, NO_SAMPLES
  from 1000, 39 from 2650; log span [0, 5000] (horizon = broker 2's last from_time).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from consistency_oracle import COLUMNS, SUMMARY_COLUMNS, _pct, consistency_outcomes, consistency_summary

C = "C"
T0 = datetime(2024, 1, 1, 10, 59, 57, tzinfo=timezone.utc)
H10 = datetime(2024, 1, 1, 10, tzinfo=timezone.utc)
H11 = datetime(2024, 1, 1, 11, tzinfo=timezone.utc)


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _version(frm: int, to: int | None, rec: int | None = None, deleted: bool = False, **fields) -> dict:
    return {"cluster_id": C, "deleted": deleted, "valid_from_offset": frm, "valid_to_offset": to,
            "valid_from_time": at(frm * 100), "record_offset": frm if rec is None else rec, **fields}


def _broker(bid: int, frm: int) -> dict:
    return _version(frm, None, broker_id=bid, fenced=False)


def _iv(bid: int, frm: int, to: int | None, off: int | None) -> dict:
    return {"cluster_id": C, "broker_id": bid, "from_time": at(frm), "to_time": None if to is None else at(to),
            "state": "APPLIED" if off is not None else "NO_SAMPLES", "applied_offset": off,
            "applied_record_time": None, "samples": 1, "restarted": False}


def _pv(tid: str, pid: int, frm: int, to: int | None, leader: int | None, epoch: int | None,
        deleted: bool = False, rec: int | None = None) -> dict:
    return _version(frm, to, rec, deleted, topic_id=tid, partition_id=pid, leader=leader, leader_epoch=epoch)


BROKERS = [_broker(1, 0), _broker(2, 1), _broker(3, 2)]
BATCHES = [{"cluster_id": C, "batch_base_offset": b, "batch_last_offset": b + 9, "batch_leader_epoch": 1,
            "append_time": at(b * 100), "is_control": False} for b in (0, 10, 20, 30, 40)]
APPLIED = [_iv(1, 0, 2000, 9), _iv(1, 2000, None, 29),
           _iv(2, 0, 5000, 9), _iv(2, 5000, None, 49),
           _iv(3, 0, 1000, 19), _iv(3, 1000, 2650, None), _iv(3, 2650, None, 39)]
PARTITIONS = [
    # T1-0: first version @5, an ISR-only change @15, a new leader @25
    _pv("T1", 0, 5, 15, 1, 0), _pv("T1", 0, 15, 25, 1, 0), _pv("T1", 0, 25, None, 2, 1),
    # T1-1: created inside a transaction ending @12: a superseded version never visible, then its first
    # visible version @12
    _pv("T1", 1, 12, 12, 2, 0, rec=11), _pv("T1", 1, 12, None, 2, 0, rec=12),
    # T2-0: @20 a never-visible version with another leader, then the visible one equal to the version
    # @3 in leader and epoch: not leader-affecting (only *visible* predecessors count)
    _pv("T2", 0, 3, 20, 3, 0), _pv("T2", 0, 20, 20, 1, 1, rec=18), _pv("T2", 0, 20, None, 3, 0, rec=20),
    # T4-0: deleted @16 (a tombstone is leader-affecting)
    _pv("T4", 0, 2, 16, 1, 0), _pv("T4", 0, 16, None, None, None, deleted=True),
]
ACLS = [_version(5, None, id="a1"), _version(22, None, id="a2"), _version(11, 27, id="a3"),
        _version(27, None, id="a3"), _version(15, 15, id="a4"), _version(29, None, id="a5"),
        _version(9, None, id="a6")]
DOMAINS = {"partitions": PARTITIONS, "acls": ACLS, "brokers": BROKERS}


def req(rid: int, ms: int, client: str, target: int, api_key: int = 3, group: str | None = None,
        tokens: bool = True, cid_sent: str | None = "default", timeout: int = 1000) -> dict:
    return {"cluster_id": C, "request_id": rid, "request_time": at(ms), "client_id": client, "context_group": group,
            "api_key": api_key, "reads_metadata_cache": api_key in (3, 29, 32, 35, 41, 48, 50, 60, 74, 75),
            "routing": "random", "target_broker": target,
            "cluster_id_sent": (C if tokens else None) if cid_sent == "default" else cid_sent,
            "uses_consistency_token": tokens, "request_timeout_ms": timeout}


def run(reqs: list[dict], applied: list[dict] = APPLIED, brokers: list[dict] = BROKERS, **kw) -> list[dict]:
    return consistency_outcomes(reqs, applied, brokers, BATCHES, {**DOMAINS, "brokers": brokers}, **kw)


def rows_of(rows: list[dict], policy: str, rid: int) -> list[dict]:
    return sorted((r for r in rows if r["policy"] == policy and r["request_id"] == rid), key=lambda r: r["attempt"])


def one(rows: list[dict], policy: str, rid: int, attempt: int = 0) -> dict:
    (r,) = [r for r in rows_of(rows, policy, rid) if r["attempt"] == attempt]
    return r


def brief(r: dict) -> tuple:
    return (r["attempt"], r["attempt_time"], r["target_broker"], r["outcome"], r["response_token"], r["final"])


def test_columns_and_one_row_per_attempt_per_policy():
    rows = run([req(1, 500, "c1", 1)])
    assert [list(r) for r in rows] == [COLUMNS] * 3
    assert [r["policy"] for r in rows] == ["none", "fail", "wait"]
    r = one(rows, "fail", 1)
    assert r == {"cluster_id": C, "request_id": 1, "policy": "fail", "attempt": 0, "final": True,
                 "attempt_time": at(500), "client_id": "c1", "context_group": None, "scope": "c1", "api_key": 3,
                 "reads_metadata_cache": True, "target_broker": 1, "cluster_id_sent": C, "token_sent": -1,
                 "seen_offset": -1, "applied_offset": 9, "outcome": "ADMITTED", "wait_ms": 0,
                 "response_time": at(500), "response_token": 9, "monotonic_read_violation": False,
                 "offsets_older": None, "ms_older": None, "stale_domain": None, "stale_entities": None}
    assert one(rows, "none", 1)["cluster_id_sent"] is None


def test_outcome_1_unknown_broker():
    rows = run([req(1, 500, "c1", 7)])
    for p in ("none", "fail", "wait"):
        r = one(rows, p, 1)
        assert (r["outcome"], r["response_token"], r["applied_offset"], r["wait_ms"], r["response_time"], r["final"]) \
            == ("UNKNOWN_BROKER", -1, None, 0, at(500), True)
        assert r["monotonic_read_violation"] is False


def test_outcome_2_outside_log_span_ends_included():
    rows = run([req(1, -1, "a", 1), req(2, 0, "b", 1), req(3, 5000, "c", 1), req(4, 5001, "d", 1)])
    for p in ("none", "fail", "wait"):
        assert [(one(rows, p, i)["outcome"], one(rows, p, i)["response_token"]) for i in (1, 2, 3, 4)] == \
            [("OUTSIDE_LOG", -1), ("ADMITTED", 9), ("ADMITTED", 29), ("OUTSIDE_LOG", -1)]


def test_outcome_3_inconsistent_cluster_id_only_when_sent():
    rows = run([req(1, 500, "c1", 1, cid_sent="wrOngClusTerId00000000")])
    for p in ("fail", "wait"):
        assert len(rows_of(rows, p, 1)) == 1  # not retried
        r = one(rows, p, 1)
        assert (r["outcome"], r["cluster_id_sent"], r["response_token"], r["applied_offset"], r["final"]) == \
            ("INCONSISTENT_CLUSTER_ID", "wrOngClusTerId00000000", -1, 9, True)
    r = one(rows, "none", 1)  # no cluster id under none
    assert (r["outcome"], r["cluster_id_sent"], r["response_token"]) == ("ADMITTED", None, 9)


def test_outcome_4_no_broker_state():
    brokers = BROKERS + [_broker(4, 3)]  # registered, never sampled
    rows = run([req(1, 1500, "a", 3), req(2, 1500, "b", 4), req(3, 2650, "c", 3)], brokers=brokers)
    for p in ("none", "fail", "wait"):
        assert [(one(rows, p, i)["outcome"], one(rows, p, i)["applied_offset"], one(rows, p, i)["response_token"])
                for i in (1, 2, 3)] == \
            [("NO_BROKER_STATE", None, -1), ("NO_BROKER_STATE", None, -1), ("ADMITTED", 39, 39)]


def test_outcome_5_admitted_key_not_reading_the_cache():
    rows = run([req(1, 2500, "c1", 1), req(2, 2600, "c1", 2, api_key=18)])
    r = one(rows, "fail", 2)
    assert (r["outcome"], r["reads_metadata_cache"], r["token_sent"], r["seen_offset"], r["applied_offset"],
            r["response_token"], r["monotonic_read_violation"], r["stale_domain"]) == \
        ("ADMITTED", False, 29, 29, 9, 9, False, None)


def test_outcome_6_fail_stale_then_retry_on_next_broker():
    rows = run([req(1, 2500, "c1", 1), req(2, 2600, "c1", 2)])
    assert [brief(r) for r in rows_of(rows, "fail", 2)] == [
        (0, at(2600), 2, "STALE_METADATA", 9, False),
        (1, at(2700), 3, "ADMITTED", 39, True)]
    r0, r1 = rows_of(rows, "fail", 2)
    assert (r0["token_sent"], r0["seen_offset"], r0["applied_offset"], r0["wait_ms"], r0["response_time"]) == \
        (29, 29, 9, 0, at(2600))
    assert r0["monotonic_read_violation"] is False  # not admitted
    # the retry's token: max of r1's 29 and attempt 0's own 9
    assert (r1["token_sent"], r1["seen_offset"], r1["monotonic_read_violation"]) == (29, 29, False)
    # under wait: nothing >= 29 on broker 2 within (2600, 3600]: timed out, retried at 3700
    assert [brief(r) for r in rows_of(rows, "wait", 2)] == [
        (0, at(2600), 2, "STALE_METADATA", 9, False),
        (1, at(3700), 3, "ADMITTED", 39, True)]
    assert [(r["wait_ms"], r["response_time"]) for r in rows_of(rows, "wait", 2)] == [(1000, at(3600)), (0, at(3700))]
    # none: token -1, admitted with the stale answer
    assert [brief(r) for r in rows_of(rows, "none", 2)] == [(0, at(2600), 2, "ADMITTED", 9, True)]


def test_wait_admitted_after_wait_at_the_timeout_boundary_and_timed_out():
    rows = run([req(1, 2500, "c1", 1), req(2, 2600, "c1", 2, timeout=2400)])
    r = one(rows, "wait", 2)
    assert (r["outcome"], r["token_sent"], r["applied_offset"], r["wait_ms"], r["response_time"],
            r["response_token"], r["final"], r["monotonic_read_violation"]) == \
        ("ADMITTED_AFTER_WAIT", 29, 9, 2400, at(5000), 49, True, False)
    assert one(rows, "fail", 2)["outcome"] == "STALE_METADATA"
    # one ms shorter: timed out at 4999 with broker 2's offset then; the retry at 5099 is past the log span
    rows = run([req(1, 2500, "c1", 1), req(2, 2600, "c1", 2, timeout=2399)])
    assert [brief(r) + (r["wait_ms"], r["response_time"]) for r in rows_of(rows, "wait", 2)] == [
        (0, at(2600), 2, "STALE_METADATA", 9, False, 2399, at(4999)),
        (1, at(5099), 3, "OUTSIDE_LOG", -1, True, 0, at(5099))]


def test_retry_same_target_and_max_attempts():
    reqs = [req(1, 2500, "c1", 1), req(2, 2600, "c1", 2)]
    rows = run(reqs, retry_target="same")
    assert [brief(r) for r in rows_of(rows, "fail", 2)] == [
        (0, at(2600), 2, "STALE_METADATA", 9, False),
        (1, at(2700), 2, "STALE_METADATA", 9, False),
        (2, at(2800), 2, "STALE_METADATA", 9, True)]
    rows = run(reqs, retry_target="same", max_attempts=2, retry_backoff_ms=250)
    assert [brief(r) for r in rows_of(rows, "fail", 2)] == [
        (0, at(2600), 2, "STALE_METADATA", 9, False),
        (1, at(2850), 2, "STALE_METADATA", 9, True)]
    rows = run(reqs, max_attempts=1)
    assert [brief(r) for r in rows_of(rows, "fail", 2)] == [(0, at(2600), 2, "STALE_METADATA", 9, True)]


def test_retry_next_target_is_cyclic_over_known_brokers():
    # broker 1 moves to 49 at 6000 (the log span now ends at 6000)
    applied = [_iv(1, 0, 2000, 9), _iv(1, 2000, 6000, 29), _iv(1, 6000, None, 49)] + APPLIED[2:]
    rows = run([req(1, 5000, "c1", 2), req(2, 5100, "c1", 3)], applied=applied)
    assert [brief(r) for r in rows_of(rows, "fail", 2)] == [
        (0, at(5100), 3, "STALE_METADATA", 39, False),
        (1, at(5200), 1, "STALE_METADATA", 29, False),
        (2, at(5300), 2, "ADMITTED", 49, True)]
    assert [r["token_sent"] for r in rows_of(rows, "fail", 2)] == [49, 49, 49]


def test_token_shared_by_context_group_not_by_other_clients():
    rows = run([req(1, 2500, "c1", 1, group="g"),
                req(2, 2600, "c2", 2, group="g"),               # same store as c1
                req(3, 2600, "c3", 2, group="h"),               # another store
                req(4, 2600, "c4", 2, group="g", tokens=False),  # in g but without tokens: its own scope
                req(5, 2600, "c5", 2)])                         # tokens, no group: per client
    got = {i: one(rows, "fail", i) for i in (2, 3, 4, 5)}
    assert [(got[i]["scope"], got[i]["seen_offset"], got[i]["token_sent"], got[i]["outcome"]) for i in (2, 3, 4, 5)] == [
        ("g", 29, 29, "STALE_METADATA"), ("h", -1, -1, "ADMITTED"), ("c4", -1, -1, "ADMITTED"), ("c5", -1, -1, "ADMITTED")]
    # the same scopes under none, where the shared token shows as a violation
    r = one(rows, "none", 2)
    assert (r["scope"], r["seen_offset"], r["token_sent"], r["outcome"], r["monotonic_read_violation"]) == \
        ("g", 29, -1, "ADMITTED", True)
    assert one(rows, "none", 4)["monotonic_read_violation"] is False


def test_client_without_tokens_is_never_stale_and_its_violations_say_what_was_wrong():
    rows = run([req(1, 2500, "c3", 1, tokens=False),
                req(2, 2600, "c3", 2, tokens=False),                 # Metadata: leader-affecting partitions
                req(3, 2700, "c3", 2, tokens=False, api_key=35),     # DescribeLogDirs: any partition version
                req(4, 2800, "c3", 2, tokens=False, api_key=29)])    # DescribeAcls
    for p in ("none", "fail", "wait"):
        got = [one(rows, p, i) for i in (2, 3, 4)]
        assert [(r["outcome"], r["token_sent"], r["cluster_id_sent"], r["seen_offset"], r["response_token"],
                 r["monotonic_read_violation"], r["offsets_older"], r["ms_older"], r["stale_domain"],
                 r["stale_entities"]) for r in got] == [
            # (9, 29]: T1-0 new leader @25, T1-1 first visible @12, T4-0 deleted @16; T2-0 @20 is not
            # leader-affecting; batches holding 29 and 9 appended at 2000 and 0
            ("ADMITTED", -1, None, 29, 9, True, 20, 2000, "partitions", 3),
            # any visible version: T1-0 (@15, @25), T1-1, T2-0 @20, T4-0
            ("ADMITTED", -1, None, 29, 9, True, 20, 2000, "partitions", 4),
            # a2 @22, a3 (@11, @27) once, a5 @29 (= seen, in); a6 @9 (= token, out), a4 never visible
            ("ADMITTED", -1, None, 29, 9, True, 20, 2000, "acls", 3)]


def test_violation_counts_entities_between_the_two_offsets_only():
    # seen 39 (broker 3), answer 29 (broker 1): (29, 39] holds no partition change, batches @3000 - @2000
    rows = run([req(1, 2700, "c1", 3, tokens=False), req(2, 2800, "c1", 1, tokens=False)])
    r = one(rows, "none", 2)
    assert (r["seen_offset"], r["response_token"], r["monotonic_read_violation"], r["offsets_older"],
            r["ms_older"], r["stale_domain"], r["stale_entities"]) == (39, 29, True, 10, 1000, "partitions", 0)


def test_responses_count_strictly_before_the_attempt():
    # requests 1 and 2 of one scope at the same time (2 read first by id): neither sees the other's answer
    rows = run([req(2, 2500, "c1", 1), req(1, 2500, "c1", 2), req(3, 2501, "c1", 2)])
    for p in ("fail", "wait"):
        assert [(one(rows, p, i)["seen_offset"], one(rows, p, i)["outcome"]) for i in (1, 2)] == \
            [(-1, "ADMITTED"), (-1, "ADMITTED")]
    assert (one(rows, "fail", 3)["seen_offset"], one(rows, "fail", 3)["outcome"]) == (29, "STALE_METADATA")
    # a wait answered at 5000 (token 49) is not seen by an attempt of the scope at 5000, but is at 5000 + 1 µs
    # (broker 1 moves to 49 at 6000, so the log span ends at 6000)
    applied = [_iv(1, 0, 2000, 9), _iv(1, 2000, 6000, 29), _iv(1, 6000, None, 49)] + APPLIED[2:]
    rows = run([req(1, 2500, "c1", 1), req(2, 2600, "c1", 2, timeout=3000), req(3, 5000, "c1", 1)], applied=applied)
    assert one(rows, "wait", 2)["response_time"] == at(5000)
    r = one(rows, "wait", 3)
    assert (r["seen_offset"], r["token_sent"], r["outcome"], r["response_token"], r["monotonic_read_violation"]) \
        == (29, 29, "ADMITTED", 29, False)
    rows = run([req(1, 2500, "c1", 1), req(2, 2600, "c1", 2, timeout=3000),
                {**req(3, 5000, "c1", 1), "request_time": at(5000) + timedelta(microseconds=1)}], applied=applied)
    r = one(rows, "wait", 3)
    # broker 1 reaches 49 at 6000, 999.999 ms later: wait_ms is the floor, the answer is at 6000 itself
    assert (r["seen_offset"], r["token_sent"], r["outcome"], r["wait_ms"], r["response_time"], r["response_token"]) \
        == (49, 49, "ADMITTED_AFTER_WAIT", 999, at(6000), 49)


def test_summary_rows():
    reqs = [req(1, 2500, "c1", 1, group="g1"), req(2, 2600, "c2", 2, group="g1"),
            req(3, 2650, "c1", 2, group="g1", timeout=3000)]
    rows = run(reqs)
    # fail: 2@2600 stale, retry on 3 @2700 admitted; 3@2650 (seen 29) stale, retry on 3 @2750 admitted
    # wait: 2 times out @3600, retry on 3 @3700 (hour 11); 3 admitted after wait @5000 (2350 ms)
    assert [brief(r) for r in rows_of(rows, "wait", 3)] == [(0, at(2650), 2, "ADMITTED_AFTER_WAIT", 49, True)]
    summ = consistency_summary(rows, reqs)
    assert all(list(s) == SUMMARY_COLUMNS for s in summ)
    by = {(s["target_broker"], s["hour"], s["policy"]): s for s in summ}
    assert sorted(by) == sorted([(1, H10, "none"), (1, H10, "fail"), (1, H10, "wait"),
                                 (2, H10, "none"), (2, H10, "fail"), (2, H10, "wait"),
                                 (3, H10, "fail"), (3, H11, "wait")])
    assert by[(2, H10, "wait")] == {
        "cluster_id": C, "target_broker": 2, "context_group": "g1", "hour": H10, "policy": "wait",
        "requests": 2, "attempts": 2, "retries": 0, "admitted": 0, "admitted_after_wait": 1, "stale_metadata": 1,
        "failed_stale": 0, "inconsistent_cluster_id": 0, "no_answer": 0, "violations": 0, "violations_avoided": 2,
        "wait_ms_p50": 1000, "wait_ms_p99": 2350, "wait_ms_max": 2350,
        # per request by its first attempt's group: 3700 - 2600 (final in hour 11), 5000 - 2650
        "latency_ms_p50": 1100, "latency_ms_p99": 2350, "latency_ms_max": 2350}
    s = by[(2, H10, "none")]
    assert (s["requests"], s["admitted"], s["violations"], s["violations_avoided"], s["wait_ms_p50"],
            s["latency_ms_p50"], s["latency_ms_max"]) == (2, 2, 2, 0, None, 0, 0)
    s = by[(2, H10, "fail")]
    assert (s["stale_metadata"], s["failed_stale"], s["violations_avoided"], s["latency_ms_p50"], s["latency_ms_max"]) \
        == (2, 0, 2, 100, 100)
    s = by[(3, H10, "fail")]
    assert (s["requests"], s["attempts"], s["retries"], s["admitted"], s["violations"], s["violations_avoided"],
            s["latency_ms_p50"]) == (0, 2, 2, 2, 0, 0, None)
    s = by[(3, H11, "wait")]
    assert (s["requests"], s["attempts"], s["retries"], s["admitted"], s["wait_ms_max"], s["latency_ms_max"]) == \
        (0, 1, 1, 1, None, None)
    # without retries the stale requests fail
    rows = run(reqs, max_attempts=1)
    s = {(s["target_broker"], s["policy"]): s for s in consistency_summary(rows, reqs)}[(2, "fail")]
    assert (s["stale_metadata"], s["failed_stale"], s["latency_ms_p50"], s["latency_ms_max"]) == (2, 2, 0, 0)


def test_summary_counts_inconsistent_and_no_answer():
    reqs = [req(1, 500, "c1", 1, cid_sent="X"), req(2, 500, "c1", 7), req(3, -5, "c1", 1), req(4, 1500, "c1", 3)]
    summ = consistency_summary(run(reqs), reqs)
    by = {(s["target_broker"], s["hour"], s["policy"]): s for s in summ}
    assert (by[(1, H10, "fail")]["inconsistent_cluster_id"], by[(1, H10, "fail")]["no_answer"]) == (1, 1)
    assert (by[(1, H10, "none")]["inconsistent_cluster_id"], by[(1, H10, "none")]["admitted"]) == (0, 1)
    assert by[(7, H10, "wait")]["no_answer"] == 1 and by[(3, H10, "wait")]["no_answer"] == 1


def test_lower_percentile():
    assert [_pct([5, 1, 4, 2, 3], p) for p in (0.5, 0.99)] == [3, 5]
    assert [_pct([7, 3], p) for p in (0.5, 0.99)] == [3, 7]
    assert _pct(list(range(1, 101)), 0.99) == 99 and _pct([], 0.5) is None


def test_slices_of_whole_scopes_with_one_cache_give_the_rows_of_one_call():
    # the benchmark plays 10M requests in slices of whole scopes, building each cluster's lookups once
    reqs = [req(1, 2500, "c1", 1, group="g"), req(2, 2600, "c2", 2, group="g"), req(3, 2650, "c3", 3, group="h"),
            req(4, 2700, "c3", 2, group="h"), req(5, 2600, "c4", 2, tokens=False), req(6, 2800, "c4", 1, tokens=False),
            req(7, 2900, "c5", 3), req(8, 4000, "c6", 1, group="k"), req(9, 4400, "c7", 2, group="k")]
    whole = run(reqs)
    assert {r["outcome"] for r in whole} >= {"ADMITTED", "STALE_METADATA", "ADMITTED_AFTER_WAIT"}
    assert any(r["monotonic_read_violation"] for r in whole) and any(r["attempt"] > 0 for r in whole)
    cache: dict = {}
    sliced = [r for scopes in (("g", "c5"), ("h", "k"), ("c4",))
              for r in run([q for q in reqs if (q["context_group"] if q["uses_consistency_token"] and q["context_group"]
                                                else q["client_id"]) in scopes], clusters=cache)]
    assert list(cache) == [C]
    key = lambda r: (r["request_id"], r["policy"], r["attempt"])  # noqa: E731
    assert sorted(sliced, key=key) == sorted(whole, key=key)
