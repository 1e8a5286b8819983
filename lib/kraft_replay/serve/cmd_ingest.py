"""``kraft-replay ingest PATH... --lake DIR [--cluster-id ID] [--strict | --follow]``: KRaft files into the bronze tables
(``--follow``: tail them while Kafka writes, :mod:`kraft_replay.ingest.follow`).

``--follow`` runs without Spark (one process: each poll decoded by the codec and committed with
delta-rs, :mod:`kraft_replay.ingest.follow`); Ctrl-C stops it with its summary line, exit 130.

Exit 0 with a summary (a truncated tail or a damaged start of a segment is quarantined, not an
error); exit 2 with one line on bad input, or under ``--strict`` when anything was quarantined (then
nothing is committed), or when a commit fails (the line says which commits the run had made: they
stay unpublished, invisible to readers, and the next run rolls them back). The run's commits become
visible to readers together, when it publishes them as its last step.
"""

from __future__ import annotations

import argparse
import sys

from kraft_replay.serve.common import add_json_option


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ingest",
        help="ingest __cluster_metadata segments, snapshots, bootstrap.checkpoint and dump-log text",
        description="Decode KRaft metadata files (a node's data dir, its __cluster_metadata-0 dir, files or globs; "
                    "local or any URI pyarrow.fs reads) into the bronze Delta tables.",
        epilog="examples:\n"
               "  kraft-replay ingest /var/lib/kafka/data --lake ./lake                # a node's data dir\n"
               "  kraft-replay ingest 'node*/__cluster_metadata-0' --lake ./lake --cluster-id MkU3OEVBNTcwNTJENDM2Qg\n"
               "  kraft-replay ingest dump-log.txt --lake ./lake --cluster-id C        # kafka-dump-log text\n"
               "  kraft-replay ingest /var/lib/kafka/data --lake ./lake --follow --interval 1   # tail a live node\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_json_option(p)
    p.add_argument("paths", nargs="+", metavar="PATH", help="files, directories or globs")
    p.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    p.add_argument("--cluster-id", default=None,
                   help="cluster id for every row (default: cluster.id from meta.properties, else the data dir name)")
    p.add_argument("--strict", action="store_true", help="fail (commit nothing) if any byte range must be quarantined")
    p.add_argument("--keep-secrets", action="store_true",
                   help="keep SCRAM salts/keys and sensitive config values as the log holds them instead of "
                        "fingerprints (a forensic lake on an encrypted disk); recorded in the lake, whose readers "
                        "then warn; `kraft-replay redact` undoes it")
    p.add_argument("--split-mb", type=int, default=32,
                   help="cut files into byte ranges of about this size (MB), one decode task each; each task "
                        "resynchronises at a batch boundary and the ranges are verified to chain")
    p.add_argument("--follow", action="store_true",
                   help="keep tailing the node's files while Kafka writes them: every --interval, ingest the whole "
                        "batches appended since the last poll, new segments and new snapshots, each poll one "
                        "published run committed without Spark (positions kept in the lake's follow_positions; a "
                        "restart resumes)")
    p.add_argument("--interval", type=float, default=None, metavar="SECONDS", help="--follow: seconds between polls (default 1)")
    p.add_argument("--polls", type=int, default=None, metavar="N", help="--follow: stop after N polls")
    p.add_argument("--run-for", type=float, default=None, metavar="SECONDS", help="--follow: stop after SECONDS")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kraft_replay.ingest import run_ingest
    from kraft_replay.ingest.errors import IngestError
    from kraft_replay.ingest.sources import damaged_prefix_error, discover
    from kraft_replay.serve.common import open_lake

    if args.split_mb < 1:
        raise IngestError(f"--split-mb must be >= 1, got {args.split_mb}")
    given = [o for o, v in (("--interval", args.interval), ("--polls", args.polls), ("--run-for", args.run_for))
             if v is not None]
    if given and not args.follow:
        raise IngestError(f"{given[0]} is an option of --follow; add --follow to tail the files")
    if args.json and args.follow:
        raise IngestError("--json prints one run's summary; --follow reports every poll as a line")
    if args.follow:
        return _follow(args)
    files, _skipped = discover(list(args.paths), args.cluster_id)  # bad input fails here, before Spark starts
    if args.strict and damaged_prefix_error(files):
        raise IngestError(damaged_prefix_error(files))
    spark, lake = open_lake(args)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    summary = run_ingest(spark, lake, list(args.paths), cluster_id=args.cluster_id, strict=args.strict,
                         split_bytes=args.split_mb * 1024 * 1024, say=say, keep_secrets=args.keep_secrets)
    if args.json:
        from kraft_replay.serve.common import print_json

        print_json(summary, records_per_s=round(summary.records_per_s, 1), mb_per_s=round(summary.mb_per_s, 3))
        return 0
    for line in summary.lines():
        print(line, flush=True)
    return 0


def _follow(args: argparse.Namespace) -> int:
    from kraft_replay.ingest.errors import IngestError
    from kraft_replay.ingest.follow import check_follow_paths, follow
    from kraft_replay.serve.common import open_lake_driver

    interval = 1.0 if args.interval is None else args.interval
    if not interval > 0:
        raise IngestError(f"--interval must be > 0 seconds, got {interval:g}")
    if args.polls is not None and args.polls < 1:
        raise IngestError(f"--polls must be >= 1, got {args.polls}")
    if args.run_for is not None and not args.run_for > 0:
        raise IngestError(f"--run-for must be > 0 seconds, got {args.run_for:g}")
    if args.strict:
        raise IngestError("--strict and --follow exclude each other: a live tail quarantines what it cannot decode")
    check_follow_paths(list(args.paths))  # bad paths fail here, before the lake is opened
    lake = open_lake_driver(args)  # no Spark: each poll is committed with delta-rs on this process

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    report = follow(lake, list(args.paths), cluster_id=args.cluster_id, interval=interval,
                    polls=args.polls, run_for=args.run_for, say=say, keep_secrets=args.keep_secrets)
    print(report.line(), flush=True)
    return 130 if report.interrupted else 0
