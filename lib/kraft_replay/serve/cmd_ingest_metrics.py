"""``kraft-replay ingest-metrics FILE|URL... --lake DIR [--cluster-id C] [--follow --interval 1s]``:
broker metric samples (Prometheus text or query_range JSON, CSV, JSON lines) and
``kafka-metadata-quorum describe --status`` / ``--replication`` captures into bronze tables (facts §9),
without Spark (:mod:`kraft_replay.ingest.metrics_run`).

Exit 0 with a summary (unparseable lines, unknown brokers and samples going back in time are
quarantined in ``metrics_quarantine`` and counted, not errors); exit 2 with one line on bad input
(missing file, unreadable endpoint without ``--follow``, bad option). With ``--follow``, Ctrl-C stops
after the last complete poll (every poll is published whole or not at all); exit 130.
"""

from __future__ import annotations

import argparse
import re
import sys

from kraft_replay.serve.common import add_json_option

EXAMPLES = """examples:
  kraft-replay ingest-metrics scrapes/*.prom --lake lake --cluster-id MkU3OEVBNTcwNTJENDM2Qk
  kraft-replay ingest-metrics http://broker-1:7071/metrics --broker-id 1 --lake lake --follow --interval 5s
  kraft-replay ingest-metrics export.json --lake lake --broker-label instance_broker_id
  kraft-replay ingest-metrics quorum-captures.txt --lake lake --format quorum
  kraft-replay ingest-metrics renamed.prom --lake lake --metric-map offset=kafka_broker_metadata_applied_offset \\
      --metric-map timestamp=kafka_broker_metadata_applied_timestamp_ms
"""


def _interval(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"bad interval {text!r}: use e.g. 1s, 500ms, 2m or a number of seconds")
    v = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    if v <= 0:
        raise argparse.ArgumentTypeError(f"bad interval {text!r}: must be > 0")
    return v


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ingest-metrics",
        help="ingest brokers' last-applied-record-offset samples and quorum --status / --replication captures",
        description="Read the broker-metadata-metrics last-applied-record-offset / -timestamp samples (Prometheus "
                    "text exposition from a JMX exporter, a Prometheus query_range JSON result, CSV or JSON lines "
                    "with the broker_progress columns) into broker_progress, and kafka-metadata-quorum describe "
                    "--replication captures (fetch positions, not applied images) into quorum_replication and "
                    "describe --status captures (leader, epoch, high watermark, voters) into quorum_status. "
                    "Bad lines are quarantined in metrics_quarantine with source, line and reason.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sources", nargs="+", metavar="FILE|URL", help="files, directories, globs or http(s):// endpoints")
    p.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    add_json_option(p)
    p.add_argument("--cluster-id", default=None,
                   help="cluster of the samples (default: the lake's only cluster in metadata_log)")
    p.add_argument("--format", dest="fmt", choices=("prometheus", "query_range", "csv", "jsonl", "quorum"),
                   default=None, help="input format (default: detected per source)")
    p.add_argument("--broker-id", type=int, default=None,
                   help="broker of samples with no broker label (a scrape of one broker's exporter)")
    p.add_argument("--broker-label", default=None,
                   help="label holding the broker id (default: the first of broker_id, broker, node_id, nodeId, "
                        "kafka_broker_id present)")
    p.add_argument("--metric-map", action="append", default=[], metavar="offset=NAME|timestamp=NAME",
                   help="metric names when exporter rules renamed them (default: the JMX exporter's "
                        "kafka_server_broker_metadata_metrics_last_applied_record_offset / _timestamp)")
    p.add_argument("--follow", action="store_true",
                   help="keep polling: endpoints scraped again, files re-read when modified, until Ctrl-C")
    p.add_argument("--interval", type=_interval, default=1.0, help="time between polls with --follow (default 1s)")
    p.add_argument("--polls", type=int, default=None, help="with --follow: stop after this many polls")
    p.set_defaults(func=run)


def _cluster_id(lake, given: str | None) -> str:  # noqa: ANN001
    from kraft_replay.ingest.errors import IngestError
    from kraft_replay.ingest.metrics_run import lake_clusters

    if given:
        return given
    ids = lake_clusters(lake)
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise IngestError("ingest-metrics: pass --cluster-id C (the lake holds no metadata_log to take it from)")
    raise IngestError(f"ingest-metrics: the lake holds clusters {', '.join(ids)}: pass --cluster-id C")


def run(args: argparse.Namespace) -> int:
    from kraft_replay.ingest import metrics as M
    from kraft_replay.ingest.errors import IngestError
    from kraft_replay.ingest.metrics_run import MetricsSummary, ingest_metrics, resolve_sources
    from kraft_replay.serve.common import open_lake_driver

    try:
        names = M.metric_names(args.metric_map, args.broker_label)
    except ValueError as e:
        raise IngestError(str(e)) from e
    if args.polls is not None and args.polls < 1:
        raise IngestError(f"--polls must be >= 1, got {args.polls}")
    resolve_sources(list(args.sources))  # bad paths fail here, before the lake is opened
    lake = open_lake_driver(args)  # no Spark job: parsing and the merge run on this process
    cluster = _cluster_id(lake, args.cluster_id)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        summary = ingest_metrics(lake, list(args.sources), cluster, fmt=args.fmt, names=names,
                                 broker_id=args.broker_id, follow=args.follow, interval=args.interval,
                                 polls=args.polls, say=say)
    except KeyboardInterrupt:
        print("kraft-replay ingest-metrics: interrupted; every completed poll is published", file=sys.stderr)
        return 130
    assert isinstance(summary, MetricsSummary)
    from kraft_replay.serve.common import print_summary

    return print_summary(summary, args.json)
