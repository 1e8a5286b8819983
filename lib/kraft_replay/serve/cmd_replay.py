"""``kraft-replay replay --lake DIR [--cluster-id C] --mode batch``: the bronze tables replayed into the
silver tables (docs/design.md, "Silver tables (replay)"), and ``kraft-replay image --lake DIR
--cluster-id C (--offset O | --time T) [--domain D]... [--format table|json]``: the metadata image
as of an offset or a time, from those tables.

(``image`` is registered here too, so that the CLI's list of subcommand modules needs no change.)
Exit 0 with a summary; exit 2 with one line on bad input (missing bronze tables, an unknown
cluster, an offset below where replay started), nothing published.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="replay the bronze metadata log into the versioned silver tables",
        description="Replay the bronze tables (metadata_log, metadata_control, snapshot_records) into the silver "
                    "tables: one version per entity and change, replay anomalies, log batches and commit state.")
    p.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    p.add_argument("--cluster-id", default=None, help="replay only this cluster (default: every cluster in the lake)")
    p.add_argument("--mode", choices=("batch",), default="batch", help="batch (the only mode so far)")
    p.set_defaults(func=run)

    q = subparsers.add_parser(
        "image", help="the metadata image of a cluster as of an offset or a time",
        description="Print the metadata image of one cluster as of an offset (every committed record with offset <= O; "
                    "a snapshot END-epoch is the image at END-1) or a time, from the silver tables.")
    q.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    q.add_argument("--cluster-id", required=True, help="the cluster")
    g = q.add_mutually_exclusive_group()
    g.add_argument("--offset", type=int, default=None, help="image offset (default: the last offset replayed)")
    g.add_argument("--time", default=None, help="ISO-8601 time: the image after the last batch appended at or before it")
    q.add_argument("--domain", action="append", default=None, metavar="D",
                   help="only these domains (repeatable): topics, partitions, brokers, controllers, features, configs, ...")
    q.add_argument("--diff-to", type=int, default=None, metavar="O2",
                   help="print what changed from the image at --offset/--time to the image at offset O2, entity by entity")
    q.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    q.set_defaults(func=run_image)


def _user_error(exc: Exception) -> Exception:
    from kraft_replay.serve.cli import UserError

    return UserError(str(exc))


def run(args: argparse.Namespace) -> int:
    from kraft_replay.replay.run import ReplayError, run_replay
    from kraft_replay.serve.common import open_lake

    spark, lake = open_lake(args)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        summary = run_replay(spark, lake, cluster_id=args.cluster_id, say=say)
    except ReplayError as exc:
        raise _user_error(exc) from None
    for line in summary.lines():
        print(line, flush=True)
    return 0


def _cell(v: object) -> str:
    if isinstance(v, list):
        return "[" + ",".join(_cell(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}={_cell(x)}" for k, x in v.items()) + "}"
    return "" if v is None else str(v)


def _print_table(name: str, rows: list[dict]) -> None:
    print(f"{name} ({len(rows)})")
    if not rows:
        return
    cols = list(rows[0])
    cells = [[_cell(r[c]) for c in cols] for r in rows]
    widths = [min(60, max(len(c), *(len(x[i]) for x in cells))) for i, c in enumerate(cols)]
    print("  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for x in cells:
        print("  " + "  ".join(v[:w].ljust(w) for v, w in zip(x, widths)))


def _print_diff(diff: dict, args: argparse.Namespace) -> int:
    if args.domain is not None and "features" not in args.domain:
        diff["changes"].pop("features", None)
    if args.format == "json":
        print(json.dumps(diff, separators=(",", ":"), default=str))
        return 0
    print(f"cluster {diff['cluster_id']}: from offset {diff['from_offset']} to {diff['to_offset']}"
          + (f", metadata.version {diff['metadata_version'][0]} -> {diff['metadata_version'][1]}" if "metadata_version" in diff else ""))
    if not diff["changes"]:
        print("  no change")
    sign = {"added": "+", "removed": "-", "changed": "~"}
    for d, rows in diff["changes"].items():
        print(f"{d} ({len(rows)})")
        for r in rows:
            key = " ".join(f"{k}={_cell(v)}" for k, v in r["key"].items())
            fields = ", ".join(f"{f}: {_cell(o)} -> {_cell(n)}" for f, (o, n) in r["fields"].items())
            print(f"  {sign[r['change']]} {key}  {fields}")
    return 0


def run_image(args: argparse.Namespace) -> int:
    from kraft_replay.replay.images import ImageError, image, image_diff, image_json, resolve_offset
    from kraft_replay.serve.common import open_lake

    spark, lake = open_lake(args)
    try:
        offset = resolve_offset(lake, args.cluster_id, args.offset, args.time)
        domains = args.domain
        if domains is not None and "features" not in domains:
            domains = [*domains, "features"]  # metadata_version comes from it
        imgs = image(lake, args.cluster_id, offset=offset, domains=domains)
    except ImageError as exc:
        raise _user_error(exc) from None
    doc = image_json(imgs, args.cluster_id, offset)
    if args.diff_to is not None:
        try:
            other = image_json(image(lake, args.cluster_id, offset=args.diff_to, domains=domains), args.cluster_id, args.diff_to)
        except ImageError as exc:
            raise _user_error(exc) from None
        return _print_diff(image_diff(doc, other), args)
    if args.domain is not None and "features" not in args.domain:
        doc.pop("features", None)
    if args.format == "json":
        print(json.dumps(doc, indent=None, separators=(",", ":"), default=str))
        return 0
    print(f"cluster {doc['cluster_id']} as of offset {doc['offset']}: metadata.version "
          f"{doc.get('metadata_version')} (level {doc.get('metadata_version_level')})")
    for k, v in doc.items():
        if k in ("cluster_id", "offset", "metadata_version", "metadata_version_level"):
            continue
        if isinstance(v, list):
            _print_table(k, v)
        else:
            print(f"{k}: {_cell(v)}")
    return 0
