"""``kraft-replay redact --lake DIR [--json]``: fingerprint the SCRAM key material and sensitive config
values a lake holds in the clear (ingested with ``--keep-secrets``, or made before ingest fingerprinted
them), in bronze and silver, move the quarantined bytes of a lake made before ``ingest_quarantine_raw``
into that table, and remove the replaced files and the tables' earlier versions for good
(:mod:`kraft_replay.ingest.redact`). Idempotent; killed halfway, readers see the old state or the new.

It rewrites a lake for good, so it takes the lake from ``--lake`` only (never the profile's default),
and refuses a path that is not a directory or holds no Delta table before anything starts or is
written (one line, exit 2).
"""

from __future__ import annotations

import argparse
import sys

from kraft_replay.serve.common import add_json_option

DESCRIPTION = """\
Replace the SCRAM salts/keys and sensitive config values a lake holds in the clear (ingested with
--keep-secrets, or before ingest fingerprinted them) by keyed fingerprints in metadata_log,
snapshot_records, configs and image_snapshots; move the bytes of quarantined ranges out of the
raw column of an old ingest_quarantine into ingest_quarantine_raw (shown by `sql --include-raw`
only). All in one published run; then the replaced files are vacuumed and the rewritten tables'
history before the rewrite is dropped: those versions can no longer be read. Running it again
changes nothing; run `kraft-replay replay` afterwards to fill scram_credentials'
credential_fingerprint."""


def check_lake_root(lake: str | None) -> str:
    """The ``--lake`` of a command that rewrites a lake: given, a directory, holding a Delta table
    (a :class:`~kraft_replay.serve.cli.UserError` in one line otherwise; nothing is written)."""
    from kraft_replay.lake.files import table_dirs
    from kraft_replay.serve.cli import UserError

    if not lake:
        raise UserError("redact rewrites a lake for good: name it with --lake DIR (the profile's default lake is not used)")
    tables = table_dirs(lake)
    if tables is None:
        raise UserError(f"lake {lake}: no such directory: pass --lake DIR of a lake that ingest wrote")
    if not tables:
        raise UserError(f"{lake} is not a kraft-replay lake (it holds no Delta table): pass --lake DIR of a lake that ingest wrote")
    return lake


def _run(args: argparse.Namespace) -> int:
    from kraft_replay.ingest.redact import redact_lake
    from kraft_replay.serve.common import open_lake, print_summary

    args.lake = check_lake_root(getattr(args, "lake", None))
    spark, lake = open_lake(args)
    summary = redact_lake(spark, lake, say=lambda line: print(line, file=sys.stderr, flush=True))
    return print_summary(summary, args.json)


def register(sub) -> None:
    p = sub.add_parser("redact", help="fingerprint the credentials a lake holds in the clear; drop the old versions",
                       description=DESCRIPTION, epilog="example:\n  kraft-replay redact --lake ./lake",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_json_option(p)
    p.add_argument("--lake", default=argparse.SUPPRESS, metavar="DIR",
                   help="the lake to rewrite (required; the same as the global --lake)")
    p.set_defaults(func=_run)
