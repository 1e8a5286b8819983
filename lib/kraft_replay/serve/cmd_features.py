"""``kraft-replay features check --lake DIR --cluster-id C [--as-of OFFSET|TIME] [--rule kafka|kip1155]
[--policy FILE] [--json] SPEC...``: the what-if checker an operator runs before ``kafka-features.sh``.

Each SPEC is ``feature=level[:UPGRADE|SAFE_DOWNGRADE|UNSAFE_DOWNGRADE]`` (metadata.version also takes a
version such as ``3.8-IV0``; the type defaults to UPGRADE, or SAFE_DOWNGRADE below the current level).
All SPECs form one UpdateFeatures request, validated by the rules ``feature_update_outcomes`` applies to a
logged request (facts §7, seeds 004 and 001) against the image as of the offset (default: the log end),
on the driver without Spark (:mod:`kraft_replay.outcomes.feature_check`). It prints today's verdict and
KIP-1155's, the error Kafka would return, the nodes that block it and the loss report of a
metadata.version downgrade.
Exit 0 when the chosen rule (``--rule``, default ``kafka``) accepts, 1 when it refuses, 2 for a malformed
SPEC, an unknown cluster or a lake without replay.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
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


def _as_of(reader, cluster_id: str, text: str | None) -> int:  # noqa: ANN001 - a LakeReader
    """The offset of ``--as-of`` (an offset or an ISO-8601 time; default the log end), by the rules of
    ``kraft-replay image`` (:func:`kraft_replay.replay.images.pick_offset`), read without Spark."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kraft_replay.replay.images import pick_offset

    where = [("cluster_id", "=", cluster_id)]
    commit = reader.scan("log_commit", partitions=where)
    if commit is None or reader.version("log_batches") is None:
        raise _err(f"lake {reader.root}: tables log_commit and log_batches are missing: run `kraft-replay replay "
                   f"--lake {reader.root}` first")

    def last_batch_at(at):  # noqa: ANN001, ANN202
        # the time condition is applied in memory: as a dataset filter on delta-rs' pyarrow dataset it
        # keeps no row of a Spark-written table
        t = reader.scan("log_batches", columns=["append_time", "batch_last_offset"], partitions=where)
        t = t.filter(pc.less_equal(t.column("append_time"), pa.scalar(at, type=t.schema.field("append_time").type)))
        return pc.max(t.column("batch_last_offset")).as_py() if t.num_rows else None
    rows = commit.to_pylist()
    offset = time = None
    if text is not None and re.fullmatch(r"-?\d+", text.strip()):
        offset = int(text)
    elif text is not None:
        from kraft_replay.serve.cli import UserError
        from kraft_replay.serve.cmd_image import parse_time

        try:
            time = parse_time(text)
        except UserError:
            raise _err(f"--as-of {text!r} is neither an offset nor an ISO-8601 time "
                       "(e.g. 2024-05-01T10:00:00Z)") from None
    return pick_offset(reader.root, cluster_id, rows[0] if rows else None, last_batch_at, offset, time)


def check(reader, cluster_id: str, specs: list[tuple[str, int, str | None]], offset: int,  # noqa: ANN001 - a LakeReader
          policy=None) -> dict[str, Any]:  # noqa: ANN001
    """The what-if verdict of one request of ``specs`` on the image of ``cluster_id`` as of ``offset``:
    a JSON-ready dict (the per-update verdicts of ``feature_update_outcomes``, the blocking nodes, the loss
    report), computed on the driver by :mod:`kraft_replay.outcomes.feature_check` (no Spark job)."""
    from kraft_replay.outcomes.feature_check import Update, check_request, read_image
    from kraft_replay.replay.features import METADATA_VERSION, MV_NAMES

    img = read_image(reader, cluster_id, offset)
    updates = []
    for name, level, utype in specs:
        cur = img.mv if name == METADATA_VERSION else img.finalized.get(name, 0)
        utype = utype or ("SAFE_DOWNGRADE" if level < cur else "UPGRADE")
        updates.append(Update(name, level, _TYPES[utype]))
    got, lost = check_request(img, updates, policy)
    # the nodes that block each update (every one, not just the first the controller names): §7.3
    nodes = [("broker", n) for n in img.brokers] + [("controller", n) for n in img.controllers]
    out = []
    for r in got:
        blocking = []
        for kind, n in nodes:
            lo, hi = n.range_of(r["feature"])
            if not lo <= r["max_version_level"] <= hi:
                blocking.append({"node_type": kind, "node_id": n.node_id, "min_supported": lo, "max_supported": hi})
        out.append({k: v for k, v in r.items() if k != "validate_only"} | {"blocking_nodes": blocking})
    first = got[0]
    kip = [u for u in got if u["kip1155_outcome"] is not None]
    # KIP-1155 changes metadata.version downgrades only; its verdict is already request-wide per row
    kip_verdict = ({"outcome": kip[0]["kip1155_outcome"], "error_message": kip[0]["kip1155_error_message"]}
                   if kip else None)
    return {
        "cluster_id": cluster_id, "as_of_offset": offset, "metadata_version_level": img.mv,
        "metadata_version": MV_NAMES.get(img.mv), "finalized": dict(sorted(img.finalized.items())),
        "kafka": {"outcome": "ACCEPTED" if first["error_code"] == 0 else "REJECTED", "error_code": first["error_code"],
                  "error_message": first["error_message"]},
        "kip1155": kip_verdict, "updates": out,
        "losses": [{"domain": x["domain"], "entity": x["entity"], "field": x["field"], "what": x["what"],
                    "target_level": x["target_level"]} for x in lost],
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
    from kraft_replay.config import load_profile
    from kraft_replay.lake.reader import LakeReader

    profile = load_profile(args.profile)
    root = args.lake or profile.lake.root
    if not root:
        raise _err(f"no lake root: pass --lake DIR (profile {profile.name!r} sets none)")
    if "://" not in root and not Path(root).is_dir():
        raise _err(f"no lake at {root}: pass --lake DIR (a lake `kraft-replay replay` wrote)")
    reader = LakeReader(root)
    for t in ("features", "brokers", "controllers"):
        if reader.version(t) is None:
            raise _err(f"lake {root}: table {t} is missing: run `kraft-replay replay --lake {root}` first")
    offset = _as_of(reader, args.cluster_id, args.as_of)
    res = check(reader, args.cluster_id, specs, offset, policy)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        _print(res, args.rule)
    verdict = res["kafka"]["outcome"] if args.rule == "kafka" or res["kip1155"] is None else res["kip1155"]["outcome"]
    sys.stdout.flush()
    return 0 if verdict in ("ACCEPTED", "ACCEPTED_WITH_LOSS") else 1
