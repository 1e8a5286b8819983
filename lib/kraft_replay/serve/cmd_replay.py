"""``kraft-replay replay --lake DIR [--cluster-id C] --mode batch``: the bronze tables replayed into the
silver tables (docs/design.md, "Silver tables (replay)"); ``kraft-replay image`` (:mod:`.cmd_image`)
reads them. With broker metrics in the lake (``broker_progress``), ``broker_applied`` (silver) and the
gold ``cache_lag`` (:mod:`kraft_replay.outcomes.cache_lag`) are written too. Exit 0 with a summary; exit 2 with one line on bad input (missing bronze tables, an
unknown cluster), nothing published.
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="replay the bronze metadata log into the versioned silver tables",
        description="Replay the bronze tables (metadata_log, metadata_control, snapshot_records) into the silver "
                    "tables: one version per entity and change, replay anomalies, log batches and commit state.")
    p.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    p.add_argument("--cluster-id", default=None, help="replay only this cluster (default: every cluster in the lake)")
    p.add_argument("--mode", choices=("batch",), default="batch", help="batch (the only mode so far)")
    p.add_argument("--image-at", type=int, action="append", default=[], metavar="O",
                   help="also keep the full image at offset O in image_snapshots (repeatable; images at every "
                        "metadata.version change are always kept)")
    p.add_argument("--lag-bucket", type=float, default=1.0, metavar="SECONDS",
                   help="time bucket of cache_lag (written when the lake holds broker_progress; default 1)")
    p.set_defaults(func=run)


def _user_error(exc: Exception) -> Exception:
    from kraft_replay.serve.cli import UserError

    return UserError(str(exc))


def run(args: argparse.Namespace) -> int:
    from kraft_replay.replay.run import ReplayError, run_replay
    from kraft_replay.serve.common import open_lake

    if not args.lag_bucket > 0:
        raise _user_error(ValueError(f"--lag-bucket must be > 0 seconds, got {args.lag_bucket:g}"))
    spark, lake = open_lake(args)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        summary = run_replay(spark, lake, cluster_id=args.cluster_id, say=say, image_at=args.image_at)
    except ReplayError as exc:
        raise _user_error(exc) from None
    from kraft_replay.outcomes.cache_lag import CACHE_LAG, write_cache_lag

    lag_rows = write_cache_lag(lake, summary.clusters, say=say, bucket_s=args.lag_bucket)  # with broker metrics only
    for line in summary.lines():
        print(line, flush=True)
    if lag_rows:
        print(f"  {CACHE_LAG}: {lag_rows} rows ({args.lag_bucket:g} s buckets, from broker_progress)", flush=True)
    return 0
