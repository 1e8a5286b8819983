"""``kraft-replay tables``: every table of the lake as readers see it (its published version, else its
latest), with row count and schema, and any commits past it not yet published. Read from the tables' logs
on the driver (no JVM starts) unless ``--backend delta-spark`` asks for the native backend."""

from __future__ import annotations

import argparse
import json


def _run(args: argparse.Namespace) -> int:
    from kraft_replay.serve.common import open_lake_driver

    lake = open_lake_driver(args)
    infos = lake.tables()
    if args.json:
        print(json.dumps([{"name": t.name, "version": t.version, "rows": t.num_rows, "files": t.num_files,
                           "published": t.published, "head_version": t.head_version,
                           "partition_by": list(t.partition_by), "schema": json.loads(t.schema.json())}
                          for t in infos], indent=2))
        return 0
    if not infos:
        print(f"no tables in {lake.root}")
        return 0
    for t in infos:
        parts = f"  partitioned by {', '.join(t.partition_by)}" if t.partition_by else ""
        pending = (f"  ({t.unpublished_commits} unpublished commit(s) up to version {t.head_version}: a run in "
                   "progress, or one that did not finish and that the next run rolls back)") if t.unpublished_commits else ""
        print(f"{t.name}  version {t.version}  rows {t.num_rows}  files {t.num_files}{parts}{pending}")
        for f in t.schema.fields:
            print(f"    {f.name}: {f.dataType.simpleString()}{'' if f.nullable else ' not null'}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("tables", help="list every table: version, row count, schema",
                       description="List every table of the lake as readers see it (its published version, else its "
                                   "latest): version, rows, files, partitioning, schema, and commits not yet published.",
                       epilog="examples:\n  kraft-replay tables --lake ./lake\n  kraft-replay tables --lake ./lake --json | jq '.[].name'\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_run)
