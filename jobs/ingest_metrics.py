"""Spark job entry point: broker metric samples and quorum captures into the bronze metric tables.

    python jobs/ingest_metrics.py FILE|URL... --lake DIR [--cluster-id C] [--follow --interval 1s] [--profile NAME]

Same options and exit codes as ``kraft-replay ingest-metrics`` (it runs that command; usable with
``spark-submit`` or plain Python).
"""

from __future__ import annotations

import sys

from kraft_replay.serve.cli import job_argv, main


def to_cli_argv(argv: list[str]) -> list[str]:
    """Move the global options (``--profile``, ``--backend``) in front of the ``ingest-metrics`` subcommand."""
    return job_argv("ingest-metrics", argv)


if __name__ == "__main__":
    sys.exit(main(to_cli_argv(sys.argv[1:])))
