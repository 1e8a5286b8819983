"""Feature levels (gold; seeds 004, 001, facts §5.4, §6, §7): ``feature_transitions``,
``feature_protection_violations``, ``feature_update_outcomes`` / ``downgrade_losses`` on one hand-built
cluster, concrete expected rows compared with chispa.

Cluster ``c1`` (T0 = 2024-05-01 10:00 UTC), batch k = offsets [10k, 10k + 9] appended at T0 + k s:
- metadata.version 11 (3.5-IV2) from offset 1, 21 (3.9-IV0) from 31, 20 (3.8-IV0) from 41;
  group.version 1 from 33, removed (tombstone) at 45.
- broker 1: [1, 14] for metadata.version from 2, re-registered [1, 21] with group.version [0, 1] at 35;
  broker 2: [1, 21] from 3, unregistered at 50.
- controllers 3000, 3001 registered at 32 with metadata.version [1, 21], 3002 at 47 with [1, 20]; the
  quorum's voters are 3000, 3001 and 3002 (LEADER_CHANGE at 0, leader 3000).
- partition T0-0 with a real directory from 34.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from kraft_replay.generate.requests import FEATURE_UPDATE_REQUESTS_SCHEMA
from kraft_replay.ingest.schemas import CONTROL_SCHEMA
from kraft_replay.ingest.tables import arrow_df
from kraft_replay.outcomes.features import (
    FeaturesPolicy,
    feature_protection_violations,
    feature_transitions,
    feature_update_outcomes,
)
from kraft_replay.replay.schemas import silver_schema

C = "c1"
T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
MV = "metadata.version"
DIR = "AAAAAAAAAAAAAAAAAAAAAA"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _tile(rows: list[dict], key: str) -> list[dict]:
    """Versions of one entity tile the offsets: each valid_to is the next version's valid_from."""
    out = []
    by: dict = {}
    for r in rows:
        by.setdefault(r[key], []).append(r)
    for vs in by.values():
        vs.sort(key=lambda r: r["valid_from_offset"])
        for a, b in zip(vs, vs[1:] + [None]):
            a.setdefault("deleted", False)
            a["valid_to_offset"] = b["valid_from_offset"] if b else None
            a["valid_from_time"] = at(a["valid_from_offset"] // 10)
            a["valid_to_time"] = at(b["valid_from_offset"] // 10) if b else None
            a["record_offset"] = a["valid_from_offset"]
            out.append({"cluster_id": C, **a})
    return out


def _silver(spark, name: str, rows: list[dict]):
    schema = silver_schema(name)
    return arrow_df(spark, pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema))


def _ranges(**kw) -> list[dict]:
    return [{"name": n.replace("_", "."), "min_supported_version": lo, "max_supported_version": hi}
            for n, (lo, hi) in sorted(kw.items())]


@pytest.fixture(scope="module")
def cluster(spark):
    feats = _tile([
        {"name": MV, "feature_level": 11, "valid_from_offset": 1},
        {"name": MV, "feature_level": 21, "valid_from_offset": 31},
        {"name": MV, "feature_level": 20, "valid_from_offset": 41},
        {"name": "group.version", "feature_level": 1, "valid_from_offset": 33},
        {"name": "group.version", "deleted": True, "valid_from_offset": 45},
    ], "name")
    brokers = _tile([
        {"broker_id": 1, "broker_epoch": 2, "features": _ranges(metadata_version=(1, 14)), "fenced": False,
         "in_controlled_shutdown": False, "log_dirs": [], "valid_from_offset": 2},
        {"broker_id": 1, "broker_epoch": 35, "features": _ranges(metadata_version=(1, 21), group_version=(0, 1)),
         "fenced": False, "in_controlled_shutdown": False, "log_dirs": ["dirA"], "valid_from_offset": 35},
        {"broker_id": 2, "broker_epoch": 3, "features": _ranges(metadata_version=(1, 21)), "fenced": True,
         "in_controlled_shutdown": False, "log_dirs": [], "valid_from_offset": 3},
        {"broker_id": 2, "deleted": True, "valid_from_offset": 50},
    ], "broker_id")
    ctrls = _tile([{"controller_id": c, "features": _ranges(metadata_version=(1, hi)), "valid_from_offset": o}
                   for c, hi, o in ((3000, 21, 32), (3001, 21, 32), (3002, 20, 47))], "controller_id")
    parts = _tile([{"topic_id": "T0", "partition_id": 0, "replicas": [1], "isr": [1], "leader": 1, "leader_epoch": 0,
                    "partition_epoch": 0, "directories": ["dirUuidNotMigrating000"], "eligible_leader_replicas": [],
                    "last_known_elr": [], "valid_from_offset": 34}], "partition_id")
    batches = _silver(spark, "log_batches", [
        {"cluster_id": C, "batch_base_offset": 10 * k, "batch_last_offset": 10 * k + 9, "batch_leader_epoch": 1,
         "append_time": at(k), "is_control": False, "records": 10, "certainly_committed": True} for k in range(6)])
    voters = [{"voter_id": v, "voter_directory_id": None} for v in (3000, 3001, 3002)]
    control = arrow_df(spark, pa.Table.from_pylist([{
        "cluster_id": C, "offset": 0, "batch_base_offset": 0, "batch_last_offset": 0, "batch_leader_epoch": 1,
        "append_time": at(0), "control_type": "LEADER_CHANGE", "control_type_id": 2, "key_version": 0,
        "leader_change": {"version": 0, "leader_id": 3000, "voters": voters, "granting_voters": voters},
        "source_kind": "log"}], schema=CONTROL_SCHEMA))
    f, b, c, p = (_silver(spark, "features", feats), _silver(spark, "brokers", brokers),
                  _silver(spark, "controllers", ctrls), _silver(spark, "partitions", parts))
    return {"features": f, "brokers": b, "controllers": c, "partitions": p, "log_batches": batches,
            "metadata_control": control}


def test_transitions_kinds_and_node_support(spark, cluster) -> None:
    got = feature_transitions(cluster["features"], cluster["brokers"], cluster["controllers"]).select(
        "feature", "offset", "from_level", "to_level", "to_version", "kind", "metadata_changed", "unsupported_nodes")
    exp = spark.createDataFrame([
        ("group.version", 33, 0, 1, None, "UPGRADE", None, ["broker 1 [0-0]", "broker 2 [0-0]", "controller 3000 [0-0]",
                                                            "controller 3001 [0-0]"]),
        ("group.version", 45, 1, 0, None, "REMOVAL", None, []),
        (MV, 1, None, 11, "3.5-IV2", "INITIAL", None, []),
        (MV, 31, 11, 21, "3.9-IV0", "UPGRADE", True, ["broker 1 [1-14]"]),
        (MV, 41, 21, 20, "3.8-IV0", "DOWNGRADE", False, []),
    ], got.schema)
    assert_df_equality(got, exp, ignore_row_order=True, ignore_nullable=True)


def test_protection_violations_are_merged_intervals(spark, cluster) -> None:
    got = feature_protection_violations(cluster["features"], cluster["brokers"]).select(
        "broker_id", "feature", "finalized_level", "min_supported", "max_supported", "listed", "from_offset", "to_offset")
    # broker 1 serves metadata.version 21 with [1, 14] from 31 until it re-registers at 35; group.version 1
    # is finalized at 33 while broker 1 and 2 do not list it ([0, 0]); broker 1 lists it from 35, broker 2
    # until it is removed at 45.
    exp = spark.createDataFrame([
        (1, MV, 21, 1, 14, True, 31, 35),
        (1, "group.version", 1, 0, 0, False, 33, 35),
        (2, "group.version", 1, 0, 0, False, 33, 45),
    ], got.schema)
    assert_df_equality(got, exp, ignore_row_order=True, ignore_nullable=True)


def _requests(spark, rows: list[tuple]):
    full = [{"cluster_id": C, "request_id": rid, "request_time": at(t), "client_id": "admin", "request_version": 1,
             "feature": f, "max_version_level": lvl, "upgrade_type": ut, "upgrade_type_code": code,
             "validate_only": vo} for rid, t, f, lvl, ut, code, vo in rows]
    return spark.createDataFrame(full, FEATURE_UPDATE_REQUESTS_SCHEMA)


def test_update_checks_in_the_controllers_order(spark, cluster) -> None:
    k = cluster
    req = _requests(spark, [
        (0, 0, MV, 21, "UPGRADE", 1, False),          # before the first batch: BEFORE_LOG
        (1, 2.5, MV, 21, "UPGRADE", 1, False),        # image at 29: broker 1 [1-14]; controllers not registered
        (2, 2.5, MV, 9, "UPGRADE", 1, False),         # downgrade without a downgrade type
        (3, 2.5, MV, 12, "SAFE_DOWNGRADE", 4, False),  # unknown upgrade type code
        (4, 3.5, MV, 22, "UPGRADE", 1, False),        # image at 39: the local controller 3000 is [1-21]
        (5, 3.5, MV, 21, "UPGRADE", 1, True),         # MV 21 >= 3.7-IV0: voter 3002 has not registered yet
        (6, 2.5, "no.such.feature", 0, "UPGRADE", 1, False),
        (7, 4.5, MV, 16, "SAFE_DOWNGRADE", 2, False),  # image at 49: 20 -> 16 crosses 17 (metadata changed)
        (8, 4.5, MV, 20, "UPGRADE", 1, True),         # unchanged level, validate-only: accepted, nothing written
    ])
    out, lost = feature_update_outcomes(req, k["features"], k["brokers"], k["controllers"], k["log_batches"],
                                        k["metadata_control"], {"partitions": k["partitions"], "brokers": k["brokers"],
                                                                "controllers": k["controllers"]})
    got = out.select("request_id", "as_of_offset", "current_level", "active_controller", "failed_check",
                     "feature_error_message", "error_code", "outcome", "skipped_checks")
    skipped = ["local controller 3000 not registered"]
    exp = spark.createDataFrame([
        (0, -1, None, None, None, None, None, "BEFORE_LOG", None),
        (1, 29, 11, 3000, "BROKER", "Invalid update version 21 for feature metadata.version. Broker 1 only supports "
         "versions 1-14", 95, "REJECTED", skipped),
        (2, 29, 11, 3000, "DIRECTION", "Invalid update version 9 for feature metadata.version. Can't downgrade the "
         "version of this feature without setting the upgrade type to either safe or unsafe downgrade.", 95, "REJECTED",
         skipped),
        (3, 29, 11, 3000, "UPGRADE_TYPE", "Invalid update version 12 for feature metadata.version. The controller does "
         "not support the given upgrade type.", 95, "REJECTED", []),  # failed before the support checks
        (4, 39, 21, 3000, "LOCAL_CONTROLLER", "Invalid update version 22 for feature metadata.version. Local controller "
         "3000 only supports versions 1-21", 95, "REJECTED", []),
        (5, 39, 21, 3000, "CONTROLLER", "Invalid update version 21 for feature metadata.version. controller 3002 has not "
         "registered, and may not support this feature", 95, "REJECTED", []),
        (6, 29, 0, 3000, "UNKNOWN_FEATURE", "Invalid update version 0 for feature no.such.feature. Feature "
         "no.such.feature not found.", 95, "REJECTED", skipped),
        (7, 49, 20, 3000, "METADATA_CHANGED", "Invalid metadata.version 16. Refusing to perform the requested downgrade "
         "because it might delete metadata information.", 95, "REJECTED", []),
        (8, 49, 20, 3000, None, None, 0, "VALIDATED", []),
    ], got.schema)
    assert_df_equality(got, exp, ignore_row_order=True, ignore_nullable=True)
    msg = out.where("request_id = 7").select("error_message").first()[0]
    assert msg == ("The update failed for all features since the following feature had an error: Invalid "
                   "metadata.version 16. Refusing to perform the requested downgrade because it might delete metadata "
                   "information.")
    # KIP-1155: 20 -> 16 passes the 3.7-IV0 floor, but loses broker 1's log dirs and the partition's directory
    kip = out.where("request_id = 7").select("kip1155_outcome", "kip1155_failed_check", "loss_count").first()
    assert tuple(kip) == ("REJECTED", "LOSS", 2)
    assert_df_equality(
        lost.select("request_id", "target_level", "domain", "entity", "field"),
        spark.createDataFrame([(7, 16, "partitions", '{"partition_id":0,"topic_id":"T0"}', "directories"),
                               (7, 16, "brokers", '{"broker_id":1}', "log_dirs")],
                              "request_id long, target_level int, domain string, entity string, field string"),
        ignore_row_order=True, ignore_nullable=True)


def test_request_fails_as_a_whole_and_kip1155_checks_downgrade_support(spark, cluster) -> None:
    k = cluster
    # request 10 at 4.5 s (image at 49, MV 20): the local controller does not list kraft.version; the
    # request's metadata.version update fails on its own too (voter 3002 is [1-20]): the request's error
    # is the first failing update in feature-name order, metadata.version last.
    req = _requests(spark, [(10, 4.5, "kraft.version", 1, "UPGRADE", 1, False), (10, 4.5, MV, 21, "UPGRADE", 1, False),
                            (11, 4.5, MV, 15, "UNSAFE_DOWNGRADE", 3, False)])
    out, _ = feature_update_outcomes(req, k["features"], k["brokers"], k["controllers"], k["log_batches"],
                                     k["metadata_control"], {"controllers": k["controllers"]},
                                     policy=FeaturesPolicy(downgrade_capable_level=21))
    rows = {(r["request_id"], r["feature"]): r for r in out.collect()}
    kr, mv = rows[(10, "kraft.version")], rows[(10, MV)]
    assert kr["failed_check"] == "LOCAL_CONTROLLER" and mv["failed_check"] == "CONTROLLER"
    assert mv["feature_error_message"].endswith("Controller 3002 only supports versions 1-20")
    assert kr["error_message"] == mv["error_message"] == (
        "The update failed for all features since the following feature had an error: Invalid update version 1 for "
        "feature kraft.version. Local controller 3000 does not support this feature.")
    assert kr["outcome"] == mv["outcome"] == "REJECTED" and kr["kip1155_outcome"] is None
    # 20 -> 15 (UNSAFE): today refused (17 changed metadata); KIP-1155 with downgrade_capable_level 21:
    # controller 3002's metadata.version max is 20
    d = rows[(11, MV)]
    assert (d["failed_check"], d["kip1155_failed_check"], d["kip1155_outcome"]) == (
        "METADATA_CHANGED", "DOWNGRADE_SUPPORT", "REJECTED")
    assert d["kip1155_error_message"].endswith("Invalid metadata.version 15. Controller 3002 does not support "
                                               "metadata.version downgrade")
    assert d["loss_count"] == 0
