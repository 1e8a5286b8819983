"""Spark job entry point: the proposals' outcome tables (gold) from the replay's tables.

    python jobs/outcomes.py --lake DIR [--cluster-id C] [--only consistency|fencing|features|broker_states|discovery]
        [--policy FILE] [--features-policy FILE] [--profile NAME] [--backend B]

Same options and exit codes as ``kraft-replay outcomes`` (it runs that command; usable with
``spark-submit`` or plain Python).
"""

from __future__ import annotations

import sys

from kraft_replay.serve.cli import job_argv, main


def to_cli_argv(argv: list[str]) -> list[str]:
    """Move the global options (``--profile``, ``--backend``) in front of the ``outcomes`` subcommand."""
    return job_argv("outcomes", argv)


if __name__ == "__main__":
    sys.exit(main(to_cli_argv(sys.argv[1:])))
