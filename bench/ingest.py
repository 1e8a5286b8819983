"""End-to-end ingest benchmark: generated KRaft segments -> the bronze Delta tables with Spark.

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/ingest.py [--records 10000000] [--driver-memory 8g]

Segments are written once with the project's encoder (bench/segments.py: mostly NoOp, plus
partition changes, broker registration changes, configs, topic creations, leader changes) and
cached in ``--data-dir``. Prints records/s and MB/s for the whole ingest (checksums, planning,
decode with mapInArrow, the five Delta appends). Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from segments import write_segments  # noqa: E402


def scenario_segments(data_dir: Path, scenario: str) -> Path:
    """``__cluster_metadata-0`` of a node directory written by ``kraft-replay generate --segments-out``
    for ``scenario`` (cached in ``data_dir``); the whole node directory (bootstrap, snapshots) is ingested."""
    node = data_dir / f"scenario-{scenario}"
    seg_dir = node / "__cluster_metadata-0"
    if not any(seg_dir.glob("*.log")):
        t = time.perf_counter()
        tmp = node.with_name(node.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(prefix="kraft-bench-genlake-"))
        try:
            subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--lake", str(scratch), "generate",
                            "--scenario", scenario, "--segments-out", str(tmp)], check=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(node, ignore_errors=True)
        tmp.rename(node)
        print(f"generated scenario {scenario} segments into {node} in {time.perf_counter() - t:.1f}s", flush=True)
    return seg_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "kraft-replay-bench-segments")
    ap.add_argument("--lake", type=Path, default=None, help="lake root (default: a fresh temp dir, removed after)")
    ap.add_argument("--profile", default="test")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--split-mb", type=int, default=32)
    ap.add_argument("--scenario", default=None,
                    help="ingest the segments the scenario generator writes for this scenario (e.g. medium: 10M "
                         "records in controller-sized batches) instead of bench/segments.py's one-record batches")
    args = ap.parse_args()

    if args.scenario:
        seg_dir = scenario_segments(args.data_dir, args.scenario)
    else:
        seg_dir = args.data_dir / f"r{args.records}" / "__cluster_metadata-0"
    if not seg_dir.is_dir() or not any(seg_dir.glob("*.log")):
        t = time.perf_counter()
        tmp = seg_dir.with_name(seg_dir.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        write_segments(tmp, args.records)
        tmp.rename(seg_dir)
        print(f"generated {args.records:,} records into {seg_dir} in {time.perf_counter() - t:.1f}s", flush=True)
    size = sum(p.stat().st_size for p in seg_dir.glob("*.log"))
    print(f"input: {len(list(seg_dir.glob('*.log')))} segment(s), {size / 1e6:.1f} MB", flush=True)

    from kraft_replay.ingest import run_ingest
    from kraft_replay.lake import Lake
    from kraft_replay.spark import get_spark

    spark = get_spark(args.profile, **{"spark.driver.memory": args.driver_memory})
    lake_root = args.lake or Path(tempfile.mkdtemp(prefix="kraft-bench-lake-"))
    try:
        lake = Lake(str(lake_root), spark, backend="deltars")
        t = time.perf_counter()
        s = run_ingest(spark, lake, [str(seg_dir)], cluster_id="bench", split_bytes=args.split_mb * 1024 * 1024,
                       say=lambda m: print(f"[{time.perf_counter() - t:6.1f}s] {m}", flush=True))
        dt = time.perf_counter() - t
        rows = lake.read("metadata_log").count()
        print("\n".join(s.lines()))
        print(f"END TO END: {s.records:,} records, {s.bytes / 1e6:.1f} MB in {dt:.1f}s -> "
              f"{s.records / dt:,.0f} records/s, {s.bytes / 1e6 / dt:.1f} MB/s (metadata_log rows read back: {rows:,})")
    finally:
        if args.lake is None:
            shutil.rmtree(lake_root, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
