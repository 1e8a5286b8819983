"""The outcome tables equal their sequential reference implementations (tests/oracle/) on the
generated ``tiny`` cluster, replayed once for the session: ``fencing_outcomes`` / ``fencing_summary``
(seed 003) and ``consistency_outcomes`` / ``consistency_summary`` (seed 000)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from chispa import assert_df_equality

from kraft_replay.outcomes.consistency import STALE_DOMAINS, RetryPolicy, consistency_outcomes, consistency_summary
from kraft_replay.outcomes.fencing import broadcast_versions, fencing_outcomes, fencing_summary

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
import consistency_oracle  # noqa: E402
import fencing_oracle  # noqa: E402


def _dicts(df):
    return [r.asDict(recursive=True) for r in df.collect()]


def _frame(spark, rows, like):
    return spark.createDataFrame([tuple(r[c] for c in like.columns) for r in rows], like.schema)


@pytest.fixture(scope="module")
def tables(replayed_tiny):
    names = ("produce_requests", "metadata_requests", "broker_applied", "brokers", "log_batches", *STALE_DOMAINS)
    return {n: replayed_tiny.read(n) for n in dict.fromkeys(names)}


@pytest.mark.parametrize("indexed", [False, True], ids=["shuffled", "broadcast-versions"])
def test_fencing_equals_the_oracle(spark, tables, replayed_tiny, indexed) -> None:
    """Both ways of looking the versions up: shuffled with the requests, and indexed once on the driver
    (read as Arrow from the lake) and broadcast, the requests read as they are."""
    versions = broadcast_versions(spark, lambda t, cols: replayed_tiny.read_arrow(t, cols)) if indexed else None
    frame = fencing_outcomes(tables["produce_requests"], tables["broker_applied"], tables["brokers"],
                             tables["log_batches"], tables["partitions"], versions=versions)
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert ("hashpartitioning" in plan) != indexed, plan  # the broadcast path shuffles no versions
    got = frame.localCheckpoint(eager=True)
    if versions is not None:
        versions.destroy()
    rows = {n: _dicts(tables[n]) for n in ("produce_requests", "broker_applied", "brokers", "log_batches", "partitions")}
    exp = fencing_oracle.fencing_outcomes(rows["produce_requests"], rows["broker_applied"], rows["brokers"],
                                          rows["log_batches"], rows["partitions"])
    # the scenario exercises the rules compared here
    seen = {(r.outcome_without_check, r.outcome_with_check) for r in
            got.select("outcome_without_check", "outcome_with_check").distinct().collect()}
    assert {("ACCEPTED", "ACCEPTED"), ("ACCEPTED", "FENCED_LEADER_EPOCH")} <= seen, seen
    assert any(w == "NOT_LEADER_OR_FOLLOWER" for w, _ in seen), seen
    assert got.where("stale_leader_accept").count() > 0 and got.where("outcome_with_check = 'FENCED_LEADER_EPOCH'").count() > 0
    assert_df_equality(got, _frame(spark, exp, got), ignore_row_order=True, ignore_nullable=True)
    summary = fencing_summary(got)
    assert_df_equality(summary, _frame(spark, fencing_oracle.fencing_summary(exp), summary), ignore_row_order=True,
                       ignore_nullable=True)


def _first_difference(got, want, key):
    """The first row (in ``key`` order) that differs, as (got, want) dicts: short failure messages."""
    g = {tuple(r[k] for k in key): r for r in _dicts(got)}
    w = {tuple(r[k] for k in key): r for r in want}
    for k in sorted(set(g) | set(w), key=lambda t: tuple((x is None, x) for x in t)):
        a, b = g.get(k), w.get(k)
        if a is None or b is None or any(a[c] != b[c] for c in got.columns):
            diff = {c: (a and a[c], b and b[c]) for c in got.columns if a is None or b is None or a[c] != b[c]}
            return k, diff
    return None


def test_consistency_equals_the_oracle(spark, tables) -> None:
    policy = RetryPolicy(max_attempts=3, retry_backoff_ms=100, retry_target="next")
    domains = {d: tables[d] for d in STALE_DOMAINS}
    got = consistency_outcomes(tables["metadata_requests"], tables["broker_applied"], tables["brokers"],
                               tables["log_batches"], domains, policy).localCheckpoint()
    rows = {n: _dicts(tables[n]) for n in tables}
    exp = consistency_oracle.consistency_outcomes(
        rows["metadata_requests"], rows["broker_applied"], rows["brokers"], rows["log_batches"],
        {d: rows[d] for d in STALE_DOMAINS}, max_attempts=3, retry_backoff_ms=100, retry_target="next")
    # the scenario exercises what is compared: every outcome, retries, waits, violations with changes
    outcomes = {r.outcome for r in got.select("outcome").distinct().collect()}
    assert {"ADMITTED", "ADMITTED_AFTER_WAIT", "STALE_METADATA", "INCONSISTENT_CLUSTER_ID"} <= outcomes, outcomes
    assert got.where("attempt > 0").count() > 0 and got.where("stale_entities > 0").count() > 0
    assert _first_difference(got, exp, ["request_id", "policy", "attempt"]) is None
    assert_df_equality(got, _frame(spark, exp, got), ignore_row_order=True, ignore_nullable=True)
    summary = consistency_summary(got)
    want = consistency_oracle.consistency_summary(exp, rows["metadata_requests"])
    assert _first_difference(summary, want, ["target_broker", "context_group", "hour", "policy"]) is None
    assert_df_equality(summary, _frame(spark, want, summary), ignore_row_order=True, ignore_nullable=True)


def test_features_equal_the_oracle(spark, replayed_tiny) -> None:
    """feature_transitions, feature_protection_violations, feature_update_outcomes and downgrade_losses
    (seeds 004, 001) equal tests/oracle/features_oracle.py on the tiny cluster."""
    import features_oracle

    from kraft_replay.outcomes.features import (
        LOSS_DOMAINS, feature_protection_violations, feature_transitions, feature_update_outcomes,
    )

    names = ("feature_update_requests", "log_batches", "metadata_control", "scenario_events", *LOSS_DOMAINS)
    t = {n: replayed_tiny.read(n) for n in names}
    rows = {n: _dicts(t[n]) for n in names}
    got = feature_transitions(t["features"], t["brokers"], t["controllers"]).localCheckpoint()
    exp = features_oracle.feature_transitions(rows["features"], rows["brokers"], rows["controllers"])
    assert {r["kind"] for r in exp} >= {"INITIAL", "UPGRADE", "DOWNGRADE"}
    assert_df_equality(got, _frame(spark, exp, got), ignore_row_order=True, ignore_nullable=True)
    got = feature_protection_violations(t["features"], t["brokers"]).localCheckpoint()
    exp = features_oracle.feature_protection_violations(rows["features"], rows["brokers"])
    assert_df_equality(got, _frame(spark, exp, got), ignore_row_order=True, ignore_nullable=True)

    out, lost = feature_update_outcomes(t["feature_update_requests"], t["features"], t["brokers"], t["controllers"],
                                        t["log_batches"], t["metadata_control"], {d: t[d] for d in LOSS_DOMAINS},
                                        t["scenario_events"])
    out, lost = out.drop("_rid").localCheckpoint(), lost.drop("_dorder").localCheckpoint()
    exp, exp_lost = features_oracle.feature_update_outcomes(
        rows["feature_update_requests"], rows["features"], rows["brokers"], rows["controllers"],
        rows["zk_migration_state"], rows["log_batches"], rows["metadata_control"], rows["partitions"],
        rows["scram_credentials"], rows["delegation_tokens"], rows["scenario_events"])
    # the scenario exercises the rules: accepted upgrades and downgrades, refusals by several checks,
    # KIP-1155 verdicts and losses
    checks = {r["failed_check"] for r in exp}
    assert {None, "BROKER", "DIRECTION", "METADATA_CHANGED"} <= checks, checks
    assert {r["kip1155_outcome"] for r in exp} >= {"ACCEPTED", "REJECTED"} and exp_lost
    assert _first_difference(out, exp, ["request_id", "feature"]) is None
    assert_df_equality(out, _frame(spark, exp, out), ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(lost, _frame(spark, exp_lost, lost), ignore_row_order=True, ignore_nullable=True)
    # against the generator's ground truth: the same acceptance everywhere; a different message only where
    # the controller refused on its own supported range, which the log does not hold below 3.7-IV0
    truth = _dicts(out.where("matches_truth IS NOT NULL"))
    assert len(truth) == rows["feature_update_requests"].__len__()
    for r in truth:
        assert r["truth_accepted"] == (r["error_code"] == 0), r
        if not r["matches_truth"]:
            assert "Local controller" in r["truth_error_message"] and r["skipped_checks"], r
