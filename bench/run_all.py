"""Run every benchmark in turn, each in its own process, and echo their figures.

    .venv/bin/python bench/run_all.py [--quick]

``--quick`` shrinks every workload (for a smoke run); the figures reported on issues come from the
full sizes. Benchmarks print their own figures and ratios; nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

FULL = [
    ("command start-up with and without the JVM's class archive", ["startup.py", "--rounds", "3"]),
    ("codec decode (single core)", ["codec_decode.py", "--records", "1000000"]),
    ("lake vs plain Parquet", ["lake.py", "--rows", "10000000"]),
    ("ingest end to end", ["ingest.py", "--records", "10000000", "--driver-memory", "8g"]),
    ("ingest end to end, the generator's medium scenario", ["ingest.py", "--scenario", "medium", "--driver-memory", "8g"]),
    ("generate large scenario", ["generate.py", "--scenario", "large"]),
    ("fuzz campaign, 1M hostile inputs (2 workers)", ["fuzz.py", "--inputs", "1000000", "--workers", "2"]),
    ("replay, 1M cut of medium, vs the sequential replay", ["replay.py", "--scenario", "medium", "--cut", "1000000"]),
    ("replay, medium (10M), vs the sequential replay", ["replay.py", "--scenario", "medium"]),
    ("replay, large (100M)", ["replay.py", "--scenario", "large", "--no-sequential"]),
    ("incremental replay on medium (10M) vs the whole replay", ["incremental.py", "--scenario", "medium", "--cut", "10002507",
                                                                "--new", "1000,1000,10000,100000"]),
    ("live freshness: ingest --follow + replay --mode stream, 5 min, vs --full", ["streaming.py", "--minutes", "5",
                                                                                 "--compare-full"]),
    ("live ingest: bytes on disk -> published bronze, 2 min at --interval 0.25", ["follow.py", "--seconds", "120"]),
    ("stream catch-up on medium (10M) vs the batch replay", ["stream_catchup.py", "--scenario", "medium"]),
    ("stream kill soak, 50 SIGKILLs", ["stream_soak.py", "--kills", "50"]),
    ("ingest killed after every commit", ["ingest_kills.py"]),
    ("outcomes (seeds 000, 003), medium log, vs the sequential references", ["outcomes.py", "--scenario", "medium"]),
    ("outcomes, 10M + 10M requests over the medium log", ["outcomes.py", "--scenario", "medium", "--requests", "10000000",
                                                          "--no-oracle"]),
]
QUICK = [
    ("command start-up with and without the JVM's class archive", ["startup.py", "--rounds", "1"]),
    ("codec decode (single core)", ["codec_decode.py", "--records", "100000"]),
    ("lake vs plain Parquet", ["lake.py", "--rows", "500000", "--repeat", "1"]),
    ("ingest end to end", ["ingest.py", "--records", "300000"]),
    ("generate tiny scenario", ["generate.py", "--scenario", "tiny"]),
    ("fuzz campaign, 20k hostile inputs", ["fuzz.py", "--quick"]),
    ("replay, tiny scenario, vs the sequential replay", ["replay.py", "--scenario", "tiny"]),
    ("incremental replay, tiny scenario, vs the whole replay", ["incremental.py", "--scenario", "tiny", "--cut", "6012",
                                                                "--new", "100,1000"]),
    ("live freshness, 1 min", ["streaming.py", "--minutes", "1"]),
    ("live ingest, 20 s", ["follow.py", "--seconds", "20"]),
    ("stream catch-up, tiny scenario, vs the batch replay", ["stream_catchup.py", "--scenario", "tiny"]),
    ("stream kill soak, 3 SIGKILLs", ["stream_soak.py", "--kills", "3"]),
    ("outcomes, tiny scenario, vs the sequential references", ["outcomes.py", "--scenario", "tiny"]),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small workloads, for a smoke run")
    args = ap.parse_args(argv)
    failed = []
    for title, cmd in QUICK if args.quick else FULL:
        print(f"=== {title}: {' '.join(cmd)}", flush=True)
        t0 = time.time()
        rc = subprocess.call([sys.executable, str(HERE / cmd[0]), *cmd[1:]])
        print(f"=== {title}: exit {rc} after {time.time() - t0:.0f}s", flush=True)
        if rc != 0:
            failed.append(title)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
