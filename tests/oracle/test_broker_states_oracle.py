"""The ``broker_states`` oracle on hand-built silver rows (docs/design.md, "``broker_states``"; seed 002,
facts §5.3, §9.1): each test pins one rule with values computed by hand. Cluster ``c``, T0 =
2025-01-01 00:00:00 UTC, times in seconds after T0."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from broker_states_oracle import COLUMNS, broker_states  # tests/oracle on sys.path

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def s(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


def ver(off, at, fenced=False, cs=False, epoch=10, inc="I1", deleted=False, to="next", broker=1, rec=None):
    return {"cluster_id": "c", "broker_id": broker, "broker_epoch": None if deleted else epoch,
            "incarnation_id": None if deleted else inc, "fenced": None if deleted else fenced,
            "in_controlled_shutdown": None if deleted else cs, "deleted": deleted, "valid_from_offset": off,
            "valid_to_offset": to, "valid_from_time": s(at), "record_offset": off if rec is None else rec}


def chain(*versions):
    """Versions of one broker with valid_to_offset = the next one's valid_from_offset (last: None)."""
    out = []
    for k, v in enumerate(versions):
        nxt = versions[k + 1]["valid_from_offset"] if k + 1 < len(versions) else None
        out.append({**v, "valid_to_offset": nxt if v["valid_to_offset"] == "next" else v["valid_to_offset"]})
    return out


def iv(frm, to, state="APPLIED", broker=1, offset=1):
    return {"cluster_id": "c", "broker_id": broker, "from_time": s(frm), "to_time": None if to is None else s(to),
            "state": state, "applied_offset": offset if state == "APPLIED" else None}


def row(state, frm, to, off, epoch=10, inc="I1", broker=1, hb=None, gap_start=None, gap_ms=None, md=None, pr=None):
    return {"cluster_id": "c", "broker_id": broker, "state": state, "from_time": s(frm),
            "to_time": None if to is None else s(to), "from_offset": off, "broker_epoch": epoch, "incarnation_id": inc,
            "heartbeat_gap": hb, "gap_start_time": None if gap_start is None else s(gap_start), "gap_ms": gap_ms,
            "gap_metadata_requests": md, "gap_produce_requests": pr}


# register (fenced) at 0, unfence 1, controlled shutdown 10, fenced in it 11, new incarnation 20, unfence 21, unregister 30
LIFE = chain(ver(1, 0, fenced=True), ver(2, 1), ver(3, 10, cs=True), ver(4, 11, fenced=True, cs=True),
             ver(5, 20, fenced=True, epoch=5, inc="I2"), ver(6, 21, epoch=5, inc="I2"), ver(7, 30, deleted=True))


def test_each_state_from_the_log_without_broker_applied() -> None:
    got = broker_states(LIFE, None)
    assert all(list(r) == COLUMNS for r in got)
    assert got == [
        row("FENCED", 0, 1, 1), row("ONLINE", 1, 10, 2), row("STOPPING", 10, 11, 3), row("OFFLINE", 11, 20, 4),
        row("FENCED", 20, 21, 5, epoch=5, inc="I2"), row("ONLINE", 21, 30, 6, epoch=5, inc="I2"),
        row("UNREGISTERED", 30, None, 7, epoch=None, inc=None)]


def test_fenced_without_samples_is_offline() -> None:
    applied = [iv(0.5, 10.5), iv(10.5, 20.4, "NO_SAMPLES"), iv(20.4, None, offset=9)]
    got = broker_states(LIFE, applied)
    assert got == [
        row("OFFLINE", 0, 0.5, 1), row("FENCED", 0.5, 1, 1),  # before the first interval: not running
        row("ONLINE", 1, 10, 2), row("STOPPING", 10, 11, 3),
        row("OFFLINE", 11, 20, 4),  # stopped after a controlled shutdown (from the log)
        row("OFFLINE", 20, 20.4, 5, epoch=5, inc="I2"),  # registered but still in NO_SAMPLES: another epoch
        row("FENCED", 20.4, 21, 5, epoch=5, inc="I2"), row("ONLINE", 21, 30, 6, epoch=5, inc="I2"),
        row("UNREGISTERED", 30, None, 7, epoch=None, inc=None)]
    # an interval that ended with nothing after it: no samples from then on; other clusters: no overlay
    ended = broker_states(LIFE[:1], [iv(0, 2)])
    assert [(r["state"], r["from_time"], r["to_time"]) for r in ended] == [("FENCED", s(0), s(2)), ("OFFLINE", s(2), None)]
    assert broker_states(LIFE[:1], [{**iv(5, None), "cluster_id": "other"}])[0]["state"] == "FENCED"


def test_merging_zero_length_and_never_visible_versions() -> None:
    versions = chain(
        ver(1, 0),  # ONLINE
        ver(2, 5),  # a log-dir change: still ONLINE, same epoch and incarnation -> merged, from_offset 1
        ver(3, 8, fenced=True),  # zero length: the next version has the same time
        ver(4, 8),  # ONLINE again at 8 -> the zero-length FENCED disappears and ONLINE continues
        ver(6, 9, fenced=True, to=6, rec=5),  # superseded inside a transaction: never visible
        ver(6, 9, epoch=11),  # ONLINE with another epoch: a new interval
    )
    assert broker_states(versions, None) == [row("ONLINE", 0, 9, 1), row("ONLINE", 9, None, 6, epoch=11)]


def test_heartbeat_gap_applied() -> None:
    # the offset last advanced at 5 (one long APPLIED interval: stuck behind a partition); fenced at 20
    versions = chain(ver(1, 0), ver(2, 20, fenced=True), ver(3, 40))
    applied = [iv(0, 5), iv(5, 40), iv(40, None, offset=3)]
    md = [{"cluster_id": "c", "target_broker": b, "request_time": s(t)} for b, t in
          [(1, 4.9), (1, 5), (1, 12), (1, 19.999), (1, 20), (2, 12), (1, 25)]]
    pr = [{"cluster_id": cid, "target_broker": 1, "request_time": s(10)} for cid in ("c", "c", "x")]
    got = broker_states(versions, applied, md, pr)
    assert got == [row("ONLINE", 0, 20, 1),
                   row("FENCED", 20, 40, 2, hb=True, gap_start=5, gap_ms=15000, md=3, pr=2),
                   row("ONLINE", 40, None, 3)]
    # request tables missing: counts 0
    assert [r["gap_metadata_requests"] for r in broker_states(versions, applied)] == [None, 0, None]


def test_heartbeat_gap_no_samples_none_and_short() -> None:
    versions = chain(ver(1, 0), ver(2, 20, fenced=True))
    # samples stopped at 11 (NO_SAMPLES in force at the fence): OFFLINE, gap from 11
    got = broker_states(versions, [iv(0, 11), iv(11, 30, "NO_SAMPLES"), iv(30, None)])
    assert got[1] == row("OFFLINE", 20, 30, 2, hb=True, gap_start=11, gap_ms=9000, md=0, pr=0)
    # no interval in force at the fence (the last one ended at 12): the gap starts at its end
    got = broker_states(versions, [iv(0, 12)])
    assert got[1] == row("OFFLINE", 20, None, 2, hb=True, gap_start=12, gap_ms=8000, md=0, pr=0)
    # the offset advanced 1.5 s before the fence: no gap (columns other than heartbeat_gap null)
    got = broker_states(versions, [iv(0, 18.5), iv(18.5, None)])
    assert got[1] == row("FENCED", 20, None, 2, hb=False)
    # exactly 2,000 ms is not a gap; 2,000.5 ms is (gap_ms floored)
    assert broker_states(versions, [iv(0, 18), iv(18, None)])[1]["heartbeat_gap"] is False
    r = broker_states(versions, [iv(0, 17.9995), iv(17.9995, None)])[1]
    assert (r["heartbeat_gap"], r["gap_ms"]) == (True, 2000)
    # without broker_applied the gap is unknown
    assert broker_states(versions, None)[1] == row("FENCED", 20, None, 2)


def test_only_fences_after_online_or_stopping_and_not_in_controlled_shutdown() -> None:
    applied = [iv(0, None, offset=1)]  # samples throughout, stuck at one offset: a gap whenever fenced
    # a controlled shutdown's fence (fenced and in controlled shutdown) is no heartbeat gap
    cs = chain(ver(1, 0), ver(2, 10, cs=True), ver(3, 11, fenced=True, cs=True))
    assert [r["heartbeat_gap"] for r in broker_states(cs, applied)] == [None, None, None]
    # a fence straight from STOPPING that is not in controlled shutdown (a new incarnation) counts
    re = chain(ver(1, 0), ver(2, 10, cs=True), ver(3, 13, fenced=True, epoch=3, inc="I3"))
    assert [r["heartbeat_gap"] for r in broker_states(re, applied)] == [None, None, True]
    # the first interval and a fence after FENCED / UNREGISTERED never start with a fence
    fresh = chain(ver(1, 5, fenced=True), ver(2, 10, deleted=True), ver(3, 15, fenced=True, epoch=3, inc="I3"))
    assert [r["heartbeat_gap"] for r in broker_states(fresh, applied)] == [None, None, None]


def test_the_interval_index_answers_as_the_plain_definition() -> None:
    """``_Intervals.in_force`` (the index that lets the reference run on millions of intervals) equals
    the plain definition — the interval with from_time <= t < to_time with the largest from_time, the
    first in input order among ties — on random overlapping, tied and open intervals."""
    import random

    from broker_states_oracle import _Intervals

    def plain(ivs, t):
        hits = [i for i in ivs if i["from_time"] <= t and (i["to_time"] is None or t < i["to_time"])]
        return max(hits, key=lambda i: i["from_time"]) if hits else None

    rnd = random.Random(7)
    checked = 0
    for _ in range(300):
        ivs = []
        for n in range(rnd.randint(0, 12)):
            a = rnd.randint(0, 30)
            ivs.append({"n": n, "from_time": a, "to_time": None if rnd.random() < 0.15 else a + rnd.randint(0, 8)})
        idx = _Intervals(ivs)
        for t in range(-1, 42):
            want = plain(ivs, t)
            assert idx.in_force(t) is want, (ivs, t)
            checked += want is not None
    assert checked > 1000
