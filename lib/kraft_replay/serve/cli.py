"""``kraft-replay`` command line.

Each subcommand lives in its own module ``kraft_replay.serve.cmd_<name>`` exposing
``register(subparsers)``, which adds a parser whose ``func(args) -> int`` runs it.
Errors that users can fix (bad input, missing files, lake problems) are raised as
:class:`UserError` subclasses and printed as one line, exit code 2; nothing is half-committed.

The console shows a command's own progress and summary lines only: Spark's output (log4j, the JVM's
warnings, PySpark's Python warnings) goes to ``<lake>/_logs/<command>-<timestamp>.log``, named on
stderr at the end when anything but the Java runtime's start-up notice was written there (``--verbose``:
all of it on stderr instead).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from pathlib import Path
from urllib.parse import unquote

# Subcommand modules, in the order `--help` lists them. Missing modules are skipped so the
# CLI keeps working while later issues add theirs.
SUBCOMMANDS = ("demo", "tables", "ingest", "ingest_metrics", "generate", "replay", "image", "outcomes", "features", "sql", "dashboard", "report",
               "redact", "live")


class UserError(Exception):
    """An error the user can fix; printed as one line without a traceback."""


def _user_error_types() -> tuple[type[BaseException], ...]:
    """The error classes printed as one line. Only modules already loaded are looked at (an error can
    only come from a module that ran), so a command imports nothing it does not use: evaluated when an
    error reaches :func:`main`."""
    types: list[type[BaseException]] = [UserError]
    for mod, name in (
        ("kraft_replay.lake.errors", "LakeError"),
        ("kraft_replay.config", "ConfigError"),
        ("kraft_replay.spark.session", "JavaNotFoundError"),
        ("kraft_replay.spark.session", "SessionError"),
        ("kraft_replay.ingest.errors", "IngestError"),
        ("kraft_replay.generate.errors", "ScenarioError"),
        ("kraft_replay.replay.images", "ImageError"),
        ("kraft_replay.serve.cli", "UserError"),  # the importable module's class when run as `python -m`
    ):
        cls = getattr(sys.modules.get(mod), name, None)
        if cls is not None:
            types.append(cls)
    return tuple(types)


# Options every command takes, before or after the subcommand: (flags, keyword arguments, default).
GLOBAL_OPTIONS: tuple[tuple[str, dict, object], ...] = (
    ("--lake", {"metavar": "DIR", "help": "lake root (local dir or any URI delta-rs supports); default from the profile"}, None),
    ("--profile", {"metavar": "NAME", "help": "conf/<profile>.yaml (local, cluster, ...); default local"}, "local"),
    ("--backend", {"choices": ("auto", "deltars", "delta-spark"), "help": "Delta backend (default from the profile)"}, None),
    ("--verbose", {"action": "store_true", "help": "Spark's log and the JVM's warnings on stderr (default: in a file "
                                                   "under <lake>/_logs/, named at the end when not empty)"}, False),
)


def job_argv(command: str, argv: list[str]) -> list[str]:
    """The ``kraft-replay`` argv of a Spark job entry point (``jobs/<command>.py ARGS``): the global
    options (``--profile``, ``--backend``) moved in front of ``command``, the rest after it."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.split("=", 1)[0] in ("--profile", "--backend"):
            if "=" in a:
                front.append(a)
            elif i + 1 < len(argv):
                front.extend(argv[i : i + 2])
                i += 1
        else:
            rest.append(a)
        i += 1
    return [*front, command, *rest]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kraft-replay")
    except PackageNotFoundError:  # run from a source tree without an install
        return "unknown (not installed)"


def _add_global_options(p: argparse.ArgumentParser, top: bool) -> None:
    """The global options on ``p``. On a subcommand they default to SUPPRESS so a value given
    before the subcommand is kept unless it is given again after it."""
    have = set(p._option_string_actions)  # noqa: SLF001 - a subcommand may already define --lake itself
    for flag, kwargs, default in GLOBAL_OPTIONS:
        if flag not in have:
            p.add_argument(flag, default=default if top else argparse.SUPPRESS, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraft-replay",
        description="Replay Kafka's KRaft metadata log with Spark into Delta tables.",
    )
    parser.add_argument("--version", action="version", version=f"kraft-replay {_version()}")
    _add_global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"kraft_replay.serve.cmd_{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"kraft_replay.serve.cmd_{name}":
                continue
            raise
        module.register(sub)
    for p in sub.choices.values():
        _add_global_options(p, top=False)
    return parser


def spark_log_dir(root: str | None) -> Path:
    """Where a run's Spark log goes for lake ``root``: ``<root>/_logs`` for a local lake (a path or a
    ``file://`` URI), else (an object store, or no lake) a local directory (``kraft-replay-<uid>/_logs``
    in the temp directory; also where it goes when the lake's cannot be written)."""
    if root and "://" in root:
        scheme, rest = root.split("://", 1)
        root = unquote(rest) if scheme == "file" else None
    if not root:
        from kraft_replay.spark.session import local_log_dir

        return local_log_dir()
    return Path(root) / "_logs"


def _lake_root(args: argparse.Namespace) -> str | None:
    if getattr(args, "lake", None):
        return args.lake
    from kraft_replay.config import load_profile

    return load_profile(args.profile).lake.root


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN and threading.current_thread() is threading.main_thread():
        # started in the background by a shell (which ignores SIGINT for its children): SIGINT is still
        # how `live`, scripts and users stop a follower cleanly
        signal.signal(signal.SIGINT, signal.default_int_handler)
    log = None
    try:
        if args.verbose:
            return int(args.func(args) or 0)
        from kraft_replay.spark.session import spark_output_to

        with spark_output_to(lambda: spark_log_dir(_lake_root(args)), args.command) as log:
            return int(args.func(args) or 0)
    except _user_error_types() as exc:
        print(f"kraft-replay {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"kraft-replay {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the output's reader stopped (`| head`): stop quietly, as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        if log is not None and log.path is not None:
            sys.stdout.flush()
            print(f"spark warnings: {log.path}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
