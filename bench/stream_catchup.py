"""Stream catch-up benchmark (issue 11): the replay stream catching up on a whole log against the batch
replay of the same bronze tables, in one run.

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/stream_catchup.py [--scenario medium]
        [--source LAKE] [--driver-memory 8g] [--data-dir DIR]

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="medium")
    ap.add_argument("--source", type=Path, default=None, help="a lake holding the bronze tables (default: generate)")
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "kraft-replay-bench-replay")
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
               "stream": _run("stream catch-up", lakes["stream"], profile, ["--available-now"])}
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
