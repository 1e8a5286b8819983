"""Spark job entry point: replay the bronze tables into the silver tables.

    python jobs/replay.py --lake DIR [--cluster-id C] [--mode batch|stream] [--trigger S | --available-now]
        [--profile NAME] [--backend B]

Same options and exit codes as ``kraft-replay replay`` (it runs that command; usable with
``spark-submit`` or plain Python).
"""

from __future__ import annotations

import sys

from kraft_replay.serve.cli import job_argv, main


def to_cli_argv(argv: list[str]) -> list[str]:
    """Move the global options (``--profile``, ``--backend``) in front of the ``replay`` subcommand."""
    return job_argv("replay", argv)


if __name__ == "__main__":
    sys.exit(main(to_cli_argv(sys.argv[1:])))
