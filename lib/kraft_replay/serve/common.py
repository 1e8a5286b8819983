"""Helpers shared by CLI subcommands: opening the session and the lake from parsed args."""

from __future__ import annotations

import argparse


def open_lake(args: argparse.Namespace, *, stream: bool = False):
    """Return ``(spark, lake)`` for the profile, ``--lake`` and ``--backend`` given on the command line
    (``stream``: for a live replay, the profile's stream JVM options added: :func:`~kraft_replay.config.stream_profile`)."""
    from kraft_replay.config import load_profile, stream_profile
    from kraft_replay.lake import Lake
    from kraft_replay.spark import get_spark

    profile = load_profile(args.profile)
    if stream:
        profile = stream_profile(profile)
    root = args.lake or profile.lake.root
    if not root:
        from kraft_replay.serve.cli import UserError

        raise UserError(f"no lake root: pass --lake DIR (profile {profile.name!r} sets none)")
    backend = args.backend or profile.lake.backend
    spark = get_spark(profile, delta=backend == "delta-spark")
    return spark, Lake(root, spark, backend=backend, target_file_rows=profile.lake.target_file_rows)


def open_lake_driver(args: argparse.Namespace):
    """The lake of ``--lake`` / ``--backend`` / the profile for a command that needs no Spark job (the live
    ingest, metric ingest): opened driver only — no JVM starts — unless ``--backend delta-spark`` (or the
    profile) asks for the backend that lives in Spark's JVM; ``auto`` is the embedded backend here."""
    from kraft_replay.config import load_profile
    from kraft_replay.lake import Lake

    profile = load_profile(args.profile)
    backend = args.backend or profile.lake.backend
    if backend == "delta-spark":
        return open_lake(args)[1]
    root = args.lake or profile.lake.root
    if not root:
        from kraft_replay.serve.cli import UserError

        raise UserError(f"no lake root: pass --lake DIR (profile {profile.name!r} sets none)")
    return Lake(root, None, backend="deltars", target_file_rows=profile.lake.target_file_rows)


def add_json_option(p: argparse.ArgumentParser) -> None:
    """A job command's ``--json``: its summary printed by :func:`print_json`."""
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object (progress stays on stderr)")


def print_summary(summary: object, as_json: bool) -> int:
    """A job's summary: one JSON object (``--json``, :func:`print_json`) or its ``lines()``; returns 0."""
    if as_json:
        print_json(summary)
        return 0
    for line in summary.lines():  # type: ignore[attr-defined]
        print(line, flush=True)
    return 0


def print_json(summary: object, **extra: object) -> None:
    """A job's summary (a dataclass) and ``extra`` fields as one JSON object on stdout (``--json``)."""
    import dataclasses
    import json

    doc = dataclasses.asdict(summary) if dataclasses.is_dataclass(summary) else dict(summary)  # type: ignore[arg-type]
    doc.update(extra)
    print(json.dumps(doc, default=str, indent=2), flush=True)
