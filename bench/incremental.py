"""Incremental replay benchmark: a cluster's silver tables brought up to date with the records published
since its last replay (``kraft-replay replay --incremental``, what each stream micro-batch does) against
the peer, a whole replay of the same bronze tables, in one run.

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/incremental.py [--scenario medium] [--cut 1000000]
        [--new 1000,10000,100000] [--driver-memory 8g] [--data-dir DIR]

The scenario's bronze tables (generated once, cached in ``--data-dir`` as ``bench/replay.py`` does) are
cut at ``--cut`` (whole batches: those with a base offset < N). A lake gets the batches before
``N - sum(--new)``, replayed whole; then each ``--new`` count of records arrives in its own append and
is replayed incrementally. A second lake gets every batch before N at once and is replayed whole: the
peer. Prints each step's wall time, the peer's, the ratio, peak RSS, and checks that the two lakes'
silver tables hold the same rows. Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import PeakRss, bronze_lake  # noqa: E402  (bench/replay.py)


def _copy_bronze(src, dst, lo: int, hi: int) -> int:  # noqa: ANN001 - Lakes
    """Append the bronze rows of the batches with base offset in [lo, hi) (snapshots whose END − 1 is
    in the range) from ``src`` to ``dst``; returns the log records appended."""
    from pyspark.sql import functions as F

    n = 0
    for t in ("metadata_log", "metadata_control", "snapshot_records"):
        df = src.read(t)
        if t == "snapshot_records":
            pos = F.col("snapshot_end_offset") - 1
        elif t == "metadata_control":
            pos = F.when(F.coalesce(F.col("source_kind"), F.lit("log")) == "log",
                         F.coalesce(F.col("batch_base_offset"), F.col("offset"))).otherwise(F.col("snapshot_end_offset") - 1)
        else:
            pos = F.coalesce(F.col("batch_base_offset"), F.col("offset"))
        part = df.where((pos >= lo) & (pos < hi))
        dst.create_table(t, df.schema, partition_by=["cluster_id"])
        r = dst.append(t, part)
        if t == "metadata_log":
            n = r.rows
    return n


def _same(a, b, tables: list[str]) -> list[str]:  # noqa: ANN001 - Lakes
    """The tables whose rows differ between the two lakes (an exact multiset comparison)."""
    bad = []
    for t in tables:
        x, y = a.read(t), b.read(t).select(*a.read(t).columns)
        if x.count() != y.count() or not x.exceptAll(y).isEmpty() or not y.exceptAll(x).isEmpty():
            bad.append(t)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="medium")
    ap.add_argument("--cut", type=int, default=1_000_000, help="the bronze batches with base offset < N (default 1M)")
    ap.add_argument("--new", default="1000,10000,100000",
                    help="comma-separated record counts arriving one after the other, each replayed incrementally")
    ap.add_argument("--resume-min-records", type=int, default=0,
                    help="resume a stored replay of at least this many records (default 0: always, to measure the "
                         "resumed replay itself; the library's default is replay.incremental.RESUME_MIN_RECORDS)")
    ap.add_argument("--profile", default="local")
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "kraft-replay-bench-replay")
    args = ap.parse_args()
    try:
        steps = [int(x) for x in args.new.split(",")]
    except ValueError:
        ap.error(f"--new: comma-separated record counts, got {args.new!r}")
    if any(s <= 0 for s in steps) or sum(steps) >= args.cut:
        ap.error("--new: positive counts whose sum is below --cut")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    src_root = bronze_lake(args.data_dir, args.scenario)

    from kraft_replay.lake import Lake
    from kraft_replay.replay.run import run_replay
    from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS, SILVER_TABLES
    from kraft_replay.spark import get_spark

    spark = get_spark(args.profile, **{"spark.driver.memory": args.driver_memory})
    src = Lake(str(src_root), spark, backend="deltars")
    work = Path(tempfile.mkdtemp(prefix="kraft-bench-incremental-"))
    quiet = lambda _: None  # noqa: E731
    try:
        inc = Lake(str(work / "incremental"), spark, backend="deltars")
        base = args.cut - sum(steps)
        n = _copy_bronze(src, inc, 0, base)
        t = time.perf_counter()
        run_replay(spark, inc, say=quiet)
        print(f"base: {n:,} records (batches below offset {base:,}) replayed whole in {time.perf_counter() - t:.1f} s",
              flush=True)
        lo = base
        figures = []
        for k in steps:
            n = _copy_bronze(src, inc, lo, lo + k)
            with PeakRss() as rss:
                t = time.perf_counter()
                s = run_replay(spark, inc, say=quiet, incremental=True, resume_min_records=args.resume_min_records)
                dt_s = time.perf_counter() - t
            mode = next(iter(s.modes.values()), "?")
            figures.append((k, n, dt_s))
            print(f"+{n:,} records (offsets {lo:,}..{lo + k - 1:,}): incremental replay {dt_s:.1f} s, peak RSS "
                  f"{rss.peak / 2**30:.2f} GiB — {mode}", flush=True)
            lo += k
        whole = Lake(str(work / "whole"), spark, backend="deltars")
        n_all = _copy_bronze(src, whole, 0, args.cut)
        with PeakRss() as rss:
            t = time.perf_counter()
            run_replay(spark, whole, say=quiet)
            whole_s = time.perf_counter() - t
        print(f"peer: the whole replay of the same {n_all:,} records: {whole_s:.1f} s, peak RSS {rss.peak / 2**30:.2f} GiB",
              flush=True)
        for k, n, dt_s in figures:
            print(f"  +{n:,} records: incremental {dt_s:.1f} s vs whole {whole_s:.1f} s: {whole_s / dt_s:.1f}x faster")
        bad = _same(inc, whole, [*SILVER_TABLES, IMAGE_SNAPSHOTS])
        print("tables: the incremental lake equals the whole replay's" if not bad else f"tables DIFFER: {', '.join(bad)}")
        return 1 if bad else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
