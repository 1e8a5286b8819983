"""``kraft-replay redact --lake DIR [--json]``: fingerprint the SCRAM key material and sensitive config
values a lake holds in the clear (ingested with ``--keep-secrets``, or made before ingest fingerprinted
them), in bronze and silver, and remove the replaced files and the tables' earlier versions for good
(:mod:`kraft_replay.ingest.redact`). Idempotent; killed halfway, readers see the old state or the new.
"""

from __future__ import annotations

import argparse
import sys

from kraft_replay.serve.common import add_json_option


def _run(args: argparse.Namespace) -> int:
    from kraft_replay.ingest.redact import redact_lake
    from kraft_replay.serve.common import open_lake

    spark, lake = open_lake(args)
    summary = redact_lake(spark, lake, say=lambda line: print(line, file=sys.stderr, flush=True))
    from kraft_replay.serve.common import print_summary

    return print_summary(summary, args.json)


def register(sub) -> None:
    p = sub.add_parser("redact", help="fingerprint the credentials a lake holds in the clear; drop the old versions",
                       description="Replace SCRAM salts/keys and sensitive config values held in the clear by keyed "
                                   "fingerprints in metadata_log, snapshot_records, configs and image_snapshots, in one "
                                   "published run; then vacuum the replaced files and drop the tables' history before "
                                   "the rewrite (those versions can no longer be read). Running it again changes nothing.",
                       epilog="example:\n  kraft-replay redact --lake ./lake", formatter_class=argparse.RawDescriptionHelpFormatter)
    add_json_option(p)
    p.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    p.set_defaults(func=_run)
