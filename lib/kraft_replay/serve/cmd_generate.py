"""``kraft-replay generate --scenario NAME|FILE --lake DIR [--segments-out DIR] [--seed N]``.

Generates a scenario (``conf/scenarios/<name>.yaml`` or a YAML file) into the lake's bronze tables,
optionally also as real KRaft segment/snapshot files. Exit 2 with one line naming the key on a bad
scenario file; nothing is written in that case (the scenario is validated and planned first).
"""

from __future__ import annotations

import argparse
import sys

from kraft_replay.serve.common import add_json_option


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "generate",
        help="generate a scenario's metadata log, apply timelines and client requests into the lake",
        description="Generate a realistic KRaft cluster from a scenario file, in Spark, deterministic for a seed.",
        epilog="examples:\n"
               "  kraft-replay generate --scenario tiny --lake ./lake\n"
               "  kraft-replay generate --scenario demo --lake ./lake --segments-out ./demo-node   # also real files\n"
               "  kraft-replay generate --scenario my-cluster.yaml --seed 7 --lake ./lake\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scenario", required=True, help="scenario name in conf/scenarios (tiny, demo, large) or a YAML path")
    p.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    add_json_option(p)
    p.add_argument("--segments-out", default=None, metavar="DIR",
                   help="also write the log as real segments, snapshots and bootstrap.checkpoint under DIR")
    p.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kraft_replay.generate.plan import build_plan
    from kraft_replay.generate.runner import generate
    from kraft_replay.generate.scenario import load_scenario
    from kraft_replay.serve.common import open_lake

    scenario = load_scenario(args.scenario, seed=args.seed)
    build_plan(scenario)  # planning errors (e.g. overlapping events) surface before Spark starts
    spark, lake = open_lake(args)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    res = generate(spark, lake, scenario, segments_out=args.segments_out, progress=say)
    if args.json:
        from kraft_replay.serve.common import print_json

        print_json({"scenario": scenario.name, "seed": scenario.seed, "cluster_id": scenario.cluster_id,
                    "lake": lake.root, "rows": res.rows, "seconds": res.seconds,
                    "segment_files": [str(f) for f in res.segment_files]})
        return 0
    print(f"generated scenario {scenario.name} (seed {scenario.seed}, cluster {scenario.cluster_id}) "
          f"in {res.seconds['total']:.1f}s", flush=True)
    for name, rows in res.rows.items():
        print(f"  {name:25s} {rows:>12,} rows", flush=True)
    if res.segment_files:
        print(f"  {len(res.segment_files)} files in {args.segments_out}", flush=True)
    return 0
