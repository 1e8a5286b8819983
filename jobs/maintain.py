"""Spark job entry point: compact and vacuum every table of the lake (the maintenance DAG's ``compact`` and
``vacuum`` tasks).

    python jobs/maintain.py --lake DIR [--only compact|vacuum] [--retain-hours H] [--profile NAME] [--backend B]

Compaction rewrites each partition's small files into files of the profile's target size
(``Lake.compact``: no data change, streaming readers skip it); vacuum deletes the files that no version
of the last ``--retain-hours`` needs and staged files never committed (``Lake.vacuum``; the lake's own
``_published`` table too). Exit 0 with one line per table; exit 2 with one line on a bad lake path or
option. Vacuum also deletes the staged files of a writer still running: schedule it apart from them.
"""

from __future__ import annotations

import argparse
import os
import sys

EPILOG = """examples:
  python jobs/maintain.py --lake ./lake                              # compact, then vacuum (168 h)
  python jobs/maintain.py --lake ./lake --only vacuum --retain-hours 24
  spark-submit jobs/maintain.py --lake s3://bucket/kraft-lake --profile cluster --only compact
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/maintain.py", description="Compact and vacuum every table of the lake.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lake", required=True, metavar="DIR", help="lake root (local dir or any URI delta-rs supports)")
    p.add_argument("--only", choices=("compact", "vacuum"), default=None, help="one step only (default: both)")
    p.add_argument("--retain-hours", type=float, default=168.0, metavar="H",
                   help="vacuum keeps the files of the versions of the last H hours (default 168)")
    p.add_argument("--profile", default="local", metavar="NAME", help="conf/<profile>.yaml (default local)")
    p.add_argument("--backend", choices=("auto", "deltars", "delta-spark"), default=None,
                   help="Delta backend (default from the profile)")
    return p


def maintain(args: argparse.Namespace) -> None:
    """Compact and/or vacuum every table of ``args.lake``, a line per table on stdout."""
    from kraft_replay.lake import PUBLISHED
    from kraft_replay.serve.cli import UserError
    from kraft_replay.serve.common import open_lake

    if args.retain_hours < 0:
        raise UserError(f"--retain-hours must be >= 0, got {args.retain_hours:g}")
    local = "://" not in args.lake
    if local and not os.path.isdir(args.lake):  # before Spark starts
        raise UserError(f"no lake at {args.lake}: pass the lake's directory with --lake")
    if local and not any(os.path.isdir(os.path.join(args.lake, d, "_delta_log")) for d in os.listdir(args.lake)):
        raise UserError(f"no tables in {args.lake}: not a kraft-replay lake? check --lake")
    _spark, lake = open_lake(args)
    names = lake.table_names()
    if not names:
        raise UserError(f"no tables in {lake.root}: not a kraft-replay lake? check --lake")
    if args.only in (None, "compact"):
        for name in names:
            r = lake.compact(name)
            print(f"compact {name}: " + (f"{r.removed_files} small file(s) into {r.files} (version {r.version})"
                                         if r.version is not None else "nothing to compact"), flush=True)
    if args.only in (None, "vacuum"):
        for name in [*names, PUBLISHED]:
            removed = lake.vacuum(name, args.retain_hours)
            print(f"vacuum {name}: {len(removed)} file(s) deleted", flush=True)


def main(argv: list[str] | None = None) -> int:
    from kraft_replay.config import ConfigError
    from kraft_replay.lake import LakeError
    from kraft_replay.serve.cli import UserError
    from kraft_replay.spark import JavaNotFoundError, SessionError

    args = build_parser().parse_args(argv)
    try:
        maintain(args)
    except (UserError, LakeError, ConfigError, SessionError, JavaNotFoundError) as exc:
        print(f"jobs/maintain.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
