"""``kraft-replay report --lake DIR --out FILE.html [--cluster-id C] [--json]``: the run's report, one
self-contained HTML page (:mod:`kraft_replay.serve.report`); no Spark needed."""

from __future__ import annotations

import argparse
import json
import sys

EPILOG = """examples:
  kraft-replay report --lake ./lake --out report.html
  kraft-replay report --lake ./lake --out /tmp/r.html --cluster-id dEmOcLuStEr00000000000A --json
"""


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kraft_replay.config import load_profile
    from kraft_replay.lake.reader import LakeReader
    from kraft_replay.serve import charts
    from kraft_replay.serve.cli import UserError
    from kraft_replay.serve.report import facts_line, write_report

    from kraft_replay.lake.keys import clear_secrets_warning

    root = args.lake or load_profile(args.profile).lake.root
    if not root or not Path(root).is_dir():
        raise UserError(f"no lake at {root!r}: pass --lake DIR (a lake `kraft-replay replay` and `outcomes` wrote)")
    warning = clear_secrets_warning(root)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    clusters = charts.load_frames(LakeReader(root)).clusters
    if args.cluster_id and args.cluster_id not in clusters:
        raise UserError(f"cluster {args.cluster_id!r} has no replay or outcome tables in {root} "
                        f"(clusters: {', '.join(clusters) or 'none'})")
    try:
        rep = write_report(root, args.out, args.cluster_id)
    except OSError as exc:
        raise UserError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps({"path": str(rep.path.resolve()), "clusters": rep.clusters, "facts": rep.facts}, indent=2))
        return 0
    print(f"report: {rep.path.resolve()} ({rep.path.stat().st_size / 1e6:.1f} MB, {len(rep.clusters)} cluster(s))")
    for c, facts in rep.facts.items():
        print(f"  {c}: {facts_line(facts)}")
    print(f"open it in a browser: file://{rep.path.resolve()}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="one self-contained HTML page of a run: lag, tokens, fencing, features, broker states",
                       description="Write the report of a replayed lake: cache lag per broker, what consistency tokens "
                                   "avoided and cost, stale-leader writes, the feature-level and broker-state "
                                   "timelines, as charts in one HTML file that opens offline.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, metavar="FILE.html", help="where to write the page")
    p.add_argument("--cluster-id", default=None, metavar="C", help="only this cluster (default: every cluster)")
    p.add_argument("--json", action="store_true", help="print the path and headline figures as JSON")
    p.set_defaults(func=_run)
