"""Client feature discovery (gold; seed 004, facts §5.4, §9.3): ``feature_timeline``, ``feature_discovery``
and ``feature_discovery_summary`` on one hand-built cluster, concrete rows compared with chispa; then the
generated ``tiny`` cluster against the sequential reference, and its rolling upgrade.

Cluster ``c1`` (T0 = 2024-05-01 10:00 UTC), batch k = offsets [10k, 10k + 9] appended at T0 + k s (k < 5),
batch 5 = [50, 59] at T0 + 30 s:
- metadata.version 11 from offset 1, 21 from 31, 20 from 41; group.version 1 from 33; a KRAFT_VERSION
  control record (kraft.version 1) at 36.
- broker 1 applied 29 from 2 s, 49 from 10 s; broker 2 applied 40 from 3 s, 45 from 11 s; broker 3 has
  no samples; broker 9 is unknown.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F_

from kraft_replay.generate.requests import METADATA_REQUESTS_SCHEMA
from kraft_replay.ingest.schemas import CONTROL_SCHEMA
from kraft_replay.ingest.tables import arrow_df
from kraft_replay.outcomes.discovery import feature_discovery, feature_discovery_summary, feature_timeline
from kraft_replay.replay.schemas import BROKER_APPLIED_SCHEMA, silver_schema

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))

C = "c1"
T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
MV = "metadata.version"


def at(seconds: float | None) -> datetime | None:
    return None if seconds is None else T0 + timedelta(seconds=seconds)


def _silver(spark, name: str, rows: list[dict]):
    schema = silver_schema(name)
    return arrow_df(spark, pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema))


def _features(spark, rows: list[tuple]):
    """(name, level, from, to, deleted) versions, valid_from_time = T0 + from // 10 s."""
    return _silver(spark, "features", [
        {"cluster_id": C, "name": n, "feature_level": lvl, "valid_from_offset": fo, "valid_to_offset": to,
         "valid_from_time": at(fo // 10), "valid_to_time": at(None if to is None else to // 10), "deleted": d,
         "record_offset": fo} for n, lvl, fo, to, d in rows])


def _control(spark, rows: list[tuple]):
    """(kind, offset, snapshot_end_offset, kraft_version) KRAFT_VERSION records, appended at T0 + offset // 10 s."""
    return arrow_df(spark, pa.Table.from_pylist([{
        "cluster_id": C, "offset": o, "batch_base_offset": o, "batch_last_offset": o, "batch_leader_epoch": 1,
        "append_time": at(o // 10), "control_type": "KRAFT_VERSION", "control_type_id": 5, "key_version": 0,
        "kraft_version": {"version": 0, "kraft_version": kv}, "source_kind": kind, "snapshot_end_offset": end}
        for kind, o, end, kv in rows], schema=CONTROL_SCHEMA))


def F(*items: tuple[str, int]) -> list[tuple]:
    return sorted(items)


F29 = F((MV, 11))
F40 = F(("group.version", 1), ("kraft.version", 1), (MV, 21))
F49 = F(("group.version", 1), ("kraft.version", 1), (MV, 20))
CHANGED = [("group.version", 0, 1), ("kraft.version", 0, 1), (MV, 11, 21)]


@pytest.fixture(scope="module")
def cluster(spark):
    feats = _features(spark, [(MV, 11, 1, 31, False), (MV, 21, 31, 41, False), (MV, 20, 41, None, False),
                              ("group.version", 1, 33, None, False)])
    control = _control(spark, [("log", 36, None, 1)])
    batches = _silver(spark, "log_batches", [
        {"cluster_id": C, "batch_base_offset": 10 * k, "batch_last_offset": 10 * k + 9, "batch_leader_epoch": 1,
         "append_time": at(k if k < 5 else 30), "is_control": False, "records": 10, "certainly_committed": True}
        for k in range(6)])
    applied = arrow_df(spark, pa.Table.from_pylist([
        {"cluster_id": C, "broker_id": b, "from_time": at(f), "to_time": at(t), "state": s, "applied_offset": o}
        for b, f, t, s, o in ((1, 2, 10, "APPLIED", 29), (1, 10, None, "APPLIED", 49), (2, 3, 11, "APPLIED", 40),
                              (2, 11, None, "APPLIED", 45), (3, 0, None, "NO_SAMPLES", None))],
        schema=BROKER_APPLIED_SCHEMA))
    brokers = _silver(spark, "brokers", [
        {"cluster_id": C, "broker_id": b, "broker_epoch": b, "fenced": False, "valid_from_offset": b, "deleted": False,
         "valid_from_time": at(0), "record_offset": b} for b in (1, 2, 3)])
    # (id, client, uses tokens, second, target)
    reqs = [(1, "A", False, 4, 2), (2, "A", False, 5, 1), (3, "A", False, 6, 2), (4, "B", True, 4.5, 1),
            (5, "C", True, 5.5, 2), (6, "B", True, 6.5, 1), (7, "D", False, 7, 1), (8, "A", False, 7.5, 3),
            (9, "A", False, 8, 9), (10, "A", False, 40, 2), (11, "E", False, 11, 1), (12, "E", False, 12, 2),
            (13, "F", False, 13, 1), (14, "F", False, 13, 2), (15, "A", False, 5, 1)]
    ctx = {"A": "g1", "B": "g1", "C": "g1", "D": "g1", "E": "g2", "F": "g2"}
    rows = [{"cluster_id": C, "request_id": i, "request_time": at(s), "client_id": c, "context_group": ctx[c],
             "api_key": 18 if i != 15 else 3, "reads_metadata_cache": i == 15, "routing": "random", "target_broker": b,
             "cluster_id_sent": C if tok else None, "uses_consistency_token": tok, "request_timeout_ms": 1000}
            for i, c, tok, s, b in reqs]
    requests = spark.createDataFrame([tuple(r[f.name] for f in METADATA_REQUESTS_SCHEMA) for r in rows],
                                     METADATA_REQUESTS_SCHEMA)
    return {"features": feats, "metadata_control": control, "log_batches": batches, "broker_applied": applied,
            "brokers": brokers, "metadata_requests": requests}


def _arr(items):
    return None if items is None else [{"name": n, "level": lv} for n, lv in items]


def test_timeline_lists_mv_kraft_and_live_features(spark, cluster) -> None:
    got = feature_timeline(cluster["features"], cluster["metadata_control"])
    exp = spark.createDataFrame([
        (C, 1, at(0), _arr(F((MV, 11)))), (C, 31, at(3), _arr(F((MV, 21)))),
        (C, 33, at(3), _arr(F(("group.version", 1), (MV, 21)))), (C, 36, at(3), _arr(F40)), (C, 41, at(4), _arr(F49)),
    ], got.schema)
    assert_df_equality(got, exp, ignore_row_order=True, ignore_nullable=True)


def test_timeline_kraft_version_from_snapshots_and_the_log(spark) -> None:
    """A snapshot's KRAFT_VERSION counts from its end offset − 1, a log record at the same position wins; a
    re-set level (no change) and a level-0 removal leave the set as it was / drop the feature."""
    feats = _features(spark, [(MV, 14, 1, 5, False), (MV, 14, 5, None, False), ("group.version", 1, 2, 7, False),
                              ("group.version", None, 7, None, True)])
    control = _control(spark, [("snapshot", 0, 10, 1), ("log", 9, None, 0), ("bootstrap", 0, 0, 1), ("log", 12, None, 1)])
    got = feature_timeline(feats, control)
    exp = spark.createDataFrame([
        (C, -1, at(0), _arr(F((MV, 1), ("kraft.version", 1)))),        # bootstrap: from -1, no metadata.version yet
        (C, 1, at(0), _arr(F((MV, 14), ("kraft.version", 1)))),
        (C, 2, at(0), _arr(F((MV, 14), ("kraft.version", 1), ("group.version", 1)))),
        (C, 7, at(0), _arr(F((MV, 14), ("kraft.version", 1)))),
        (C, 9, at(0), _arr(F((MV, 14))),),                               # the log's 0 beats the snapshot's 1 at 9
        (C, 12, at(1), _arr(F((MV, 14), ("kraft.version", 1)))),
    ], got.schema)
    assert_df_equality(got, exp, ignore_row_order=True, ignore_nullable=True)


def _row(i, client, scope, sec, broker, status, epoch, ff, log_end, stale, prior, pf, held, ereg, creg, changed,
         kept, kf, missed=None, caught=None, dis=None):
    return (C, i, at(sec), client, "g1" if client in "ABCD" else "g2", scope, broker, status, epoch, _arr(ff), log_end,
            stale, prior, _arr(pf), at(held), ereg, creg,
            None if changed is None else [{"name": n, "advertised": a, "held": h} for n, a, h in changed],
            kept, _arr(kf), missed, at(caught), dis)


def test_discovery_rows(spark, cluster) -> None:
    got = feature_discovery(cluster["metadata_requests"], cluster["broker_applied"], cluster["brokers"],
                            cluster["log_batches"], cluster["features"], cluster["metadata_control"])
    N = None
    exp = spark.createDataFrame([
        # first answer of A (broker 2 caught up to 40): behind the log's end (49), nothing to regress from
        _row(1, "A", "A", 4, 2, "ANSWERED", 40, F40, 49, True, N, N, N, False, False, N, 40, F40),
        # broker 1 is behind the metadata.version raise: epoch and content regress; 36 is the first offset
        # advertising what A holds, broker 1 reaches it at 10 s, A has held it since 4 s
        _row(2, "A", "A", 5, 1, "ANSWERED", 29, F29, 49, True, 40, F40, 4, True, True, CHANGED, 40, F40, 36, 10, 6000),
        _row(3, "A", "A", 6, 2, "ANSWERED", 40, F40, 49, True, 40, F40, 4, False, False, N, 40, F40),
        # B and C use tokens: their context group g1 is one scope; B's first answer is the stale one
        _row(4, "B", "g1", 4.5, 1, "ANSWERED", 29, F29, 49, True, N, N, N, False, False, N, 29, F29),
        _row(5, "C", "g1", 5.5, 2, "ANSWERED", 40, F40, 49, True, 29, F29, 4.5, False, False, N, 40, F40),
        _row(6, "B", "g1", 6.5, 1, "ANSWERED", 29, F29, 49, True, 40, F40, 5.5, True, True, CHANGED, 40, F40, 36, 10, 4500),
        # D sends no token: its own scope, although g1 has seen 40
        _row(7, "D", "D", 7, 1, "ANSWERED", 29, F29, 49, True, N, N, N, False, False, N, 29, F29),
        # no answer: the prior view is kept
        _row(8, "A", "A", 7.5, 3, "NO_BROKER_STATE", N, N, 49, False, 40, F40, 4, False, False, N, 40, F40),
        _row(9, "A", "A", 8, 9, "UNKNOWN_BROKER", N, N, 49, False, 40, F40, 4, False, False, N, 40, F40),
        _row(10, "A", "A", 40, 2, "OUTSIDE_LOG", N, N, 59, False, 40, F40, 4, False, False, N, 40, F40),
        # an older epoch with the same features: only the epoch regresses
        _row(11, "E", "E", 11, 1, "ANSWERED", 49, F49, 49, False, N, N, N, False, False, N, 49, F49),
        _row(12, "E", "E", 12, 2, "ANSWERED", 45, F49, 49, False, 49, F49, 11, True, False, N, 49, F49),
        # one instant: request id order
        _row(13, "F", "F", 13, 1, "ANSWERED", 49, F49, 49, False, N, N, N, False, False, N, 49, F49),
        _row(14, "F", "F", 13, 2, "ANSWERED", 45, F49, 49, False, 49, F49, 13, True, False, N, 49, F49),
    ], got.schema)
    assert_df_equality(got, exp, ignore_row_order=True, ignore_nullable=True)


def test_summary_per_broker_and_hour(spark, cluster) -> None:
    tl = feature_timeline(cluster["features"], cluster["metadata_control"])
    d = feature_discovery(cluster["metadata_requests"], cluster["broker_applied"], cluster["brokers"],
                          cluster["log_batches"], cluster["features"], cluster["metadata_control"], timeline=tl)
    got = feature_discovery_summary(d, tl)
    changes = [31, 33, 36, 41]
    exp = spark.createDataFrame([
        (C, 1, T0, 6, 6, 2, 2, 11, 6000, ["group.version", "kraft.version", MV], [36], changes),
        (C, 2, T0, 6, 5, 2, 0, 4, None, [], [], changes),
        (C, 3, T0, 1, 0, 0, 0, None, None, [], [], changes),
        (C, 9, T0, 1, 0, 0, 0, None, None, [], [], changes),
    ], got.schema)
    assert_df_equality(got, exp, ignore_row_order=True, ignore_nullable=True)


# -- the generated tiny cluster ------------------------------------------------------------------------------

def _dicts(df):
    return [r.asDict(recursive=True) for r in df.collect()]


PROBE_CLIENTS = 6


@pytest.fixture(scope="module")
def tiny(spark, replayed_tiny):
    """The tiny cluster's tables, its ApiVersions requests joined by dense probes: every 50 ms over the log
    span one of six clients (three sharing a context store through tokens) asks the next broker in turn —
    the generated stream (a hundred answers) rarely lands inside the second or so a broker lags behind a
    feature change; the probes do, around the rolling upgrade's metadata.version raise and the downgrades."""
    names = ("metadata_requests", "broker_applied", "brokers", "log_batches", "features", "metadata_control")
    t = {n: replayed_tiny.read(n) for n in names}
    span = t["log_batches"].agg(F_.min("append_time").alias("a"), F_.max("append_time").alias("b")).first()
    cid = t["log_batches"].select("cluster_id").first()[0]
    n = int((span.b - span.a).total_seconds() * 20)
    rows = [(cid, 10**9 + k, span.a + timedelta(milliseconds=50 * k), f"probe-{k % PROBE_CLIENTS}", "probe-ctx", 18,
             False, "random", 1 + (k // PROBE_CLIENTS + k % PROBE_CLIENTS) % 5,
             cid if k % PROBE_CLIENTS < 3 else None, k % PROBE_CLIENTS < 3, 30000) for k in range(n)]
    probes = spark.createDataFrame(rows, METADATA_REQUESTS_SCHEMA)
    t["metadata_requests"] = t["metadata_requests"].unionByName(probes).localCheckpoint()
    return t


@pytest.fixture(scope="module")
def discovered(tiny):
    tl = feature_timeline(tiny["features"], tiny["metadata_control"]).localCheckpoint()
    got = feature_discovery(tiny["metadata_requests"], tiny["broker_applied"], tiny["brokers"], tiny["log_batches"],
                            tiny["features"], tiny["metadata_control"], timeline=tl).localCheckpoint()
    return tl, got


def test_tiny_equals_the_oracle(spark, tiny, discovered) -> None:
    import discovery_oracle

    tl, got = discovered
    rows = {n: _dicts(df) for n, df in tiny.items()}
    exp = discovery_oracle.feature_discovery(rows["metadata_requests"], rows["broker_applied"], rows["brokers"],
                                             rows["log_batches"], rows["features"], rows["metadata_control"])
    # the data exercises what is compared: every status, shared scopes, both kinds of regression
    assert {r.status for r in got.select("status").distinct().collect()} >= {"ANSWERED", "NO_BROKER_STATE"}
    assert got.where("content_regressed").count() > 0 and got.where("epoch_regressed and not content_regressed").count() > 0
    assert got.where("content_stale").count() > 0
    assert_df_equality(got, spark.createDataFrame([tuple(r[c] for c in got.columns) for r in exp], got.schema),
                       ignore_row_order=True, ignore_nullable=True)
    summary = feature_discovery_summary(got, tl)
    want = discovery_oracle.feature_discovery_summary(exp, discovery_oracle.feature_timeline(rows["features"],
                                                                                             rows["metadata_control"]))
    assert_df_equality(summary, spark.createDataFrame([tuple(r[c] for c in summary.columns) for r in want],
                                                      summary.schema), ignore_row_order=True, ignore_nullable=True)


def test_rolling_upgrade_regressions_only_while_a_broker_lags(tiny, discovered) -> None:
    """Seed 004's eventual consistency on the rolling upgrade 3.6 -> 3.9 and the downgrades after it: a
    client's view of the finalized features goes backwards only inside the window between a
    FeatureLevelRecord's append and the moment the broker it asked had applied it; outside those windows a
    lower epoch carries the same features (harmless)."""
    _, got = discovered
    content = got.where("content_regressed").collect()
    # the raise to 3.9-IV0 (level 21) at the end of the rolling upgrade is among the changes clients lost
    assert any(c["name"] == MV and c["held"] == 21 and c["advertised"] == 11
               for r in content for c in r.changed_features), [r.changed_features for r in content]
    # FeatureLevelRecords: offset -> append time; each broker's applied-offset intervals, from the silver rows
    flr = {r.valid_from_offset: r.valid_from_time for r in tiny["features"].collect()}
    applied: dict[int, list] = {}
    for r in tiny["broker_applied"].where("state = 'APPLIED'").collect():
        applied.setdefault(r.broker_id, []).append((r.from_time, r.to_time, r.applied_offset))
    for r in content:
        c = r.missed_change_offset
        assert c in flr and flr[c] <= r.request_time, (r.request_id, c)
        below = [(f, t) for f, t, o in applied[r.target_broker]
                 if o < c and f <= r.request_time and (t is None or r.request_time < t)]
        assert below, f"request {r.request_id}: broker {r.target_broker} had applied offset {c} at {r.request_time}"
        assert r.target_caught_up_at is not None and r.target_caught_up_at > r.request_time
        assert r.disagreement_ms > 0 and r.kept_epoch == r.prior_epoch
    # epoch regressions without a feature change outside the windows outnumber the ones that matter
    assert got.where("epoch_regressed and not content_regressed").count() > len(content)
