"""The what-if checker's driver-side engine (:mod:`kraft_replay.outcomes.feature_check`) equals the gold
validation (:func:`kraft_replay.outcomes.features.outcomes_at`: ``check_updates`` + ``downgrade_losses``,
seeds 004 and 001, facts §6, §7) request by request: a grid of ~100 requests (every metadata.version level
region, every upgrade type and an invalid one, each defined feature at defined and undefined levels, an
unknown feature, multi-update requests) at every offset where an image changes, and its metadata.version
requests again under a downgrade-capable policy, on

- a hand-built cluster that holds something for every loss rule, quorum changes (LEADER_CHANGE, then
  KRAFT_VOTERS), fenced / unregistered brokers and a ZK migration — read from Arrow tables;
- the replayed ``tiny`` cluster, read from the lake by :func:`read_image` (delta-rs, pruned scans).

Also: the loss rules' two evaluators (Spark columns, Arrow arrays) agree row by row.
"""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kraft_replay.ingest.schemas import CONTROL_SCHEMA
from kraft_replay.ingest.tables import arrow_df
from kraft_replay.lake.reader import LakeReader
from kraft_replay.outcomes.feature_check import Update, check_request, image_at, read_image
from kraft_replay.outcomes.features import FeaturesPolicy, outcomes_at
from kraft_replay.replay.losses import LOSS_DOMAINS, LOSSES, MIGRATING_DIR
from kraft_replay.replay.schemas import silver_schema

C = "c1"
MV = "metadata.version"
T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
CHECK_COLUMNS = ["metadata_version_level", "current_level", "active_controller", "failed_check",
                 "feature_error_message", "skipped_checks", "error_code", "error_message", "outcome", "kip1155_outcome",
                 "kip1155_failed_check", "kip1155_error_message", "loss_count"]
POLICIES = [FeaturesPolicy(), FeaturesPolicy(downgrade_capable_level=21)]


def _requests() -> list[list[Update]]:
    """The grid: one UpdateFeatures request per entry."""
    out = [[Update(MV, lvl, code)] for lvl in (-1, 0, 1, 3, 4, 5, 7, 8, 10, 11, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
                                                24, 35) for code in (1, 2, 3)]
    out += [[Update(MV, 15, 0)], [Update(MV, 23, 4)], [Update(MV, 17, 3, validate_only=False)]]
    out += [[Update(f, lvl, code)] for f, lvl in (
        ("group.version", 0), ("group.version", 1), ("group.version", 2), ("kraft.version", 0), ("kraft.version", 1),
        ("transaction.version", 1), ("transaction.version", 2), ("eligible.leader.replicas.version", 1),
        ("test.feature.version", 3), ("no.such.feature", 1)) for code in (1, 2, 3)]
    out += [
        [Update(MV, 3, 2), Update("group.version", 1, 1)],
        [Update(MV, 20, 1), Update("kraft.version", 1, 1)],
        [Update(MV, 15, 3), Update("transaction.version", 0, 3)],
        [Update("kraft.version", 1, 1), Update("group.version", 1, 1)],
        [Update(MV, 16, 2), Update("group.version", 0, 2)],
        [Update(MV, 18, 2), Update("transaction.version", 2, 1)],
    ]
    return out


_REQ_SCHEMA = T.StructType([
    T.StructField("cluster_id", T.StringType()), T.StructField("request_id", T.LongType()),
    T.StructField("request_time", T.TimestampType()), T.StructField("client_id", T.StringType()),
    T.StructField("request_version", T.IntegerType()), T.StructField("feature", T.StringType()),
    T.StructField("max_version_level", T.IntegerType()), T.StructField("upgrade_type", T.StringType()),
    T.StructField("upgrade_type_code", T.IntegerType()), T.StructField("validate_only", T.BooleanType()),
    T.StructField("_rid", T.LongType()), T.StructField("as_of_offset", T.LongType())])


def _gold(spark, cluster_id, offsets, requests, frames, policy):
    """``outcomes_at`` over every (offset, request): ``({(offset, request index, feature): row}, {(offset,
    request index): [loss]})``."""
    rows, rid = [], itertools.count()
    for o, (i, req) in itertools.product(offsets, enumerate(requests)):
        for u in req:
            rows.append((cluster_id, o * 1000 + i, None, "grid", 1, u.feature, u.level, None, u.upgrade_type_code,
                         u.validate_only, next(rid), o))
    req_df = spark.createDataFrame(rows, _REQ_SCHEMA)
    out, lost = outcomes_at(req_df, frames["features"], frames["brokers"], frames["controllers"],
                            frames.get("metadata_control"), {d: frames[d] for d in LOSS_DOMAINS if d in frames},
                            None, policy)
    got = {}
    for r in out.select("request_id", "feature", *CHECK_COLUMNS).collect():
        got[(r["request_id"] // 1000, r["request_id"] % 1000, r["feature"])] = {c: r[c] for c in CHECK_COLUMNS}
    losses: dict = {}
    for r in lost.orderBy("request_id", "_dorder", "entity", "field").collect():
        losses.setdefault((r["request_id"] // 1000, r["request_id"] % 1000), []).append(
            (r["domain"], r["entity"], r["field"], r["what"], r["target_level"]))
    return got, losses


def _assert_equal(image_of, spark, cluster_id, offsets, frames, grid=None, policies=POLICIES
                  ) -> list[tuple[dict, list[dict]]]:
    """The driver engine on ``image_of(offset)`` equals the gold validation: ``grid`` (default: the full
    one) under the default policy, its metadata.version requests (the only ones the policy changes) under
    a downgrade-capable level; returns every (verdicts, losses) compared."""
    seen = []
    for policy in policies:
        requests = grid or _requests()
        if policy.downgrade_capable_level is not None:
            requests = [r for r in requests if any(u.feature == MV for u in r)]
        gold, gold_losses = _gold(spark, cluster_id, offsets, requests, frames, policy)
        for o in offsets:
            img = image_of(o)
            for i, req in enumerate(requests):
                got, lost = check_request(img, req, policy)
                for u, g in zip(req, got, strict=True):
                    assert {c: g[c] for c in CHECK_COLUMNS} == gold[(o, i, u.feature)], (o, req, policy)
                assert [(x["domain"], x["entity"], x["field"], x["what"], x["target_level"]) for x in lost] \
                    == gold_losses.get((o, i), []), (o, req)
                seen.append((got, lost))
    return seen


# -- a hand-built cluster with something for every rule --------------------------------------------------------

def _tile(rows: list[dict], *key: str) -> list[dict]:
    out, by = [], {}
    for r in rows:
        by.setdefault(tuple(r[k] for k in key), []).append(r)
    for vs in by.values():
        vs.sort(key=lambda r: r["valid_from_offset"])
        for a, b in zip(vs, vs[1:] + [None], strict=True):
            a.setdefault("deleted", False)
            a["valid_to_offset"] = b["valid_from_offset"] if b else None
            a["valid_from_time"] = T0 + timedelta(seconds=a["valid_from_offset"])
            a["record_offset"] = a["valid_from_offset"]
            out.append({"cluster_id": C, **a})
    return out


def _r(**kw) -> list[dict]:
    return [{"name": n.replace("_", "."), "min_supported_version": lo, "max_supported_version": hi}
            for n, (lo, hi) in sorted(kw.items())]


def _versions() -> dict[str, list[dict]]:
    full = dict(metadata_version=(1, 23), group_version=(0, 1), kraft_version=(0, 1), transaction_version=(0, 2))
    return {
        "features": _tile([
            {"name": MV, "feature_level": 7, "valid_from_offset": 1},
            {"name": MV, "feature_level": 17, "valid_from_offset": 20},
            {"name": MV, "feature_level": 23, "valid_from_offset": 40},
            {"name": MV, "feature_level": 19, "valid_from_offset": 60},
            {"name": "group.version", "feature_level": 1, "valid_from_offset": 25},
            {"name": "kraft.version", "feature_level": 1, "valid_from_offset": 45},
            {"name": "transaction.version", "feature_level": 2, "valid_from_offset": 46},
            {"name": "transaction.version", "deleted": True, "valid_from_offset": 70},
        ], "name"),
        "brokers": _tile([
            {"broker_id": 1, "features": _r(metadata_version=(1, 17)), "fenced": False, "is_migrating_zk_broker": True,
             "in_controlled_shutdown": False, "log_dirs": [], "valid_from_offset": 2},
            {"broker_id": 1, "features": _r(**full), "fenced": False, "in_controlled_shutdown": True,
             "log_dirs": ["dA"], "valid_from_offset": 22},
            {"broker_id": 1, "features": _r(**full), "fenced": False, "in_controlled_shutdown": False,
             "log_dirs": ["dA"], "valid_from_offset": 30},
            {"broker_id": 2, "features": _r(metadata_version=(1, 21), group_version=(0, 1)), "fenced": True,
             "log_dirs": [], "valid_from_offset": 3},
            {"broker_id": 2, "features": _r(**full), "fenced": False, "log_dirs": None, "valid_from_offset": 42},
            {"broker_id": 3, "features": _r(metadata_version=(4, 23), group_version=(1, 1)), "fenced": False,
             "valid_from_offset": 5},
            {"broker_id": 3, "deleted": True, "valid_from_offset": 65},
            {"broker_id": 4, "features": _r(metadata_version=(1, 20)), "fenced": True, "valid_from_offset": 56},
            {"broker_id": 4, "deleted": True, "valid_from_offset": 59},
        ], "broker_id"),
        "controllers": _tile([
            {"controller_id": 3000, "features": _r(**full), "valid_from_offset": 16},
            {"controller_id": 3001, "features": _r(**full), "valid_from_offset": 16},
            {"controller_id": 3002, "features": _r(metadata_version=(1, 22)), "valid_from_offset": 50},
        ], "controller_id"),
        "partitions": _tile([
            {"topic_id": "T0", "partition_id": 0, "directories": [MIGRATING_DIR, "dirX000000000000000000"],
             "eligible_leader_replicas": [], "last_known_elr": [], "valid_from_offset": 21},
            {"topic_id": "T0", "partition_id": 0, "directories": [MIGRATING_DIR, "dirX000000000000000000"],
             "eligible_leader_replicas": [2], "last_known_elr": [], "valid_from_offset": 41},
            {"topic_id": "T0", "partition_id": 0, "directories": [MIGRATING_DIR, "dirX000000000000000000"],
             "eligible_leader_replicas": [], "last_known_elr": [], "valid_from_offset": 47},
            {"topic_id": "T0", "partition_id": 1, "directories": [MIGRATING_DIR, None], "valid_from_offset": 21},
            {"topic_id": "T1", "partition_id": 0, "directories": None, "last_known_elr": [1], "valid_from_offset": 43},
            {"topic_id": "T1", "partition_id": 0, "deleted": True, "valid_from_offset": 47},
        ], "topic_id", "partition_id"),
        "scram_credentials": _tile([{"name": "alice", "mechanism": 1, "iterations": 4096, "valid_from_offset": 12}],
                                   "name", "mechanism"),
        "delegation_tokens": _tile([{"token_id": "tok1", "owner": "User:bob", "valid_from_offset": 14}], "token_id"),
        "zk_migration_state": _tile([
            {"zk_migration_state": 2, "zk_migration_state_name": "MIGRATION", "valid_from_offset": 2},
            {"zk_migration_state": 3, "zk_migration_state_name": "POST_MIGRATION", "valid_from_offset": 10}]),
    }


def _control() -> pa.Table:
    def voters(*ids):
        return [{"voter_id": v, "voter_directory_id": None} for v in ids]
    base = {"cluster_id": C, "batch_leader_epoch": 1, "key_version": 0, "source_kind": "log"}
    rows = [
        base | {"offset": 0, "control_type": "LEADER_CHANGE", "control_type_id": 2,
                "leader_change": {"version": 0, "leader_id": 3000, "voters": voters(3002, 3000, 3001),
                                  "granting_voters": []}},
        base | {"offset": 44, "control_type": "KRAFT_VOTERS", "control_type_id": 6,
                "kraft_voters": {"version": 0, "voters": [{"voter_id": v, "voter_directory_id": None, "endpoints": [],
                                                           "kraft_version_feature": None} for v in (3001, 3000)]}},
        base | {"offset": 55, "control_type": "LEADER_CHANGE", "control_type_id": 2,
                "leader_change": {"version": 0, "leader_id": 3001, "voters": voters(3000), "granting_voters": []}},
        base | {"offset": 58, "control_type": "LEADER_CHANGE", "control_type_id": 2, "source_kind": "snapshot",
                "leader_change": {"version": 0, "leader_id": 9, "voters": voters(9), "granting_voters": []}},
        base | {"offset": 62, "control_type": "LEADER_CHANGE", "control_type_id": 2,
                "leader_change": {"version": 0, "leader_id": 4000, "voters": voters(3000), "granting_voters": []}},
    ]
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in CONTROL_SCHEMA} for r in rows], schema=CONTROL_SCHEMA)


def _arrow(name: str, rows: list[dict]) -> pa.Table:
    schema = silver_schema(name)
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)


@pytest.fixture(scope="module")
def hand_built(spark):
    arrow = {n: _arrow(n, rows) for n, rows in _versions().items()} | {"metadata_control": _control()}
    return arrow, {n: arrow_df(spark, t) for n, t in arrow.items()}


def test_equals_the_gold_validation_on_a_hand_built_cluster(spark, hand_built) -> None:
    arrow, frames = hand_built
    # every offset where the image changes in a way some check or loss rule sees
    offsets = [-1, 0, 1, 2, 3, 5, 10, 16, 20, 21, 22, 40, 42, 44, 45, 46, 47, 48, 50, 55, 56, 58, 59, 60, 62, 65, 70]
    seen = _assert_equal(lambda o: image_at(C, o, arrow), spark, C, offsets, frames)
    assert sum(len(got) for got, _ in seen) > 5_000
    # the grid reaches every verdict the rules give, and every loss rule
    verdicts = {(g["failed_check"], g["kip1155_failed_check"], g["outcome"], g["kip1155_outcome"])
                for got, _ in seen for g in got}
    lost_rules = {(x["domain"], x["field"]) for _, lost in seen for x in lost}
    checks = {v[0] for v in verdicts} | {v[1] for v in verdicts}
    assert checks >= {None, "UPGRADE_TYPE", "NEGATIVE_LEVEL", "LOCAL_CONTROLLER", "BROKER", "CONTROLLER", "DIRECTION",
                      "UNKNOWN_METADATA_VERSION", "ZK_MIGRATION", "METADATA_VERSION_FLOOR", "METADATA_CHANGED",
                      "UNKNOWN_FEATURE", "UNDEFINED_LEVEL", "DEPENDENCY", "DOWNGRADE_FLOOR", "DOWNGRADE_SUPPORT",
                      "FEATURE_DEPENDENCY", "LOSS"}, checks
    assert {v[2] for v in verdicts} >= {"BEFORE_LOG", "REJECTED", "VALIDATED", "ACCEPTED"}
    assert {v[3] for v in verdicts} >= {None, "REJECTED", "ACCEPTED", "ACCEPTED_WITH_LOSS"}
    assert lost_rules == {(x.domain, x.field) for x in LOSSES}


def test_equals_the_gold_validation_on_the_tiny_lake(spark, replayed_tiny) -> None:
    lake = replayed_tiny
    cid = lake.read("log_commit").first()["cluster_id"]
    names = ("features", "brokers", "controllers", "metadata_control", *LOSS_DOMAINS)
    frames = {n: lake.read(n) for n in dict.fromkeys(names) if lake.exists(n)}
    changes = set()
    for n in ("features", "brokers", "controllers", "zk_migration_state"):
        if n in frames:
            changes |= {r[0] for r in frames[n].where(F.col("cluster_id") == cid).select("valid_from_offset")
                        .distinct().collect()}
    changes |= {r[0] for r in frames["metadata_control"].where(
        F.col("control_type").isin("LEADER_CHANGE", "KRAFT_VOTERS")).select("offset").collect()}
    last = lake.read("log_commit").first()["last_offset"]
    offsets = sorted(x for x in changes | {last} if x is not None and x >= 0)
    if len(offsets) > 16:  # every change of metadata.version and a spread of the others
        mv = {r[0] for r in frames["features"].where(F.col("name") == MV).select("valid_from_offset").collect()}
        rest = sorted(set(offsets) - mv)
        offsets = sorted(mv | set(rest[:: max(1, len(rest) // 10)]) | {last})
    reader = LakeReader(lake.root)
    # the rules (and the policy) are the hand-built cluster's test; here the lake path: a third of the
    # grid and every multi-update request, under the default policy
    grid = _requests()
    grid = grid[::3] + [r for r in grid[1::3] + grid[2::3] if len(r) > 1]
    seen = _assert_equal(lambda o: read_image(reader, cid, o), spark, cid, offsets, frames, grid, POLICIES[:1])
    assert sum(len(got) for got, _ in seen) > 500 and len(offsets) >= 10
    assert {g["outcome"] for got, _ in seen for g in got} >= {"REJECTED", "VALIDATED"}
    assert any(lost for _, lost in seen)


def test_loss_rules_evaluate_alike_on_spark_and_arrow(spark) -> None:
    """Each rule of :data:`LOSSES`: ``holds`` / ``what_of`` (Spark) and ``holds_arrow`` / ``what_row``
    (Arrow) agree on random entities, nulls and the migrating placeholder included."""
    rnd = random.Random(7)
    pick = lambda *xs: rnd.choice(xs)  # noqa: E731
    rows = [{"directories": pick(None, [], [MIGRATING_DIR], [MIGRATING_DIR, None], ["d1", MIGRATING_DIR], [None]),
             "eligible_leader_replicas": pick(None, [], [1], [None]), "last_known_elr": pick(None, [], [2, 3]),
             "in_controlled_shutdown": pick(None, True, False), "is_migrating_zk_broker": pick(None, True, False),
             "log_dirs": pick(None, [], ["a"]), "zk_migration_state_name": pick(None, "NONE", "MIGRATION"),
             "name": pick(MV, "group.version", None)} for _ in range(200)]
    schema = pa.schema([("directories", pa.list_(pa.string())), ("eligible_leader_replicas", pa.list_(pa.int32())),
                        ("last_known_elr", pa.list_(pa.int32())), ("in_controlled_shutdown", pa.bool_()),
                        ("is_migrating_zk_broker", pa.bool_()), ("log_dirs", pa.list_(pa.string())),
                        ("zk_migration_state_name", pa.string()), ("name", pa.string())])
    table = pa.Table.from_pylist(rows, schema=schema)
    df = arrow_df(spark, table)
    for x in LOSSES:
        spark_rows = df.select(F.coalesce(x.holds(), F.lit(False)).alias("h"), x.what_of().alias("w")).collect()
        held = x.holds_arrow(table)
        assert [r["h"] for r in spark_rows] == held.tolist(), x
        assert 0 < held.sum() or x.test == "always"
        assert [r["w"] for r, h in zip(spark_rows, held, strict=True) if h] == [
            x.what_row(r) for r, h in zip(rows, held, strict=True) if h], x
