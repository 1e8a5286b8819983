"""Live ingest benchmark: a batch's bytes on disk -> its rows in the published bronze ``metadata_log``,
for ``kraft-replay ingest NODE --follow`` alone.

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/follow.py [--seconds 120] [--interval 0.25]
        [--gap-ms 100] [--scenario tiny | --node DIR] [--lib DIR] [--data-dir DIR]

A node's segments (the generated ``--scenario``, made once and cached in ``--data-dir`` as
bench/streaming.py does, or any node dir ``--node``) are written into a live node dir in real time: one
batch every ``--gap-ms`` (spread over ``--seconds`` when the node has fewer), segments rolling and
snapshots renamed into place as Kafka does. ``kraft-replay ingest LIVE --follow --interval I`` runs as
a process meanwhile. **Latency** of a batch = the moment the lake published its last offset in
``metadata_log`` − the moment its bytes were written (after the flush). Publish moments are read after
the run from the lake's own ``_published`` commits (their commit timestamps, milliseconds), and each
published ``metadata_log`` version's largest offset from its files' statistics: no poller in the way.
Prints p50 / p99 / max over the batches written after the process's first publication (its start
left out; the cold figure too), the polls published and the process's peak RSS.

``--lib DIR`` runs the ``kraft_replay`` package of another checkout (e.g. the previous commit's ``lib``)
for the ratio. Speed is measured here, never asserted in tests. Issue 47's target: p99 <= 1 s at
``--interval 0.25``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import PeakRss  # noqa: E402  (bench/replay.py: peak RSS of this process tree)
from streaming import _batches, _cli, _segments, write_batch  # noqa: E402  (bench/streaming.py)


def publications(lake: Path) -> list[tuple[float, int]]:
    """``(commit time in s, largest offset published in metadata_log)`` of every ``_published``
    version that names ``metadata_log``, in order."""
    import pyarrow as pa
    from deltalake import DeltaTable

    pub = DeltaTable(str(lake / "_published"))
    log_max: dict[int, int] = {}
    out: list[tuple[float, int]] = []
    for h in sorted(pub.history(), key=lambda h: h["version"]):
        rows = DeltaTable(str(lake / "_published"), version=h["version"]).to_pyarrow_table().to_pylist()
        v = next((r["version"] for r in rows if r["table_name"] == "metadata_log"), None)
        if v is None:
            continue
        if v not in log_max:
            stats = pa.table(DeltaTable(str(lake / "metadata_log"), version=v).get_add_actions(flatten=True))
            vals = [x for x in (stats.column("max.offset").to_pylist() if "max.offset" in stats.column_names else [])
                    if x is not None]
            log_max[v] = max(vals, default=-1)
        out.append((h["timestamp"] / 1000, log_max[v]))
    return out


def published_end(lake: Path) -> int:
    """The largest offset in the published ``metadata_log`` now (-1: none yet)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    try:
        rows = DeltaTable(str(lake / "_published")).to_pyarrow_table().to_pylist()
        v = next(r["version"] for r in rows if r["table_name"] == "metadata_log")
        stats = pa.table(DeltaTable(str(lake / "metadata_log"), version=v).get_add_actions(flatten=True))
        return max((x for x in stats.column("max.offset").to_pylist() if x is not None), default=-1)
    except Exception:  # noqa: BLE001 - not written yet, or no file yet
        return -1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="how long the node is written (default 120)")
    ap.add_argument("--interval", type=float, default=0.25, help="ingest --follow's --interval (default 0.25)")
    ap.add_argument("--gap-ms", type=float, default=100.0, help="one batch written every this many ms (default 100)")
    ap.add_argument("--scenario", default="tiny", help="the generated scenario whose node is written (default tiny)")
    ap.add_argument("--node", default=None, help="write this node dir's segments instead of a generated scenario's")
    ap.add_argument("--lib", default=str(ROOT / "lib"), help="the kraft_replay package's directory (default: this checkout's)")
    ap.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "kraft-replay-bench-streaming"))
    args = ap.parse_args(argv)
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    src_node = Path(args.node) if args.node else _segments(args.scenario, data_dir)
    src = src_node / "__cluster_metadata-0"
    work = Path(tempfile.mkdtemp(prefix="follow-bench-", dir=data_dir))
    node, lake = work / "node", work / "lake"
    part = node / "__cluster_metadata-0"
    part.mkdir(parents=True)
    for name in ("meta.properties", "bootstrap.checkpoint"):
        if (src_node / name).exists():
            shutil.copy(src_node / name, node / name)
    logs = sorted(p for p in src.iterdir() if p.suffix == ".log")
    snaps = sorted((int(p.name.split("-")[0]), p) for p in src.iterdir() if p.suffix == ".checkpoint")
    plan = [(seg, s, e, last) for seg in logs for s, e, last in _batches(seg)]
    plan = plan[: int(args.seconds * 1000 / args.gap_ms)]
    gap = args.seconds / len(plan)
    print(f"{len(plan)} batches written over {args.seconds:g} s (one every {gap * 1000:.0f} ms); "
          f"ingest --follow --interval {args.interval:g}; package {args.lib}", flush=True)

    env = {**os.environ, "PYTHONPATH": args.lib}
    cmd = [*_cli(), "ingest", str(node), "--lake", str(lake), "--follow", "--interval", str(args.interval)]
    written: list[tuple[int, float]] = []
    with PeakRss() as rss, open(work / "ingest.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=work)
        handles: dict[Path, object] = {}
        t0 = time.time()
        for i, (seg, s, e, last) in enumerate(plan):
            time.sleep(max(0.0, t0 + i * gap - time.time()))
            write_batch(part, handles, seg, s, e, last, snaps, written)
        for fh in handles.values():
            fh.close()
        deadline = time.time() + 300
        last_offset = written[-1][0]
        while proc.poll() is None and time.time() < deadline and published_end(lake) < last_offset:
            time.sleep(1)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
    pubs = publications(lake)
    lat: list[tuple[float, float]] = []  # (written at, latency)
    k = 0
    for last, t in written:
        while k < len(pubs) and pubs[k][1] < last:
            k += 1
        if k == len(pubs):
            break
        lat.append((t, pubs[k][0] - t))
    if not lat:
        print(f"no batch was published; see {work}")
        return 1
    first_pub = pubs[0][0]
    warm = sorted(x for t, x in lat if t > first_pub)
    cold = sorted(x for _t, x in lat)

    def q(xs: list[float], p: float) -> float:
        return xs[min(len(xs) - 1, int(p * len(xs)))]

    polls = sum(1 for i, p in enumerate(pubs) if i == 0 or p[1] > pubs[i - 1][1])
    print(f"bytes on disk -> published bronze, over the {len(warm)} batches written after the first publication "
          f"({first_pub - written[0][1]:.1f} s after the first batch): p50 {q(warm, 0.5):.3f} s, p99 {q(warm, 0.99):.3f} s, "
          f"max {warm[-1]:.3f} s (target p99 <= 1 s)" if warm else "no batch written after the first publication")
    print(f"  all {len(cold)} batches (the process's start included): p50 {q(cold, 0.5):.3f} s, p99 {q(cold, 0.99):.3f} s, "
          f"max {cold[-1]:.3f} s; {len(written) - len(lat)} never published")
    print(f"  {polls} polls published new log rows in {written[-1][1] - written[0][1]:.0f} s; peak RSS of the process "
          f"tree {rss.peak / 2**20:.0f} MiB; logs in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
