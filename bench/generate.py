"""Benchmark: generate the ``large`` scenario (100M log records plus proportional timelines and
requests) into a scratch lake and print records/s and the time of each table.

Run under the shared lock on the shared 2-core machine:
    flock /tmp/kraft-heavy.lock .venv/bin/python bench/generate.py [--scenario large] [--lake DIR] [--driver-memory 8g]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path


TARGET_RECORDS = 100_000_000
TARGET_SECONDS = 600


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="large")
    ap.add_argument("--lake", default=None, help="scratch lake dir (default: a temp dir, removed afterwards)")
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--shuffle-partitions", default="16")
    args = ap.parse_args(argv)

    from kraft_replay.config import load_profile
    from kraft_replay.generate.runner import generate
    from kraft_replay.generate.scenario import load_scenario
    from kraft_replay.lake import Lake
    from kraft_replay.spark import get_spark

    profile = load_profile("local")
    profile.spark.driver_memory = args.driver_memory
    spark = get_spark(profile, **{"spark.sql.shuffle.partitions": args.shuffle_partitions})
    root = Path(args.lake or tempfile.mkdtemp(prefix="kraft-bench-gen-"))
    lake = Lake(str(root), spark, backend="deltars")
    sc = load_scenario(args.scenario)
    t0 = time.time()
    res = generate(spark, lake, sc, progress=lambda m: print(f"[{time.time() - t0:7.1f}s] {m}", flush=True))
    total = time.time() - t0
    n = res.rows["metadata_log"]
    print(f"scenario {sc.name}: {n:,} metadata_log rows, total {total:.1f}s, "
          f"{n / total:,.0f} log records/s overall, {n / res.seconds['metadata_log']:,.0f} records/s for metadata_log alone")
    # the target: 100M log records (plus proportional timelines and requests) in < 10 min here
    target_s, target_n = TARGET_SECONDS, TARGET_RECORDS
    projected = total * target_n / max(n, 1)
    verdict = "meets" if projected < target_s else "misses"
    print(f"target: {target_n:,} records in < {target_s / 60:.0f} min ({target_n / target_s:,.0f} records/s); "
          f"measured {n / total:,.0f} records/s -> {projected / 60:.1f} min for {target_n:,}: {verdict} the target")
    for name, rows in res.rows.items():
        print(f"  {name:25s} {rows:>13,} rows  {res.seconds.get(name, 0.0):8.1f}s")
    if args.lake is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
