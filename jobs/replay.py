"""Spark job entry point: replay the bronze tables into the silver tables.

    python jobs/replay.py --lake DIR [--cluster-id C] [--mode batch] [--profile NAME] [--backend B]

Same options and exit codes as ``kraft-replay replay`` (it runs that command; usable with
``spark-submit`` or plain Python).
"""

from __future__ import annotations

import sys

from kraft_replay.serve.cli import main

_GLOBAL = ("--profile", "--backend")


def to_cli_argv(argv: list[str]) -> list[str]:
    """Move the global options (``--profile``, ``--backend``) in front of the ``replay`` subcommand."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if name in _GLOBAL:
            if "=" in a:
                front.append(a)
            elif i + 1 < len(argv):
                front.extend(argv[i : i + 2])
                i += 1
        else:
            rest.append(a)
        i += 1
    return [*front, "replay", *rest]


if __name__ == "__main__":
    sys.exit(main(to_cli_argv(sys.argv[1:])))
