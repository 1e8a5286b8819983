"""Scenario variants beyond ``tiny``: a cluster at 4.0-IV1 with ELR (tests/generate/scenarios/elr.yaml),
one formatted at 3.3-IV0 (legacy.yaml), and the ``kraft-replay generate`` CLI end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from generate_replay_checker import Violation, check_log

HERE = Path(__file__).parent


def _log(spark, name):
    from kraft_replay.generate import log as L
    from kraft_replay.generate.plan import build_plan
    from kraft_replay.generate.scenario import load_scenario

    plan = build_plan(load_scenario(str(HERE / "scenarios" / f"{name}.yaml")))
    rows = sorted(L.metadata_log(spark, plan).toArrow().to_pylist(), key=lambda r: r["offset"])
    return plan, rows, L.log_control_table(plan).to_pylist()


@pytest.fixture(scope="module")
def elr_log(spark):
    return _log(spark, "elr")


@pytest.fixture(scope="module")
def legacy_log(spark):
    return _log(spark, "legacy")


def test_elr_scenario_writes_eligible_leader_replicas(elr_log) -> None:
    plan, rows, ctl = elr_log
    img, _ = check_log(rows, ctl)          # ELR ∩ ISR = ∅, ELR ⊆ replicas, ELR only below min ISR, ...
    assert img.mv == 23 and img.min_isr == 2
    pcs = [r["partition_change"] for r in rows if r["api_key"] == 5]
    assert {r["record_version"] for r in rows if r["api_key"] in (3, 5)} == {2}
    with_elr = [d for d in pcs if d["eligible_leader_replicas"]]
    assert len(with_elr) >= 3
    for d in with_elr:                      # a replica leaving an ISR below min ISR is the one in ELR
        assert d["isr"] is not None and len(d["isr"]) < 2 and not set(d["isr"]) & set(d["eligible_leader_replicas"])
    # overlapping outages of brokers 1, 2, 3 leave partitions on {1, 2, 3} leaderless: LastKnownElr is set
    leaderless = [d for d in pcs if d["leader"] == -1]
    assert leaderless and all(d["isr"] == [] and d["last_known_elr"] for d in leaderless)
    # ELR is cleared again once ISRs are back at min ISR
    cleared = [d for d in pcs if d["eligible_leader_replicas"] == []]
    assert cleared
    assert not [k for k, st in img.partitions.items() if st["elr"]], "ELR left behind after every broker rejoined"


def test_elr_scenario_feature_updates_follow_the_ranges(elr_log) -> None:
    plan, rows, _ = elr_log
    verdicts = {(e["details"]["feature"], e["details"]["target_level"]): e["details"]
                for e in plan.events if e["event_type"] == "feature_update"}
    assert verdicts[("group.version", 1)]["accepted"]
    assert verdicts[("transaction.version", 2)]["accepted"]
    assert verdicts[("kraft.version", 1)]["accepted"]         # 4.0-IV1 >= 3.9-IV0, every node lists [0, 1]
    refused = verdicts[("group.version", 2)]
    assert not refused["accepted"] and refused["error_code"] == 95
    assert refused["error_message"].endswith("Local controller 3000 only supports versions 0-1")
    finalized = {r["feature_level"]["name"]: r["feature_level"]["feature_level"] for r in rows if r["api_key"] == 12}
    assert finalized == {"metadata.version": 23, "group.version": 1, "transaction.version": 2, "kraft.version": 1}
    regs = [r["register_broker"] for r in rows if r["api_key"] == 0]
    assert regs and all({f["name"] for f in d["features"]} == {
        "metadata.version", "kraft.version", "group.version", "transaction.version",
        "eligible.leader.replicas.version", "share.version"} for d in regs)     # 4.1 software (real 4.1 ranges)


def test_checker_rejects_elr_overlapping_the_isr(elr_log) -> None:
    _, rows, ctl = elr_log
    i = next(i for i, r in enumerate(rows) if r["api_key"] == 5 and r["partition_change"]["eligible_leader_replicas"])
    d = rows[i]["partition_change"]
    bad = [dict(r) for r in rows]
    bad[i] = {**bad[i], "partition_change": {**d, "eligible_leader_replicas": [*d["eligible_leader_replicas"], d["isr"][0]]}}
    with pytest.raises(Violation, match="ELR .* overlaps ISR"):
        check_log(bad, ctl)


def test_legacy_scenario_log(legacy_log) -> None:
    """Formatted at 3.3-IV0: Fence/UnfenceBrokerRecord (not BrokerRegistrationChangeRecord), no NoOp
    until metadata.version reaches 3.3-IV1, RegisterBrokerRecord v0; the checker rejects a NoOp there."""
    plan, rows, ctl = legacy_log
    img, _ = check_log(rows, ctl)
    assert img.mv == 5
    raised = next(r["offset"] for r in rows if r["api_key"] == 12 and r["feature_level"]["feature_level"] == 5)
    early = [r for r in rows if r["offset"] < raised]
    types = {r["record_type"] for r in early}
    assert {"FENCE_BROKER_RECORD", "UNFENCE_BROKER_RECORD"} <= types
    assert "NO_OP_RECORD" not in types and "BROKER_REGISTRATION_CHANGE_RECORD" not in types
    assert {r["record_version"] for r in early if r["api_key"] == 0} == {0}
    assert any(r["record_type"] == "NO_OP_RECORD" for r in rows if r["offset"] > raised)
    # the fence of the crashed broker carries its current epoch; its restart unfences the new incarnation
    fences = [r["fence_broker"] for r in early if r["api_key"] == 7]
    unfences = [r["unfence_broker"] for r in early if r["api_key"] == 8]
    assert any(f["id"] == 2 for f in fences) and len({u["epoch"] for u in unfences if u["id"] == 2}) == 2
    i = next(i for i, r in enumerate(rows) if r["offset"] < raised and r["api_key"] == 5)
    bad = [dict(r) for r in rows]
    bad[i] = {**bad[i], "api_key": 20, "record_type": "NO_OP_RECORD", "record_version": 0, "partition_change": None}
    with pytest.raises(Violation, match="NoOpRecord below 3.3-IV1"):
        check_log(bad, ctl)


def test_cli_generates_tiny_end_to_end(tiny_generated) -> None:
    """`kraft-replay --profile test generate --scenario tiny --lake DIR --segments-out DIR --json` through
    the CLI's entry point (the session fixture every generator test reads): exit 0, progress printed on
    stderr and the JSON summary alone on stdout, every table present with the row count the summary
    reported, segment files written."""
    from deltalake import DeltaTable

    from kraft_replay.generate.runner import TABLES

    proc = tiny_generated.process
    assert proc.returncode == 0 and proc.args[:3] == ["kraft-replay", "--profile", "test"]
    assert "wrote metadata_log" in proc.stderr and proc.stdout.lstrip().startswith("{")
    assert set(tiny_generated.result.rows) == set(TABLES)
    for name in TABLES:
        n = DeltaTable(str(tiny_generated.lake_dir / name)).to_pyarrow_table(columns=["cluster_id"]).num_rows
        assert n == tiny_generated.result.rows[name] > 0, name
    assert list((tiny_generated.segments_dir / "__cluster_metadata-0").glob("*.log"))
