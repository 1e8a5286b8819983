"""``kraft-replay image --lake DIR --cluster-id C (--offset O | --time T) [--domain D]... [--format table|json]
[--diff-to O2]``: the metadata image of one cluster as of an offset or a time, read from the silver tables
that ``kraft-replay replay`` wrote (issue 10 §3; the API is :mod:`kraft_replay.replay.images`).

* ``--offset O`` is the image holding every committed record with offset <= O (Kafka's
  lastContainedOffset: a snapshot ``END-epoch.checkpoint`` is the image at END - 1); ``--time T`` the
  image after the last batch appended at or before T.
* ``--format json`` prints one JSON object (:func:`~kraft_replay.replay.images.image_json`);
  ``--format table`` a header line (cluster, offset, metadata.version) and per domain an aligned table.
* ``--diff-to O2``: what changed from that image to the image at O2, entity by entity
  (:func:`~kraft_replay.replay.images.image_diff`): a JSON object, or ``+`` / ``-`` / ``~`` lines.

Errors the user can fix (neither --offset nor --time, a time that is not ISO-8601, an unknown cluster,
an offset below where replay started, a lake without silver tables) are one line, exit 2.
Only the silver tables are read: they hold no secrets (SCRAM salts and keys, token HMACs stay in bronze).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

#: list/struct cells wider than this are cut (with "...") in table output (names and other plain values
#: never are); --format json prints everything
MAX_CELL = 80

EPILOG = """examples:
  kraft-replay image --lake /tmp/lake --cluster-id MkU3OEVBNTcwNTJENDM2Qg --offset 7751
  kraft-replay image --lake /tmp/lake --cluster-id MkU3OEVBNTcwNTJENDM2Qg --time 2024-05-01T10:00:00Z \\
      --domain partitions --domain brokers
  kraft-replay image --lake /tmp/lake --cluster-id MkU3OEVBNTcwNTJENDM2Qg --offset 7751 --diff-to 14925 --format json
  kraft-replay image --lake /tmp/lake --cluster-id MkU3OEVBNTcwNTJENDM2Qg --broker 3 --time 2024-05-01T10:00:00Z
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from kraft_replay.replay.schemas import VERSIONED_TABLES  # == images.DOMAINS, without importing pyspark

    p = subparsers.add_parser(
        "image", help="the metadata image of a cluster as of an offset or a time",
        description="Print the metadata image of one cluster as of an offset (every committed record with offset <= O; "
                    "a snapshot END-epoch.checkpoint is the image at END-1) or as of a time (after the last batch "
                    "appended at or before it), read from the silver tables `kraft-replay replay` wrote.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster-id", required=True, metavar="C", help="the cluster")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--offset", type=int, default=None, metavar="O",
                   help="the image holding every committed record with offset <= O")
    g.add_argument("--time", default=None, metavar="T",
                   help="ISO-8601 time (e.g. 2024-05-01T10:00:00Z; no zone = UTC): the image after the last batch "
                        "appended at or before it")
    p.add_argument("--broker", type=int, default=None, metavar="B",
                   help="with --time: broker B's cache then, the image at the offset it had applied (broker_applied, "
                        "from ingested broker metrics)")
    p.add_argument("--domain", action="append", default=None, choices=VERSIONED_TABLES, metavar="D",
                   help=f"only this domain (repeatable): {', '.join(VERSIONED_TABLES)}")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    p.add_argument("--diff-to", type=int, default=None, metavar="O2",
                   help="print what changed from the image at --offset/--time to the image at offset O2, entity by entity")
    p.set_defaults(func=run)


def _user_error(msg: str) -> Exception:
    from kraft_replay.serve.cli import UserError

    return UserError(msg)


def parse_time(text: str) -> dt.datetime:
    """An ISO-8601 time (``Z`` or an offset for the zone; none = UTC), else a one-line user error."""
    try:
        t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise _user_error(f"--time {text!r} is not an ISO-8601 time (e.g. 2024-05-01T10:00:00Z)") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def _cell(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ",".join(_cell(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}={_cell(x)}" for k, x in v.items()) + "}"
    if isinstance(v, dt.datetime):
        return v.isoformat()
    return "" if v is None else str(v)


def _short(v: Any) -> str:
    s = _cell(v)
    return s if len(s) <= MAX_CELL or not isinstance(v, (list, dict)) else s[:MAX_CELL - 3] + "..."


def _diff_value(v: Any) -> str:
    return "null" if v is None else _short(v)


def _print_table(name: str, rows: list[dict[str, Any]]) -> None:
    print(f"{name} ({len(rows)})")
    if not rows:
        return
    cols = list(rows[0])
    cells = [[_short(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    print("  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip())
    for x in cells:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(x, widths)).rstrip())


HEADER_KEYS = ("cluster_id", "offset", "metadata_version", "metadata_version_level", "broker_id", "time")


def _print_image(doc: dict[str, Any]) -> None:
    who = f"broker {doc['broker_id']}'s cache at {doc['time']}: " if "broker_id" in doc else ""
    print(f"{who}cluster {doc['cluster_id']} as of offset {doc['offset']}: metadata.version "
          f"{doc.get('metadata_version')} (level {doc.get('metadata_version_level')})")
    for k, v in doc.items():
        if k in HEADER_KEYS:
            continue
        if k == "features":
            _print_table(k, [{"name": n, "feature_level": lvl} for n, lvl in v.items()])
        elif isinstance(v, list):
            _print_table(k, v)
        elif isinstance(v, dict):
            print(f"{k}: " + " ".join(f"{f}={_cell(x)}" for f, x in v.items()))
        else:
            print(f"{k}: {_cell(v)}")


def _print_diff(diff: dict[str, Any]) -> None:
    mv = diff.get("metadata_version")
    print(f"cluster {diff['cluster_id']}: from offset {diff['from_offset']} to {diff['to_offset']}"
          + (f", metadata.version {mv[0]} -> {mv[1]}" if mv else ""))
    if not diff["changes"]:
        print("  no change")
    sign = {"added": "+", "removed": "-", "changed": "~"}
    for d, rows in diff["changes"].items():
        print(f"{d} ({len(rows)})")
        for r in rows:
            key = " ".join(f"{k}={_cell(v)}" for k, v in r["key"].items())
            if r["change"] == "changed":
                fields = ", ".join(f"{f}: {_diff_value(o)} -> {_diff_value(n)}" for f, (o, n) in r["fields"].items())
            else:  # added: the new entity's fields; removed: the old one's
                i = 1 if r["change"] == "added" else 0
                fields = " ".join(f"{f}={_diff_value(v[i])}" for f, v in r["fields"].items())
            print(f"  {sign[r['change']]} {key}  {fields}".rstrip())


def _dump(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, separators=(",", ":"), default=_cell))


def run(args: argparse.Namespace) -> int:
    if args.broker is not None and (args.time is None or args.offset is not None):
        raise _user_error("--broker B needs --time T (a broker's cache at a time), not --offset")
    if args.offset is None and args.time is None:
        raise _user_error("give --offset O or --time T (the image as of an offset, or as of an ISO-8601 time)")
    at_time = parse_time(args.time) if args.time is not None else None  # checked before Spark starts

    from kraft_replay.replay.images import ImageError, broker_offset, image, image_diff, image_json, resolve_offset
    from kraft_replay.serve.common import open_lake

    _spark, lake = open_lake(args)
    domains = list(dict.fromkeys(args.domain)) if args.domain else None
    asked = domains
    if domains is not None and "features" not in domains:
        domains = [*domains, "features"]  # metadata.version comes from the features domain
    try:
        if args.broker is not None:
            offset = resolve_offset(lake, args.cluster_id, offset=broker_offset(lake, args.cluster_id, args.broker, at_time))
        else:
            offset = resolve_offset(lake, args.cluster_id, offset=args.offset, time=at_time)
        doc = image_json(image(lake, args.cluster_id, offset=offset, domains=domains), args.cluster_id, offset)
        if args.broker is not None:
            doc = {"cluster_id": doc["cluster_id"], "broker_id": args.broker, "time": at_time.isoformat(), **doc}
        other = None
        if args.diff_to is not None:
            other = image_json(image(lake, args.cluster_id, offset=args.diff_to, domains=domains), args.cluster_id,
                               args.diff_to)
    except ImageError as exc:
        raise _user_error(str(exc)) from None
    if other is not None:
        diff = image_diff(doc, other)
        if asked is not None and "features" not in asked:
            diff["changes"].pop("features", None)
        if args.format == "json":
            _dump(diff)
        else:
            _print_diff(diff)
        return 0
    if asked is not None and "features" not in asked:
        doc.pop("features", None)
    if args.format == "json":
        _dump(doc)
    else:
        _print_image(doc)
    return 0
