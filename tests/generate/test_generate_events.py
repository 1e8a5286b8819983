"""Ground truth: every injected event in ``scenario_events`` is visible in the generated data."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest


@pytest.fixture(scope="module")
def tables(tiny_generated):
    lake = tiny_generated.lake
    out = {}
    for name in ("metadata_log", "metadata_control", "scenario_events", "broker_progress", "feature_update_requests",
                 "snapshot_records", "metadata_requests", "produce_requests"):
        out[name] = lake.read(name).toArrow().to_pylist()
    out["log_by_offset"] = {r["offset"]: r for r in out["metadata_log"]}
    for e in out["scenario_events"]:
        e["d"] = json.loads(e["details"])
    return out


def _events(tables, kind):
    evs = [e for e in tables["scenario_events"] if e["event_type"] == kind]
    assert evs, f"no {kind} event"
    return evs


def _progress(tables, broker):
    return sorted((r for r in tables["broker_progress"] if r["broker_id"] == broker), key=lambda r: r["observed_at"])


def test_network_partition_freezes_the_broker_until_fenced(tables) -> None:
    ev = _events(tables, "network_partition")[0]
    b = ev["broker_id"]
    assert ev["d"]["fenced"] is True
    fence = tables["log_by_offset"][ev["d"]["fence_offset"]]
    assert fence["record_type"] == "BROKER_REGISTRATION_CHANGE_RECORD"
    assert fence["broker_registration_change"]["broker_id"] == b
    assert fence["broker_registration_change"]["fenced"] == 1
    # fenced one session timeout after the partition began
    assert fence["append_time"] - ev["start_time"] == timedelta(milliseconds=9000)
    samples = _progress(tables, b)
    during = [s for s in samples if ev["start_time"] <= s["observed_at"] < ev["end_time"]]
    assert len(during) >= 20
    assert len({s["applied_offset"] for s in during}) == 1, "the partitioned broker's cache kept advancing"
    assert during[0]["applied_offset"] < ev["d"]["fence_offset"]
    # past the fence time, the others have moved beyond the fence record; this broker has not
    after_fence = [s for s in _progress(tables, 1) if fence["append_time"] + timedelta(seconds=2) <= s["observed_at"] < ev["end_time"]]
    assert after_fence and all(s["applied_offset"] >= ev["d"]["fence_offset"] for s in after_fence)
    later = [s for s in samples if s["observed_at"] >= ev["end_time"] + timedelta(seconds=5)]
    assert later[0]["applied_offset"] > ev["d"]["fence_offset"], "the broker never caught up after the partition healed"


def test_apply_offsets_never_go_backwards_within_a_process_life(tables) -> None:
    lives = {}
    for e in _events(tables, "broker_restart"):
        lives.setdefault(e["broker_id"], []).append(e["start_time"])
    for b in {r["broker_id"] for r in tables["broker_progress"]}:
        samples = _progress(tables, b)
        assert len(samples) > 100
        for prev, cur in zip(samples, samples[1:]):
            if any(prev["observed_at"] - timedelta(seconds=1) <= t <= cur["observed_at"] for t in lives.get(b, [])):
                continue             # the process restarted in between: a new life starts from a snapshot
            assert cur["applied_offset"] >= prev["applied_offset"], (b, prev, cur)


def test_restart_registers_a_new_incarnation_and_reloads_a_snapshot(tables) -> None:
    evs = [e for e in _events(tables, "broker_restart") if e["d"]["tag"].startswith("restart")]
    assert {e["d"]["controlled"] for e in evs} == {True, False}
    for ev in evs:
        b = ev["broker_id"]
        reg = tables["log_by_offset"][ev["d"]["new_epoch"]]
        assert reg["record_type"] == "REGISTER_BROKER_RECORD"
        assert reg["register_broker"]["broker_id"] == b and reg["register_broker"]["broker_epoch"] == ev["d"]["new_epoch"]
        assert reg["batch_base_offset"] == ev["d"]["new_epoch"]
        assert ev["d"]["new_epoch"] != ev["d"]["old_epoch"]
        unfence = tables["log_by_offset"][ev["d"]["unfence_offset"]]["broker_registration_change"]
        assert (unfence["broker_id"], unfence["broker_epoch"], unfence["fenced"]) == (b, ev["d"]["new_epoch"], -1)
        if ev["d"]["controlled"]:
            ics = tables["log_by_offset"][ev["d"]["shutdown_offset"]]["broker_registration_change"]
            assert ics["in_controlled_shutdown"] == 1 and tables["log_by_offset"][ev["d"]["shutdown_offset"]]["record_version"] == 1
    # a restart after a snapshot replays from it: the first samples after coming back sit at end - 1
    snaps = sorted(e["d"]["snapshot_end_offset"] for e in _events(tables, "snapshot"))
    ups = [e for e in _events(tables, "broker_restart") if snaps and e["d"]["new_epoch"] > snaps[0]]
    assert ups
    ev = ups[0]
    reg_time = tables["log_by_offset"][ev["d"]["new_epoch"]]["append_time"]
    first = [s for s in _progress(tables, ev["broker_id"]) if s["observed_at"] >= reg_time][0]
    assert first["applied_offset"] == max(s for s in snaps if s <= ev["d"]["new_epoch"]) - 1
    down = [s for s in _progress(tables, ev["broker_id"]) if ev["start_time"] + timedelta(seconds=1) <= s["observed_at"] < reg_time]
    assert down == [], "a broker that is down has no metric samples"


def test_controller_failover_bumps_the_raft_epoch(tables) -> None:
    for ev in _events(tables, "controller_failover"):
        ctl = [r for r in tables["metadata_control"] if r["source_kind"] == "log" and r["offset"] == ev["first_offset"]]
        assert len(ctl) == 1 and ctl[0]["control_type"] == "LEADER_CHANGE"
        assert ctl[0]["leader_change"]["leader_id"] == ev["controller_id"]
        assert ctl[0]["batch_leader_epoch"] == ev["d"]["raft_epoch"]
        before = tables["log_by_offset"].get(ev["first_offset"] - 1)
        after = tables["log_by_offset"].get(ev["first_offset"] + 1)
        assert before["batch_leader_epoch"] == ev["d"]["raft_epoch"] - 1
        assert after["batch_leader_epoch"] == ev["d"]["raft_epoch"]


def test_feature_updates_accepted_are_in_the_log_and_rejected_are_not(tables) -> None:
    evs = _events(tables, "feature_update")
    accepted = [e for e in evs if e["d"]["accepted"]]
    rejected = [e for e in evs if not e["d"]["accepted"]]
    assert len(accepted) >= 3 and len(rejected) >= 3
    kinds = {(e["d"]["upgrade_type"], e["d"]["accepted"]) for e in evs}
    assert {("UPGRADE", True), ("SAFE_DOWNGRADE", True), ("UNSAFE_DOWNGRADE", True), ("SAFE_DOWNGRADE", False),
            ("UNSAFE_DOWNGRADE", False), ("UPGRADE", False)} <= kinds
    for e in accepted:
        rec = tables["log_by_offset"][e["first_offset"]]
        assert rec["feature_level"] == {"name": e["d"]["feature"], "feature_level": e["d"]["target_level"]}
    levels_in_log = {(r["append_time"], r["feature_level"]["feature_level"]) for r in tables["metadata_log"]
                     if r["api_key"] == 12}
    for e in rejected:
        assert e["first_offset"] is None and e["d"]["error_code"] == 95
        assert (e["start_time"], e["d"]["target_level"]) not in levels_in_log
    reqs = {(r["request_time"], r["feature"], r["max_version_level"], r["upgrade_type"])
            for r in tables["feature_update_requests"]}
    assert reqs == {(e["start_time"], e["d"]["feature"], e["d"]["target_level"], e["d"]["upgrade_type"]) for e in evs}


def test_topic_lifecycle_and_reassignment_are_in_the_log(tables) -> None:
    log = tables["log_by_offset"]
    for e in _events(tables, "topic_created"):
        assert log[e["first_offset"]]["topic"] == {"name": e["d"]["topic"], "topic_id": e["d"]["topic_id"]}
    for e in _events(tables, "topic_deleted"):
        assert log[e["first_offset"]]["remove_topic"]["topic_id"] == e["d"]["topic_id"]
    for e in _events(tables, "reassignment_started"):
        pc = log[e["first_offset"]]["partition_change"]
        assert pc["adding_replicas"] == e["d"]["adding"] and pc["removing_replicas"] == e["d"]["removing"]
    for e in _events(tables, "reassignment_completed"):
        pc = log[e["first_offset"]]["partition_change"]
        assert pc["replicas"] == e["d"]["replicas"] and pc["adding_replicas"] == [] and pc["leader"] != -2


def test_client_request_tables(tables, tiny_generated) -> None:
    sc = tiny_generated.result.plan.scenario
    md = tables["metadata_requests"]
    assert len(md) == sc.metadata_requests.count
    assert {r["api_key"] for r in md if r["reads_metadata_cache"]} == {3, 29, 32, 35, 41, 48, 50, 60, 74, 75}
    assert {r["routing"] for r in md} == {"least_loaded", "random"}
    with_tokens = [r for r in md if r["uses_consistency_token"]]
    assert with_tokens and all(r["cluster_id_sent"] is not None for r in with_tokens)
    assert any(r["cluster_id_sent"] != sc.cluster_id for r in with_tokens)
    assert all(r["cluster_id_sent"] is None for r in md if not r["uses_consistency_token"])
    pr = tables["produce_requests"]
    assert len(pr) == sc.produce_requests.count
    assert {r["acks"] for r in pr} == {0, 1, -1}
    assert all(r["current_leader_epoch"] == -1 for r in pr if r["produce_version"] < 12)
    assert all(r["current_leader_epoch"] == r["believed_leader_epoch"] for r in pr if r["produce_version"] >= 12)
    # the believed leader is the partition's leader at the producer's last refresh (replayed here)
    log = sorted(tables["metadata_log"], key=lambda r: r["offset"])
    for req in pr[:: max(1, len(pr) // 60)]:
        key = (req["topic_id"], req["partition_id"])
        leader, epoch = -1, -1
        for r in log:
            if r["append_time"] > req["metadata_refreshed_at"]:
                break
            if r["api_key"] == 3 and (r["partition"]["topic_id"], r["partition"]["partition_id"]) == key:
                leader, epoch = r["partition"]["leader"], r["partition"]["leader_epoch"]
            elif r["api_key"] == 5 and (r["partition_change"]["topic_id"], r["partition_change"]["partition_id"]) == key \
                    and r["partition_change"]["leader"] != -2:
                leader, epoch = r["partition_change"]["leader"], epoch + 1
        assert (req["target_broker"], req["believed_leader_epoch"]) == (leader, epoch)
    # stale beliefs exist: some requests carry an epoch lower than the leader epoch in force at send time
    import bisect

    history: dict = {}
    for r in log:
        if r["api_key"] == 3:
            d = r["partition"]
            history[(d["topic_id"], d["partition_id"])] = [(r["append_time"], d["leader_epoch"])]
        elif r["api_key"] == 5 and r["partition_change"]["leader"] != -2:
            d = r["partition_change"]
            h = history[(d["topic_id"], d["partition_id"])]
            h.append((r["append_time"], h[-1][1] + 1))

    def epoch_at(key, t):
        h = history[key]
        return h[bisect.bisect_right([x for x, _ in h], t) - 1][1]

    stale = [r for r in pr if r["believed_leader_epoch"] < epoch_at((r["topic_id"], r["partition_id"]), r["request_time"])]
    assert len(stale) >= len(pr) // 50, len(stale)
    assert all(r["believed_leader_epoch"] <= epoch_at((r["topic_id"], r["partition_id"]), r["request_time"]) for r in pr)


def test_controlled_shutdown_moves_leaders_off_the_broker(tables) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from generate_replay_checker import check_log

    evs = [e for e in _events(tables, "broker_restart") if e["d"]["controlled"] and "shutdown_offset" in e["d"]]
    assert evs
    ctl = [r for r in tables["metadata_control"] if r["source_kind"] == "log"]
    capture = {e["d"]["leaders_moved_offset"] for e in evs} | {e["d"]["fence_offset"] for e in evs}
    _, img = check_log(tables["metadata_log"], ctl, capture=capture)
    for e in evs:
        b = e["broker_id"]
        before = [k for k, st in img[e["d"]["leaders_moved_offset"]].partitions.items() if st["leader"] == b]
        after = img[e["d"]["fence_offset"]]
        assert before, f"broker {b} led nothing before its controlled shutdown"
        assert not [k for k, st in after.partitions.items() if st["leader"] == b], "leaders left on the broker"
        assert not [k for k, st in after.partitions.items() if b in st["isr"]], "broker left in ISRs"
        assert after.brokers[b]["ics"] and not after.brokers[b]["fenced"]
        assert tables["log_by_offset"][e["d"]["fence_offset"]]["broker_registration_change"]["fenced"] == 1


def test_brokers_reregister_with_wider_ranges_before_the_metadata_version_raise(tables) -> None:
    ru = _events(tables, "rolling_upgrade")[0]
    final = ru["d"]["final_metadata_version"]
    raise_rec = next(r for r in sorted(tables["metadata_log"], key=lambda r: r["offset"])
                     if r["api_key"] == 12 and r["feature_level"] == {"name": "metadata.version", "feature_level": final})
    regs = sorted((r for r in tables["metadata_log"] if r["api_key"] == 0), key=lambda r: r["offset"])
    latest: dict = {}
    first: dict = {}
    for r in regs:
        if r["offset"] > raise_rec["offset"]:
            break
        d = r["register_broker"]
        mv = {f["name"]: f["max_supported_version"] for f in d["features"]}["metadata.version"]
        first.setdefault(d["broker_id"], mv)
        latest[d["broker_id"]] = (r["append_time"], mv)
    assert len(latest) == 5
    for b, (t, mv) in latest.items():
        assert ru["start_time"] <= t < raise_rec["append_time"], b
        assert first[b] < final <= mv, (b, first[b], mv)


def test_stalls_and_heavy_tails_appear_in_broker_progress(tables, tiny_generated) -> None:
    """tiny configures stall_probability 0.005 / stall_ms 3000 and a Pareto tail: some brokers stop applying
    for the stall (the offset stays put for 3 samples while the log grows) and lags have a heavy tail."""
    cfg = tiny_generated.result.plan.scenario.broker_progress
    windows = tiny_generated.result.plan.windows
    start = tiny_generated.result.plan.layout.start_ms

    def in_window(b, ms):
        return any(w.broker_id == b and w.start_ms - 5000 <= ms < w.end_ms + 5000 for w in windows)

    lags, stalls = [], 0
    for b in {r["broker_id"] for r in tables["broker_progress"]}:
        samples = [s for s in _progress(tables, b) if s["applied_record_time"] is not None
                   and not in_window(b, int(s["observed_at"].timestamp() * 1000))
                   and s["observed_at"].timestamp() * 1000 > start + 5000]
        lags += [(s["observed_at"] - s["applied_record_time"]).total_seconds() * 1000 for s in samples]
        run = 1
        for prev, cur in zip(samples, samples[1:]):
            same = cur["applied_offset"] == prev["applied_offset"] and cur["observed_at"] - prev["observed_at"] < timedelta(seconds=2)
            run = run + 1 if same else 1
            if run == 3:
                stalls += 1
    lags.sort()
    median, p999 = lags[len(lags) // 2], lags[int(len(lags) * 0.999)]
    assert stalls >= 3, stalls
    assert max(lags) >= cfg.lag.stall_ms - cfg.sample_interval_ms   # the last sample inside a stall
    assert p999 > 4 * median, (median, p999)
