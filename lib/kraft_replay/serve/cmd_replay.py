"""``kraft-replay replay --lake DIR [--cluster-id C] --mode batch``: the bronze tables replayed into the
silver tables (docs/design.md, "Silver tables (replay)"); ``kraft-replay image`` (:mod:`.cmd_image`)
reads them. With broker metrics in the lake (``broker_progress``), ``broker_applied`` (silver) and the
gold ``cache_lag`` (:mod:`kraft_replay.outcomes.cache_lag`) are written too. Exit 0 with a summary;
exit 2 with one line on bad input (missing bronze tables, an unknown cluster), nothing published.

``--incremental`` resumes each cluster's stored replay with the bronze rows published since
(:mod:`kraft_replay.replay.incremental`), replaying whole the clusters it cannot resume.

``--mode stream`` (:mod:`.replay_stream`) keeps the same tables current with Structured Streaming:
``--trigger SECONDS`` runs until interrupted (or ``--run-for``), ``--available-now`` processes what
is new and stops; each cluster's replay is kept in the stream's state store and advanced with each
micro-batch's records, ``cache_lag`` with its new metric samples (``--derive-every``: how often the
other derived tables follow). On a new checkpoint a cluster with a large backlog (``--catch-up-records``)
is caught up by the batch replay before the query starts, and the stream takes that replay up.
"""

from __future__ import annotations

import argparse
import sys

from kraft_replay.serve.common import add_json_option


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="replay the bronze metadata log into the versioned silver tables",
        description="Replay the bronze tables (metadata_log, metadata_control, snapshot_records) into the silver "
                    "tables: one version per entity and change, replay anomalies, log batches and commit state.",
        epilog="examples:\n"
               "  kraft-replay replay --lake ./lake                                  # batch, every cluster\n"
               "  kraft-replay replay --lake ./lake --cluster-id C --image-at 7751\n"
               "  kraft-replay replay --lake ./lake --incremental                    # only what was published since\n"
               "  kraft-replay replay --lake ./lake --available-now                  # stream what is new, then stop\n"
               "  kraft-replay replay --lake ./lake --mode stream --trigger 1        # live, until interrupted\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    add_json_option(p)
    p.add_argument("--cluster-id", default=None, help="replay only this cluster (default: every cluster in the lake)")
    p.add_argument("--mode", choices=("batch", "stream"), default=None,
                   help="batch (default): replay once; stream: Structured Streaming over the bronze tables, each "
                        "cluster's replay kept in the state store and advanced with each micro-batch's records "
                        "(implied by --trigger / --available-now)")
    p.add_argument("--trigger", type=float, default=None, metavar="SECONDS",
                   help="stream: start a micro-batch every SECONDS (default 1) until interrupted or --run-for")
    p.add_argument("--available-now", action="store_true",
                   help="stream: process every bronze row not yet replayed, then stop (for scheduled jobs)")
    p.add_argument("--run-for", type=float, default=None, metavar="SECONDS",
                   help="stream: stop after SECONDS (default: run until interrupted)")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="stream: the query's checkpoint (default <lake>/_streams/replay[-<cluster>]); keep it to "
                        "resume where the last run stopped")
    p.add_argument("--image-at", type=int, action="append", default=[], metavar="O",
                   help="also keep the full image at offset O in image_snapshots (repeatable; images at every "
                        "metadata.version change are always kept)")
    p.add_argument("--incremental", action="store_true",
                   help="batch: bring each cluster up to date from the bronze rows published since its last replay "
                        "(its stored image as the start); a cluster whose earlier records changed, or whose log is "
                        "small (under 100,000 records), is replayed whole (the summary says why). Stream mode does "
                        "this by default")
    p.add_argument("--derive-every", type=float, default=60.0, metavar="SECONDS",
                   help="stream: recompute broker_applied, the outcome tables and the --image-at images of the "
                        "clusters touched since, at most every SECONDS (default 60; 0: after every micro-batch) and "
                        "when the stream stops (cache_lag and the images at metadata.version changes follow every "
                        "micro-batch)")
    p.add_argument("--catch-up-records", type=int, default=None, metavar="N",
                   help="stream: on a new checkpoint, a cluster with at least N bronze log records not in a stored "
                        "batch replay is caught up by the batch replay first, then taken up by the stream (default "
                        "500000: below it the stream's own replay is sooner; 0: never)")
    p.add_argument("--lag-bucket", type=float, default=1.0, metavar="SECONDS",
                   help="time bucket of cache_lag (written when the lake holds broker_progress; default 1)")
    p.set_defaults(func=run)


def _user_error(exc: Exception) -> Exception:
    from kraft_replay.serve.cli import UserError

    return UserError(str(exc))


def _mode(args: argparse.Namespace) -> str:
    streamy = [o for o, v in (("--trigger", args.trigger), ("--available-now", args.available_now or None),
                              ("--run-for", args.run_for), ("--checkpoint", args.checkpoint),
                              ("--catch-up-records", args.catch_up_records)) if v is not None]
    mode = args.mode or ("stream" if streamy else "batch")
    if mode == "batch" and streamy:
        raise _user_error(ValueError(f"{streamy[0]} is an option of --mode stream, not --mode batch"))
    if args.trigger is not None and args.available_now:
        raise _user_error(ValueError("--trigger and --available-now exclude each other: pick one"))
    for name, v in (("--trigger", args.trigger), ("--run-for", args.run_for)):
        if v is not None and not v > 0:
            raise _user_error(ValueError(f"{name} must be > 0 seconds, got {v:g}"))
    if args.run_for is not None and args.available_now:
        raise _user_error(ValueError("--run-for and --available-now exclude each other: --available-now stops by itself"))
    if mode == "stream" and args.incremental:
        raise _user_error(ValueError("--incremental is --mode batch's: stream mode keeps each cluster's replay current by itself"))
    if not args.derive_every >= 0:
        raise _user_error(ValueError(f"--derive-every must be >= 0 seconds, got {args.derive_every:g}"))
    if args.catch_up_records is not None and args.catch_up_records < 0:
        raise _user_error(ValueError(f"--catch-up-records must be >= 0 (0: never), got {args.catch_up_records}"))
    return mode


def run(args: argparse.Namespace) -> int:
    from kraft_replay.replay.run import ReplayError, run_replay
    from kraft_replay.serve.common import open_lake

    if not args.lag_bucket > 0:
        raise _user_error(ValueError(f"--lag-bucket must be > 0 seconds, got {args.lag_bucket:g}"))
    mode = _mode(args)
    spark, lake = open_lake(args, stream=mode == "stream")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if mode == "stream":
        return _run_stream(args, spark, lake, say)

    try:
        summary = run_replay(spark, lake, cluster_id=args.cluster_id, say=say, image_at=args.image_at,
                             incremental=args.incremental)
    except ReplayError as exc:
        raise _user_error(exc) from None
    from kraft_replay.outcomes.cache_lag import CACHE_LAG, write_cache_lag

    lag_rows = write_cache_lag(lake, summary.clusters, say=say, bucket_s=args.lag_bucket,  # with broker metrics only
                               changes=summary.leader_changes)
    if args.json:
        from kraft_replay.serve.common import print_json

        print_json(summary, mode="batch", cache_lag_rows=lag_rows)
        return 0
    for line in summary.lines():
        print(line, flush=True)
    if lag_rows:
        print(f"  {CACHE_LAG}: {lag_rows} rows ({args.lag_bucket:g} s buckets, from broker_progress)", flush=True)
    return 0


def _run_stream(args: argparse.Namespace, spark, lake, say) -> int:  # noqa: ANN001
    from kraft_replay.ingest.errors import IngestError
    from kraft_replay.replay.run import ReplayError
    from kraft_replay.serve.replay_stream import CATCH_UP_RECORDS, StreamFailed, run_stream

    catch_up = CATCH_UP_RECORDS if args.catch_up_records is None else (args.catch_up_records or None)
    try:
        report = run_stream(spark, lake, cluster_id=args.cluster_id, trigger_seconds=args.trigger or 1.0,
                            available_now=args.available_now, checkpoint=args.checkpoint, run_for=args.run_for,
                            lag_bucket=args.lag_bucket, image_at=args.image_at, derive_every=args.derive_every,
                            catch_up_records=catch_up, say=say)
    except (ReplayError, IngestError, StreamFailed) as exc:
        raise _user_error(exc) from None
    if args.json:
        from kraft_replay.serve.common import print_json

        print_json(report, mode="stream")
        return 0
    print(report.line(), flush=True)
    return 0
