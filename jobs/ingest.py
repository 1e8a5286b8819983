"""Spark job entry point: ingest KRaft metadata files into the bronze tables.

    python jobs/ingest.py PATH... --lake DIR [--cluster-id ID] [--strict] [--profile NAME] [--backend B]

Same options and exit codes as ``kraft-replay ingest`` (it runs that command; usable with
``spark-submit`` or plain Python).
"""

from __future__ import annotations

import sys

from kraft_replay.serve.cli import job_argv, main


def to_cli_argv(argv: list[str]) -> list[str]:
    """Move the global options (``--profile``, ``--backend``) in front of the ``ingest`` subcommand."""
    return job_argv("ingest", argv)


if __name__ == "__main__":
    sys.exit(main(to_cli_argv(sys.argv[1:])))
