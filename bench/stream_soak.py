"""Kill soak of the replay stream: SIGKILL ``kraft-replay replay --available-now`` at random moments,
restart it, and check the tables end equal to a batch replay.

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/stream_soak.py [--kills 50] [--seed 1]
        [--scenario tiny] [--data-dir DIR]

The scenario's segments (``kraft-replay generate --segments-out``, cached in ``--data-dir``) are
ingested into a lake in as many steps as there are segment files. Each round ingests the next step
(while any is left), starts the stream process and kills it (SIGKILL) after a random delay between 2
s and the last round's full run time; after the kills one run goes to completion. A reference lake
gets the same files in one ingest and one batch replay. Every output table is then read as readers
see it (published version, delta-rs, no Spark) and compared row for row (sorted). Reports kills that
landed mid-run (before the stream finished), restarts, mismatched tables (0 expected), duplicates
and wall time. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from streaming import _cli, _segments  # noqa: E402

TABLES = ["topics", "partitions", "brokers", "controllers", "features", "configs", "client_quotas", "acls",
          "scram_credentials", "delegation_tokens", "producer_ids", "zk_migration_state", "replay_anomalies",
          "log_batches", "log_commit", "image_snapshots"]


def _published(lake: Path, table: str):  # noqa: ANN202 - a pyarrow Table or None
    from deltalake import DeltaTable

    pub = {r["table_name"]: r["version"] for r in DeltaTable(str(lake / "_published")).to_pyarrow_table().to_pylist()}
    if table not in pub:
        return None
    t = DeltaTable(str(lake / table), version=pub[table]).to_pyarrow_table()
    cols = sorted(c for c in t.column_names if c != "kr_write")
    t = t.select(cols)
    keys = [c for c in cols if str(t.schema.field(c).type) in ("string", "int64", "int32", "int16", "bool",
                                                               "timestamp[us, tz=UTC]")]
    return t.sort_by([(k, "ascending") for k in keys])


def _run(cmd: list[str], env: dict, log: Path, **kw) -> subprocess.Popen:  # noqa: ANN003
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "a"), env=env, cwd=ROOT, **kw)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenario", default="tiny")
    ap.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "kraft-replay-bench-streaming"))
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    seg_root = _segments(args.scenario, data_dir)
    part = seg_root / "__cluster_metadata-0"
    steps = [[str(seg_root / "bootstrap.checkpoint")]] + [[str(p)] for p in sorted(part.iterdir())
                                                          if p.suffix in (".log", ".checkpoint")]
    work = Path(tempfile.mkdtemp(prefix="soak-", dir=data_dir))
    lake, ref, log = work / "lake", work / "ref", work / "soak.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    cid = ["--cluster-id", "soak"]
    t0 = time.time()
    subprocess.run([*_cli(), "ingest", *[f for s in steps for f in s], "--lake", str(ref), *cid], check=True,
                   env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(log, "a"))
    subprocess.run([*_cli(), "replay", "--lake", str(ref)], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=open(log, "a"))
    stream = [*_cli(), "replay", "--lake", str(lake), "--available-now"]
    full = 60.0
    mid_run = finished = 0
    for k in range(args.kills):
        if steps:
            subprocess.run([*_cli(), "ingest", *steps.pop(0), "--lake", str(lake), *cid], check=True, env=env,
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(log, "a"))
        delay = rng.uniform(2.0, full)
        started = time.time()
        proc = _run(stream, env, log)
        try:
            proc.wait(timeout=delay)
            finished += 1
            full = max(full * 0.5, time.time() - started)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            mid_run += 1
        print(f"round {k + 1}/{args.kills}: {'killed' if proc.returncode == -signal.SIGKILL else 'finished'} "
              f"after {time.time() - started:.1f} s", flush=True)
    for s in steps:
        subprocess.run([*_cli(), "ingest", *s, "--lake", str(lake), *cid], check=True, env=env, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=open(log, "a"))
    subprocess.run(stream, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(log, "a"))
    bad = []
    for t in TABLES:
        a, b = _published(lake, t), _published(ref, t)
        if (a is None) != (b is None) or (a is not None and not a.equals(b)):
            bad.append(f"{t} ({'missing' if a is None or b is None else f'{a.num_rows} vs {b.num_rows} rows'})")
    print(f"{args.kills} rounds: {mid_run} killed mid-run, {finished} finished before the kill; final tables "
          f"{len(TABLES) - len(bad)}/{len(TABLES)} equal to the batch replay" + (f"; DIFFER: {', '.join(bad)}" if bad else "")
          + f"; {time.time() - t0:.0f} s; logs in {work}")
    if not bad:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
