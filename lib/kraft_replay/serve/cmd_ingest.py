"""``kraft-replay ingest PATH... --lake DIR [--cluster-id ID] [--strict]``: KRaft files into the bronze tables.

Exit 0 with a summary (a truncated tail or a damaged start of a segment is quarantined, not an
error); exit 2 with one line on bad input, or under ``--strict`` when anything was quarantined (then
nothing is committed), or when a commit fails (the line says which commits the run had made: they
stay unpublished, invisible to readers, and the next run rolls them back). The run's commits become
visible to readers together, when it publishes them as its last step.
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ingest",
        help="ingest __cluster_metadata segments, snapshots, bootstrap.checkpoint and dump-log text",
        description="Decode KRaft metadata files (a node's data dir, its __cluster_metadata-0 dir, files or globs; "
                    "local or any URI pyarrow.fs reads) into the bronze Delta tables.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files, directories or globs")
    p.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    p.add_argument("--cluster-id", default=None,
                   help="cluster id for every row (default: cluster.id from meta.properties, else the data dir name)")
    p.add_argument("--strict", action="store_true", help="fail (commit nothing) if any byte range must be quarantined")
    p.add_argument("--split-mb", type=int, default=32,
                   help="cut files into byte ranges of about this size (MB), one decode task each; each task "
                        "resynchronises at a batch boundary and the ranges are verified to chain")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kraft_replay.ingest import run_ingest
    from kraft_replay.ingest.errors import IngestError
    from kraft_replay.ingest.sources import damaged_prefix_error, discover
    from kraft_replay.serve.common import open_lake

    if args.split_mb < 1:
        raise IngestError(f"--split-mb must be >= 1, got {args.split_mb}")
    files, _skipped = discover(list(args.paths), args.cluster_id)  # bad input fails here, before Spark starts
    if args.strict and damaged_prefix_error(files):
        raise IngestError(damaged_prefix_error(files))
    spark, lake = open_lake(args)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    summary = run_ingest(spark, lake, list(args.paths), cluster_id=args.cluster_id, strict=args.strict,
                         split_bytes=args.split_mb * 1024 * 1024, say=say)
    for line in summary.lines():
        print(line, flush=True)
    return 0
