"""``kraft-replay tables``: every table of the lake with its version, row count and schema."""

from __future__ import annotations

import argparse
import json


def _run(args: argparse.Namespace) -> int:
    from kraft_replay.serve.common import open_lake

    _spark, lake = open_lake(args)
    infos = lake.tables()
    if args.json:
        print(json.dumps([{"name": t.name, "version": t.version, "rows": t.num_rows, "files": t.num_files,
                           "partition_by": list(t.partition_by), "schema": json.loads(t.schema.json())}
                          for t in infos], indent=2))
        return 0
    if not infos:
        print(f"no tables in {lake.root}")
        return 0
    for t in infos:
        parts = f"  partitioned by {', '.join(t.partition_by)}" if t.partition_by else ""
        print(f"{t.name}  version {t.version}  rows {t.num_rows}  files {t.num_files}{parts}")
        for f in t.schema.fields:
            print(f"    {f.name}: {f.dataType.simpleString()}{'' if f.nullable else ' not null'}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("tables", help="list every table: version, row count, schema")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_run)
