"""Stream catch-up benchmark (issue 11): the replay stream catching up on a whole log against the batch
replay of the same bronze tables, in one run.

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/stream_catchup.py [--scenario medium]
        [--source LAKE] [--driver-memory 8g] [--data-dir DIR]
    flock /tmp/kraft-heavy.lock .venv/bin/python bench/stream_catchup.py --switch 300000,1000000,3000000

``--switch CUTS`` (issue 47 §4, where a stream starting on a backlog hands it to the batch replay):
for each cut N, the bronze log's offsets < N (snapshots ending at or below N) copied into two fresh
lakes, and ``kraft-replay replay --available-now`` run on each from a new checkpoint, once with
``--catch-up-records 0`` (the stream's first micro-batch replays the cluster by the sequential rules)
and once with ``--catch-up-records 1`` (the batch replay first, then the stream takes it up). Prints
both wall times per cut and which is sooner: the default ``--catch-up-records`` is set from it.

The bronze tables a replay reads (``metadata_log``, ``metadata_control``, ``snapshot_records``,
``broker_progress``) come from ``--source`` (any generated or ingested lake) or from the scenario
generated once into ``--data-dir`` (as bench/replay.py does). They are copied into two fresh lakes,
and each lake is replayed by a real CLI process with the same profile (``--driver-memory``):
``kraft-replay replay`` (batch) and ``kraft-replay replay --available-now`` (the stream from an empty
checkpoint: everything present is new). Prints each one's wall time, records/s and the peak RSS of its
process tree, the stream's throughput as a ratio of the batch's, and whether the two lakes agree
(``log_commit`` and every silver table's row count, read with delta-rs). Speed is measured here, never
asserted in tests.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import PeakRss, bronze_lake  # noqa: E402

BRONZE = ("metadata_log", "metadata_control", "snapshot_records", "broker_progress")
COMPARED = ("topics", "partitions", "brokers", "controllers", "features", "configs", "log_batches",
            "image_snapshots", "broker_applied")


def _run(label: str, lake: Path, profile: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "kraft_replay.serve.cli", "--lake", str(lake), "--profile", str(profile),
           "replay", *extra]
    with PeakRss() as rss:
        t = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        secs = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"{label} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return {"s": secs, "rss": rss.peak}


def _counts(lake: Path) -> dict[str, object]:
    from kraft_replay.lake.reader import LakeReader

    reader = LakeReader(str(lake))
    out: dict[str, object] = {}
    commit = reader.read("log_commit")
    out["log_commit"] = sorted(
        (r["cluster_id"], r["last_offset"], r["replayed_records"], r["committed_through_offset"])
        for r in (commit.to_pylist() if commit is not None else []))
    for t in COMPARED:
        table = reader.read(t)
        out[t] = None if table is None else table.num_rows
    return out


def _cut_copies(src: Path, work: Path, cuts: list[int]) -> None:
    """For each cut N: the bronze log tables of ``src`` with offsets < N (snapshots ending at or below N)
    into ``work/cut-N/{sequential,catch-up}`` (one Spark session, as bench/replay.py copies)."""
    from pyspark.sql import functions as F

    from kraft_replay.lake import Lake
    from kraft_replay.spark import get_spark

    spark = get_spark("local")
    bronze = Lake(str(src), spark, backend="deltars")
    for cut in cuts:
        for mode in ("sequential", "catch-up"):
            out = Lake(str(work / f"cut-{cut}" / mode), spark, backend="deltars")
            for t in BRONZE[:3]:
                df = bronze.read(t)
                df = df.where(F.col("snapshot_end_offset") <= cut) if t == "snapshot_records" else df.where(F.col("offset") < cut)
                out.create_table(t, df.schema, partition_by=["cluster_id"])
                out.overwrite(t, df)
    spark.stop()


def switch(src: Path, work: Path, profile: Path, cuts: list[int]) -> None:
    """``--switch``: see the module docstring."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import stream_catchup as s; "
                    "from pathlib import Path; s._cut_copies(Path(sys.argv[2]), Path(sys.argv[3]), "
                    "[int(c) for c in sys.argv[4].split(',')])",
                    str(Path(__file__).resolve().parent), str(src), str(work), ",".join(map(str, cuts))],
                   check=True, cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "lib")})
    print(f"cut copies made in {time.perf_counter() - t:.1f} s", flush=True)
    from kraft_replay.lake.reader import LakeReader

    for cut in cuts:
        records = LakeReader(str(work / f"cut-{cut}" / "sequential")).read("metadata_log", ["offset"]).num_rows
        got = {mode: _run(mode, work / f"cut-{cut}" / mode, profile, ["--available-now", "--catch-up-records", n])
               for mode, n in (("sequential", "0"), ("catch-up", "1"))}
        same = _counts(work / f"cut-{cut}" / "sequential") == _counts(work / f"cut-{cut}" / "catch-up")
        seq, cat = got["sequential"]["s"], got["catch-up"]["s"]
        print(f"{records:,} records: the stream's own replay {seq:.1f} s (peak RSS {got['sequential']['rss'] / 2**30:.2f} GiB), "
              f"batch catch-up then take-up {cat:.1f} s (peak RSS {got['catch-up']['rss'] / 2**30:.2f} GiB): "
              f"{'catch-up' if cat < seq else 'the stream'} sooner, {max(seq, cat) / min(seq, cat):.2f}x; lakes "
              + ("agree" if same else "DIFFER"), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="medium")
    ap.add_argument("--source", type=Path, default=None, help="a lake holding the bronze tables (default: generate)")
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "kraft-replay-bench-replay")
    ap.add_argument("--switch", default=None, metavar="N,N,...",
                    help="measure the stream's own replay against the batch catch-up at these log cuts")
    args = ap.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    src = args.source or bronze_lake(args.data_dir, args.scenario)
    missing = [t for t in BRONZE[:3] if not (src / t).is_dir()]
    if missing:
        raise SystemExit(f"{src} has no table {missing[0]}: give a lake that was generated or ingested")
    prof = yaml.safe_load((ROOT / "conf" / "local.yaml").read_text())
    prof["spark"]["driver_memory"] = args.driver_memory
    work = Path(tempfile.mkdtemp(prefix="kraft-bench-catchup-"))
    try:
        profile = work / "profile.yaml"
        profile.write_text(yaml.safe_dump(prof))
        if args.switch:
            switch(src, work, profile, [int(c) for c in args.switch.split(",")])
            return 0
        lakes = {}
        for mode in ("batch", "stream"):
            lakes[mode] = work / mode
            for t in BRONZE:
                if (src / t).is_dir():
                    shutil.copytree(src / t, lakes[mode] / t)
        from kraft_replay.lake.reader import LakeReader

        records = LakeReader(str(lakes["batch"])).read("metadata_log", ["offset"]).num_rows
        print(f"{records:,} records ({src}); driver memory {args.driver_memory}", flush=True)
        got = {"batch": _run("batch replay", lakes["batch"], profile, []),
               "stream": _run("stream catch-up", lakes["stream"], profile, ["--available-now", "--catch-up-records", "0"])}
        for mode, r in got.items():
            print(f"{mode}: {r['s']:.1f}s, {records / r['s']:,.0f} records/s, peak RSS {r['rss'] / 2**30:.2f} GiB",
                  flush=True)
        same = _counts(lakes["batch"]) == _counts(lakes["stream"])
        print(f"stream catch-up is {got['batch']['s'] / got['stream']['s']:.2f}x the batch replay's throughput; "
              f"log_commit and the row counts of {len(COMPARED)} silver tables "
              + ("agree" if same else "DIFFER"))
        return 0 if same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
