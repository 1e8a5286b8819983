"""``kraft-replay demo --lake DIR [--scenario demo]``: the whole pipeline on a generated cluster.

1. **generate** the scenario (``conf/scenarios/demo.yaml``: 6 brokers, 3 controllers, two hours of
   restarts, partitions, failovers, a rolling upgrade and feature updates) as a node's real files
   (segments, snapshots, ``bootstrap.checkpoint``) under ``<lake>/_demo/node``, with the brokers'
   applied-offset metrics and the clients' requests (a scratch lake ``<lake>/_demo/source``);
2. **ingest** the node's files into the bronze tables and take the metrics and request logs beside them;
3. **replay** the log into the silver tables, the brokers' applied offsets and ``cache_lag``;
4. **outcomes**: the proposals' gold tables;
5. **report**: ``<lake>/report.html``;
then says how to open the dashboard and query the tables. A rerun on the same lake ingests nothing
twice and rewrites the silver and gold tables with the same rows.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

#: tables the generator writes that a real user would bring from monitoring and client logs
SIDE_TABLES = ("broker_progress", "metadata_requests", "produce_requests", "feature_update_requests", "scenario_events")


@dataclass
class DemoResult:
    """What the demo did: per step its seconds, and the row counts it checks."""

    cluster_id: str
    report: Path
    seconds: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def run_demo(spark, lake, scenario_name: str = "demo", out: Callable[[str], None] = print) -> DemoResult:  # noqa: ANN001
    """generate → segment files → ingest → replay (+ cache lag) → outcomes → report, on ``lake``."""
    from kraft_replay.generate.runner import generate
    from kraft_replay.generate.scenario import load_scenario
    from kraft_replay.ingest.pipeline import run_ingest
    from kraft_replay.lake import Lake
    from kraft_replay.outcomes.cache_lag import write_cache_lag
    from kraft_replay.outcomes.run import run_outcomes
    from kraft_replay.replay.run import run_replay
    from kraft_replay.serve.report import facts_line, write_report

    scenario = load_scenario(scenario_name)
    cid = scenario.cluster_id
    root = Path(lake.root)
    node, source_root = root / "_demo" / "node", root / "_demo" / "source"
    res = DemoResult(cluster_id=cid, report=root / "report.html")
    step = time.time()

    def done(name: str) -> None:
        nonlocal step
        res.seconds[name] = time.time() - step
        step = time.time()

    out(f"kraft-replay demo: scenario {scenario.name} (cluster {cid}) into lake {lake.root}")
    if (node / "__cluster_metadata-0").is_dir() and lake.exists("metadata_log"):
        out(f"[1/5 generate] {node} already holds the cluster's files: not generated again")
    else:
        source = Lake(str(source_root), spark, backend=lake.backend)
        gen = generate(spark, source, scenario, segments_out=str(node), progress=lambda m: out(f"[1/5 generate] {m}"))
        out(f"[1/5 generate] {gen.rows.get('metadata_log', 0):,} log records as {len(gen.segment_files)} files in {node}")
    done("generate")

    ing = run_ingest(spark, lake, [str(node)], cluster_id=cid, say=lambda m: out(f"[2/5 ingest] {m.strip()}"))
    for line in ing.lines():
        out(f"[2/5 ingest] {line}")
    source = Lake(str(source_root), spark, backend=lake.backend)
    for name in SIDE_TABLES:
        rows = source.read(name)
        lake.create_table(name, rows.schema, partition_by=["cluster_id"])
        lake.overwrite(name, rows, replace_where=f"cluster_id = '{cid}'")
        res.rows[name] = lake.read(name).where(f"cluster_id = '{cid}'").count()
    out("[2/5 ingest] broker metrics and client request logs: "
        + ", ".join(f"{n} {res.rows[n]:,}" for n in SIDE_TABLES))
    done("ingest")

    summary = run_replay(spark, lake, cluster_id=cid, say=lambda m: out(f"[3/5 replay] {m.strip()}"))
    for line in summary.lines():
        out(f"[3/5 replay] {line}")
    res.rows["cache_lag"] = write_cache_lag(lake, [cid], say=lambda m: out(f"[3/5 replay] {m.strip()}"),
                                            changes=summary.leader_changes)
    done("replay")

    outcomes = run_outcomes(spark, lake, cluster_id=cid, say=lambda m: out(f"[4/5 outcomes] {m.strip()}"))
    for line in outcomes.lines():
        out(f"[4/5 outcomes] {line}")
    res.rows.update(outcomes.rows)
    done("outcomes")

    rep = write_report(lake.root, res.report, cid)
    out(f"[5/5 report] {res.report} ({res.report.stat().st_size / 1e6:.1f} MB): {facts_line(rep.facts[cid])}")
    done("report")

    res.rows["metadata_log"] = lake.read("metadata_log").where(f"cluster_id = '{cid}'").count()
    if res.rows["metadata_log"] == 0:
        res.problems.append("metadata_log holds no row of the demo cluster")
    for name in ("partitions", "cache_lag", "consistency_outcomes", "fencing_outcomes", "feature_transitions"):
        if res.rows.get(name, 0) == 0 and (not lake.exists(name) or lake.read(name).where(f"cluster_id = '{cid}'").count() == 0):
            res.problems.append(f"{name} is empty")
    return res


def _run(args: argparse.Namespace) -> int:
    from kraft_replay.generate.plan import build_plan
    from kraft_replay.generate.scenario import load_scenario
    from kraft_replay.serve.common import open_lake

    build_plan(load_scenario(args.scenario))  # a bad scenario is one line before Spark starts
    spark, lake = open_lake(args)
    t0 = time.time()
    res = run_demo(spark, lake, args.scenario)
    print(f"summary ({time.time() - t0:.0f} s: " + ", ".join(f"{k} {v:.0f} s" for k, v in res.seconds.items()) + ")")
    if res.problems:
        print("demo FAILED: " + "; ".join(res.problems))
        return 1
    print("demo OK")
    print(f"  report:    open file://{res.report.resolve()}")
    print(f"  dashboard: kraft-replay dashboard --lake {lake.root}   (then open http://127.0.0.1:8050)")
    print(f"  SQL:       kraft-replay sql --lake {lake.root} \"SELECT broker_id, max(offset_lag_p99) FROM cache_lag "
          "GROUP BY broker_id\"")
    print(f"  tables:    kraft-replay tables --lake {lake.root}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("demo", help="the whole pipeline on a generated cluster: generate, ingest, replay, outcomes, report",
                       description="Generate the demo scenario as a node's real files, ingest them with the brokers' "
                                   "metrics and the clients' requests, replay, compute the outcomes, write the report, "
                                   "then point at the dashboard. On the embedded default, a few minutes on 2 cores.",
                       epilog="examples:\n  kraft-replay demo --lake ./lake\n"
                              "  kraft-replay demo --lake /tmp/small --scenario tiny     # a smaller cluster, faster\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default="demo", help="scenario name in conf/scenarios or a YAML path (default demo)")
    p.set_defaults(func=_run)
