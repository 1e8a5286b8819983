"""Spark job entry point: generate a scenario into the lake.

    python jobs/generate.py --scenario NAME|FILE --lake DIR [--segments-out DIR] [--seed N] [--profile NAME] [--backend B]

Same options and exit codes as ``kraft-replay generate`` (it runs that command; usable with
``spark-submit`` or plain Python).
"""

from __future__ import annotations

import sys

from kraft_replay.serve.cli import job_argv, main


def to_cli_argv(argv: list[str]) -> list[str]:
    """Move the global options (``--profile``, ``--backend``) in front of the ``generate`` subcommand."""
    return job_argv("generate", argv)


if __name__ == "__main__":
    sys.exit(main(to_cli_argv(sys.argv[1:])))
