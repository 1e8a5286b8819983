"""``kraft-replay features check --lake DIR --cluster-id C [--as-of OFFSET|TIME] [--rule kafka|kip1155]
[--policy FILE] [--json] SPEC...``: the what-if checker an operator runs before ``kafka-features.sh``.

Each SPEC is ``feature=level[:UPGRADE|SAFE_DOWNGRADE|UNSAFE_DOWNGRADE]`` (metadata.version also takes a
version such as ``3.8-IV0``; the type defaults to UPGRADE, or SAFE_DOWNGRADE below the current level).
All SPECs form one UpdateFeatures request, validated exactly as ``feature_update_outcomes`` validates a
logged request (:func:`kraft_replay.outcomes.features.outcomes_at`: facts §7, seeds 004 and 001) against
the image as of the offset (default: the log end). It prints today's verdict and KIP-1155's, the error
Kafka would return, the nodes that block it and the loss report of a metadata.version downgrade.
Exit 0 when the chosen rule (``--rule``, default ``kafka``) accepts, 1 when it refuses, 2 for a malformed
SPEC, an unknown cluster or a lake without replay.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

EPILOG = """examples:
  kraft-replay features check --lake /tmp/lake --cluster-id C metadata.version=3.8-IV0:SAFE_DOWNGRADE
  kraft-replay features check --lake /tmp/lake --cluster-id C --as-of 2025-03-01T00:05:00Z metadata.version=21
  kraft-replay features check --lake /tmp/lake --cluster-id C --rule kip1155 --json metadata.version=3.7-IV0:UNSAFE_DOWNGRADE
  kraft-replay features check --lake /tmp/lake --cluster-id C group.version=1 kraft.version=1
exit: 0 the update would be accepted, 1 refused, 2 bad input
"""

_TYPES = {"UPGRADE": 1, "SAFE_DOWNGRADE": 2, "UNSAFE_DOWNGRADE": 3}
_SPEC = re.compile(r"^([A-Za-z0-9_.\-]+)=([^:]+)(?::([A-Za-z_]+))?$")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "features", help="feature levels: check an update against any historical image (what-if)",
        description="Feature levels and metadata.version (seeds 004, 001; facts §6, §7).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="features_command", metavar="ACTION")
    sub.required = True
    c = sub.add_parser(
        "check", help="would Kafka accept this UpdateFeatures request on the image as of an offset or time?",
        description="Validate one UpdateFeatures request (all SPECs together) exactly as the controller does (facts "
                    "§7.1-§7.3), and as KIP-1155 proposes for metadata.version downgrades (seed 001), against the image "
                    "as of --as-of (default: the log end). Exit 0 accepted, 1 refused, 2 bad input.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("specs", nargs="+", metavar="SPEC",
                   help="feature=level[:UPGRADE|SAFE_DOWNGRADE|UNSAFE_DOWNGRADE], e.g. metadata.version=3.8-IV0:SAFE_DOWNGRADE")
    c.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    c.add_argument("--cluster-id", required=True, metavar="C", help="the cluster")
    c.add_argument("--as-of", default=None, metavar="OFFSET|TIME",
                   help="the image as of this offset, or of this ISO-8601 time (default: the log end)")
    c.add_argument("--rule", choices=("kafka", "kip1155"), default="kafka",
                   help="which verdict sets the exit code: today's Kafka (default) or KIP-1155's (seed 001)")
    c.add_argument("--policy", default=None, metavar="FILE",
                   help="feature policy (YAML: downgrade_capable_level; default conf/policies/features.yaml)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
    c.set_defaults(func=run)
    from kraft_replay.serve.cli import _add_global_options

    _add_global_options(c, top=False)  # --profile / --backend also after the action, where users type them


def _err(msg: str) -> Exception:
    from kraft_replay.serve.cli import UserError

    return UserError(msg)


def parse_spec(text: str) -> tuple[str, int, str | None]:
    """``feature=level[:TYPE]`` -> (feature, level, type or None); a one-line user error naming the bad part."""
    from kraft_replay.replay.features import METADATA_VERSION, MV_NAMES

    m = _SPEC.match(text.strip())
    if not m:
        raise _err(f"spec {text!r}: expected feature=level[:UPGRADE|SAFE_DOWNGRADE|UNSAFE_DOWNGRADE]")
    name, level_text, utype = m.group(1), m.group(2).strip(), m.group(3)
    if utype is not None and utype.upper() not in _TYPES:
        raise _err(f"spec {text!r}: upgrade type {utype!r} is not one of {', '.join(_TYPES)}")
    if re.fullmatch(r"-?\d+", level_text):
        level = int(level_text)
        if not -32768 <= level <= 32767:
            raise _err(f"spec {text!r}: level {level} is not an int16")
    elif name == METADATA_VERSION:
        by_name = {v: k for k, v in MV_NAMES.items()}
        if level_text not in by_name:
            raise _err(f"spec {text!r}: {level_text!r} is not a metadata.version (e.g. 3.8-IV0, or a level 1-{max(MV_NAMES)})")
        level = by_name[level_text]
    else:
        raise _err(f"spec {text!r}: level {level_text!r} is not a number")
    return name, level, utype.upper() if utype else None


def _as_of(lake, cluster_id: str, text: str | None) -> int:  # noqa: ANN001 - a Lake
    from kraft_replay.replay.images import resolve_offset

    if text is None:
        return resolve_offset(lake, cluster_id)
    if re.fullmatch(r"-?\d+", text.strip()):
        return resolve_offset(lake, cluster_id, offset=int(text))
    from kraft_replay.serve.cmd_image import parse_time

    return resolve_offset(lake, cluster_id, time=parse_time(text))


def _image_slices(spark, lake, cluster_id: str, offset: int) -> tuple[dict, dict]:  # noqa: ANN001
    """What the check reads, as ``(Arrow tables, small DataFrames of them)``: the versions in force at
    ``offset`` of ``features``, ``brokers``, ``controllers`` and the lossy check's domains (of
    ``partitions`` only the columns the check reads), and the quorum's LEADER_CHANGE / KRAFT_VOTERS
    control records up to ``offset`` — each read on the driver (:meth:`Lake.read_arrow`: the cluster's
    files, row groups pruned by their offset statistics), so a check costs a few small Spark jobs however
    long the log. The validation itself is the gold tables' (``outcomes_at``)."""
    import pyarrow.compute as pc
    from pyspark.sql import types as T

    from kraft_replay.replay.losses import LOSS_DOMAINS, LOSS_KEYS, loss_columns

    where = [("cluster_id", "=", cluster_id)]
    live = (pc.field("valid_from_offset") <= offset) & (
        pc.field("valid_to_offset").is_null() | (pc.field("valid_to_offset") > offset))
    quorum = ((pc.field("source_kind") == "log") & pc.field("control_type").isin(["LEADER_CHANGE", "KRAFT_VOTERS"])
              & (pc.field("offset") <= offset))
    narrow = {"partitions": ["cluster_id", *LOSS_KEYS["partitions"], *loss_columns("partitions"), "valid_from_offset",
                             "valid_to_offset", "deleted"]}
    arrow, frames = {}, {}
    for t in (*dict.fromkeys(("features", "brokers", "controllers", *LOSS_DOMAINS)), "metadata_control"):
        if not lake.exists(t):
            continue
        cols = narrow.get(t)
        schema = lake.schema(t)
        if cols is not None:
            schema = T.StructType([schema[c] for c in cols])
        arrow[t] = lake.read_arrow(t, columns=cols, partitions=where, filter=quorum if t == "metadata_control" else live)
        # an empty Arrow table has no chunks, which Spark's Arrow path cannot take
        frames[t] = spark.createDataFrame(arrow[t] if arrow[t].num_rows else [], schema=schema)
    return arrow, frames


def check(spark, lake, cluster_id: str, specs: list[tuple[str, int, str | None]], offset: int,  # noqa: ANN001
          policy=None) -> dict[str, Any]:  # noqa: ANN001
    """The what-if verdict of one request of ``specs`` on the image of ``cluster_id`` as of ``offset``:
    a JSON-ready dict (per-update rows of ``feature_update_outcomes``, the blocking nodes, the loss report)."""
    import datetime as dt

    from pyspark.sql import types as T

    from kraft_replay.outcomes.features import outcomes_at
    from kraft_replay.replay.features import METADATA_VERSION, MV_NAMES
    from kraft_replay.replay.losses import LOSS_DOMAINS

    arrow, tables = _image_slices(spark, lake, cluster_id, offset)
    live = lambda t: [r for r in arrow[t].to_pylist() if not r["deleted"]]  # noqa: E731 - in force at the offset
    levels = {r["name"]: int(r["feature_level"]) for r in live("features")}
    mv = levels.get(METADATA_VERSION, 1)
    rows = []
    for i, (name, level, utype) in enumerate(specs):
        cur = mv if name == METADATA_VERSION else levels.get(name, 0)
        utype = utype or ("SAFE_DOWNGRADE" if level < cur else "UPGRADE")
        rows.append((cluster_id, 0, None, "what-if", 1, name, level, utype, _TYPES[utype], True, i, offset))
    schema = T.StructType([
        T.StructField("cluster_id", T.StringType()), T.StructField("request_id", T.LongType()),
        T.StructField("request_time", T.TimestampType()), T.StructField("client_id", T.StringType()),
        T.StructField("request_version", T.IntegerType()), T.StructField("feature", T.StringType()),
        T.StructField("max_version_level", T.IntegerType()), T.StructField("upgrade_type", T.StringType()),
        T.StructField("upgrade_type_code", T.IntegerType()), T.StructField("validate_only", T.BooleanType()),
        T.StructField("_rid", T.LongType()), T.StructField("as_of_offset", T.LongType())])
    req = spark.createDataFrame(rows, schema)
    domains = {d: tables[d] for d in LOSS_DOMAINS if d in tables}
    out, lost = outcomes_at(req, tables["features"], tables["brokers"], tables["controllers"], tables.get("metadata_control"),
                            domains, None, policy)
    got = sorted((r.asDict(recursive=True) for r in out.collect()), key=lambda r: r["_rid"])
    losses = [r.asDict() for r in lost.orderBy("_dorder", "entity", "field").collect()]
    # the nodes that block each update (every one, not just the first the controller names): §7.3
    nodes = []
    for table, idc, kind in (("brokers", "broker_id", "broker"), ("controllers", "controller_id", "controller")):
        for r in live(table):
            nodes.append((kind, int(r[idc]), {f["name"]: (int(f["min_supported_version"]), int(f["max_supported_version"]))
                                              for f in (r["features"] or [])}))
    updates = []
    for r in got:
        blocking = []
        for kind, nid, rng in sorted(nodes):
            lo, hi = rng.get(r["feature"], (0, 0))
            if not lo <= r["max_version_level"] <= hi:
                blocking.append({"node_type": kind, "node_id": nid, "min_supported": lo, "max_supported": hi})
        updates.append({k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in r.items()
                        if k not in ("_rid", "request_time", "request_id", "client_id", "request_version",
                                     "validate_only", "truth_accepted", "truth_error_code", "truth_error_message",
                                     "matches_truth", "cluster_id")} | {"blocking_nodes": blocking})
    first = got[0]
    kip = [u for u in got if u["kip1155_outcome"] is not None]
    # KIP-1155 changes metadata.version downgrades only; its verdict is already request-wide per row
    kip_verdict = ({"outcome": kip[0]["kip1155_outcome"], "error_message": kip[0]["kip1155_error_message"]}
                   if kip else None)
    return {
        "cluster_id": cluster_id, "as_of_offset": offset, "metadata_version_level": mv,
        "metadata_version": MV_NAMES.get(mv), "finalized": {k: v for k, v in sorted(levels.items()) if k != METADATA_VERSION},
        "kafka": {"outcome": "ACCEPTED" if first["error_code"] == 0 else "REJECTED", "error_code": first["error_code"],
                  "error_message": first["error_message"]},
        "kip1155": kip_verdict, "updates": updates, "losses": losses,
    }


def _print(res: dict[str, Any], rule: str) -> None:
    print(f"cluster {res['cluster_id']}: image as of offset {res['as_of_offset']} (metadata.version "
          f"{res['metadata_version']}, level {res['metadata_version_level']}"
          + "".join(f", {k}={v}" for k, v in res["finalized"].items()) + ")")
    k = res["kafka"]
    mark = lambda r: " <- exit code" if r == rule else ""  # noqa: E731
    print(f"kafka (today's controller): {k['outcome']}{mark('kafka')}")
    if k["error_code"]:
        print(f"  error {k['error_code']} INVALID_UPDATE_VERSION: {k['error_message']}")
    if res["kip1155"] is not None:
        q = res["kip1155"]
        print(f"kip1155 (seed 001, proposed): {q['outcome']}{mark('kip1155')}")
        if q["error_message"]:
            print(f"  would refuse: {q['error_message']}")
    for u in res["updates"]:
        line = f"  {u['feature']} {u['current_level']} -> {u['max_version_level']} ({u['upgrade_type']}): "
        line += "ok" if u["failed_check"] is None else f"{u['failed_check']}: {u['feature_error_message']}"
        print(line)
        if u["blocking_nodes"]:
            print("    nodes without this level in their supported range: " + ", ".join(
                f"{n['node_type']} {n['node_id']} [{n['min_supported']}-{n['max_supported']}]" for n in u["blocking_nodes"]))
        for s in u["skipped_checks"] or []:
            print(f"    not checked: {s} (its supported range is not in the log)")
    if res["losses"]:
        print(f"loss report: {len(res['losses'])} item(s) the image cannot keep at the target level")
        for x in res["losses"]:
            print(f"  {x['domain']} {x['entity']}" + (f" {x['field']}" if x["field"] else "") + f": {x['what']}")
    elif any(u["loss_count"] is not None for u in res["updates"]):
        print("loss report: nothing would be lost")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "features_command", None) != "check":
        raise _err("give an action: kraft-replay features check ...")
    specs = [parse_spec(s) for s in args.specs]
    names = [s[0] for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise _err(f"feature {dup[0]!r} is given twice: one request holds one update per feature")
    from kraft_replay.outcomes.features import load_features_policy

    try:
        policy = load_features_policy(args.policy)
    except (OSError, ValueError) as exc:
        raise _err(f"--policy: {exc}") from None
    from kraft_replay.serve.common import open_lake

    spark, lake = open_lake(args)
    for t in ("features", "brokers", "controllers"):
        if not lake.exists(t):
            raise _err(f"lake {lake.root}: table {t} is missing: run `kraft-replay replay --lake {lake.root}` first")
    offset = _as_of(lake, args.cluster_id, args.as_of)
    res = check(spark, lake, args.cluster_id, specs, offset, policy)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        _print(res, args.rule)
    verdict = res["kafka"]["outcome"] if args.rule == "kafka" or res["kip1155"] is None else res["kip1155"]["outcome"]
    sys.stdout.flush()
    return 0 if verdict in ("ACCEPTED", "ACCEPTED_WITH_LOSS") else 1
