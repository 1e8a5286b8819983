"""Streaming benchmark: freshness of the live pipeline (``ingest --follow`` + ``replay --mode stream``).

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/streaming.py [--scenario tiny] [--minutes 5]
        [--interval 1] [--data-dir DIR]

A generated cluster (``kraft-replay generate --segments-out``, cached in ``--data-dir``) is written
into a live node dir in real time: its batches are appended to the active segment one by one, spread
evenly over ``--minutes``, segments roll and snapshots appear as they did in the generated node.
Two real processes run meanwhile: ``kraft-replay ingest NODE --follow --interval I`` and
``kraft-replay replay --mode stream --trigger I``. A poller reads the published ``log_commit`` table
(delta-rs, no Spark) every 0.25 s. **Freshness** of a batch = the moment its last offset is visible
in the published versioned state − the moment its bytes were written. Prints p50 / p99 / max over
every batch written, the same over the batches written after the stream's first publication (its
start — a cold JVM and a whole replay — left out), the micro-batches the stream ran and their
seconds, and the peak RSS of the two processes.
Issue 47's target: p99 ≤ 5 s (the bronze hop alone ≤ 1 s). ``--compare-rev REV`` runs it again with
the package of git revision ``REV`` (e.g. the commit before the live replay, whose stream ran a
resumed batch replay per micro-batch) and prints the ratio. Speed is measured here, never asserted
in tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import PeakRss  # noqa: E402  (bench/replay.py: peak RSS of this process tree)


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("kraft-replay")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kraft_replay.serve.cli"]


def _batches(path: Path) -> list[tuple[int, int, int]]:
    """(start, end, last offset) of every batch of a segment."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 27 <= len(data):
        base, length = struct.unpack(">qi", data[pos:pos + 12])
        last_delta = struct.unpack(">i", data[pos + 23:pos + 27])[0]
        out.append((pos, pos + 12 + length, base + last_delta))
        pos += 12 + length
    return out


def write_batch(part: Path, handles: dict, seg: Path, s: int, e: int, last: int, snaps: list, written: list) -> None:
    """Append bytes ``[s, e)`` of segment ``seg`` (one batch) to its namesake in the live partition dir
    ``part`` and flush; note ``(last offset, now)`` in ``written``; then rename into place the snapshots
    of ``snaps`` ((end offset, path), in order) the log has reached, as Kafka does."""
    fh = handles.get(seg)
    if fh is None:
        fh = handles[seg] = open(part / seg.name, "ab")  # noqa: SIM115 - the caller closes handles
    with open(seg, "rb") as r:
        r.seek(s)
        fh.write(r.read(e - s))
    fh.flush()
    written.append((last, time.time()))
    while snaps and snaps[0][0] <= last + 1:
        _end, snap = snaps.pop(0)
        tmp = part / (snap.name + ".part")
        shutil.copy(snap, tmp)
        os.rename(tmp, part / snap.name)  # Kafka renames a finished snapshot into place


def _segments(scenario: str, data_dir: Path) -> Path:
    out = data_dir / f"segments-{scenario}"
    if not (out / "__cluster_metadata-0").is_dir():
        shutil.rmtree(out, ignore_errors=True)
        lake = data_dir / f"gen-{scenario}"
        shutil.rmtree(lake, ignore_errors=True)
        subprocess.run([*_cli(), "generate", "--scenario", scenario, "--lake", str(lake), "--segments-out", str(out)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return out


def _published_last_offset(lake: Path) -> tuple[int | None, int | None]:
    """The greatest offset in the published ``log_commit`` (the versioned state) and in the published
    ``metadata_log`` (bronze: ``ingest --follow``'s side alone, from the files' statistics)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    try:
        pub = {r["table_name"]: r["version"] for r in DeltaTable(str(lake / "_published")).to_pyarrow_table().to_pylist()}
    except Exception:  # noqa: BLE001 - a table being created: try again next poll
        return None, None
    out: list[int | None] = []
    for table, column, stats in (("log_commit", "last_offset", False), ("metadata_log", "offset", True)):
        try:
            dt = DeltaTable(str(lake / table), version=pub[table])
            vals = (pa.table(dt.get_add_actions(flatten=True)).column(f"max.{column}") if stats
                    else dt.to_pyarrow_table(columns=[column]).column(column)).to_pylist()
        except Exception:  # noqa: BLE001 - not published yet, or being created: try again next poll
            vals = []
        vals = [v for v in vals if v is not None]
        out.append(max(vals) if vals else None)
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="tiny")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "kraft-replay-bench-streaming"))
    ap.add_argument("--compare-rev", default=None, metavar="REV",
                    help="then the same run with the package of git revision REV (a worktree under --data-dir): the "
                         "peer, e.g. the stream before the live replay")
    args = ap.parse_args(argv)
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    src = _segments(args.scenario, data_dir) / "__cluster_metadata-0"
    results = {}
    libs = {"this checkout": ROOT / "lib"}
    if args.compare_rev:
        tree = data_dir / f"rev-{args.compare_rev}"
        if not tree.exists():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.compare_rev], check=True,
                           capture_output=True)
        libs[f"revision {args.compare_rev}"] = tree / "lib"
    for name, lib in libs.items():
        print(f"== replay --mode stream, {name}", flush=True)
        results[name] = _one_run(args, data_dir, src, lib)
        if results[name] is None:
            return 1
    if args.compare_rev:
        new, old = results.values()
        print(f"p99 freshness: this checkout {new['p99']:.1f} s vs {args.compare_rev} {old['p99']:.1f} s: "
              f"{old['p99'] / new['p99']:.1f}x; p50 {new['p50']:.1f} s vs {old['p50']:.1f} s")
    return 0


def _one_run(args: argparse.Namespace, data_dir: Path, src: Path, lib: Path) -> dict | None:
    """One live run (ingest --follow + replay --mode stream, the package in ``lib``); its freshness figures."""
    work = Path(tempfile.mkdtemp(prefix="stream-bench-", dir=data_dir))
    node, lake = work / "node", work / "lake"
    part = node / "__cluster_metadata-0"
    part.mkdir(parents=True)
    shutil.copy(src.parent / "meta.properties", node / "meta.properties")
    shutil.copy(src.parent / "bootstrap.checkpoint", node / "bootstrap.checkpoint")
    logs = sorted(p for p in src.iterdir() if p.suffix == ".log")
    snaps = sorted((int(p.name.split("-")[0]), p) for p in src.iterdir() if p.suffix == ".checkpoint")
    plan = [(seg, s, e, last) for seg in logs for s, e, last in _batches(seg)]
    gap = args.minutes * 60 / len(plan)
    print(f"{len(plan)} batches ({plan[-1][3] + 1} offsets) written over {args.minutes:g} min "
          f"(one every {gap * 1000:.0f} ms); polls every {args.interval:g} s", flush=True)

    env = {**os.environ, "PYTHONPATH": str(lib)}
    procs = [subprocess.Popen([sys.executable, "-m", "kraft_replay.serve.cli", "ingest", str(node), "--lake", str(lake), "--follow", "--interval", str(args.interval)],
                              stdout=subprocess.DEVNULL, stderr=open(work / "ingest.log", "w"), env=env, cwd=ROOT)]
    # the stream needs the bronze tables: start it once the first ingest published
    written: list[tuple[int, float]] = []
    seen: dict[int, float] = {}
    in_bronze: dict[int, float] = {}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            offsets = _published_last_offset(lake)
            now = time.time()
            for off, into in zip(offsets, (seen, in_bronze)):
                if off is not None:
                    for last, _t in written:
                        if last <= off and last not in into:
                            into[last] = now
            time.sleep(0.25)

    poller = threading.Thread(target=poll, daemon=True)
    with PeakRss() as rss:
        started_stream = False
        t0 = time.time()
        handles: dict[Path, object] = {}
        for i, (seg, s, e, last) in enumerate(plan):
            target = t0 + i * gap
            time.sleep(max(0.0, target - time.time()))
            write_batch(part, handles, seg, s, e, last, snaps, written)
            if not started_stream and (lake / "metadata_log").is_dir() and (lake / "_published").is_dir():
                procs.append(subprocess.Popen([sys.executable, "-m", "kraft_replay.serve.cli", "replay", "--lake", str(lake),
                                               "--mode", "stream", "--trigger", str(args.interval)],
                                              stdout=subprocess.DEVNULL, stderr=open(work / "replay.log", "w"),
                                              env=env, cwd=ROOT))
                started_stream = True
                poller.start()
        written_until = time.time()
        deadline = written_until + 600
        while len(seen) < len(written) and time.time() < deadline and all(p.poll() is None for p in procs):
            time.sleep(1)
        stop.set()
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
    lags = sorted(seen[last] - t for last, t in written if last in seen)
    missing = len(written) - len(lags)
    log_lines = open(work / "replay.log").read().splitlines()
    batches = sum(1 for ln in log_lines if ln.startswith("batch ") and "published" in ln)
    # this design's lines ("+N record(s)", "replayed whole"), and the earlier one's (resumed / whole replays)
    resumed = sum(1 for ln in log_lines if "resumed at offset" in ln or (ln.startswith("batch ") and "record(s)" in ln))
    whole = sum(1 for ln in log_lines if "log stage and plan ready" in ln or "replayed whole" in ln)
    if not lags:
        print("no batch became visible; see", work)
        return None

    def q(p: float, xs: list[float] = lags) -> float:
        return xs[min(len(xs) - 1, int(p * len(xs)))]

    print(f"freshness over {len(lags)} batches ({missing} never visible): p50 {q(0.5):.1f} s, p99 {q(0.99):.1f} s, "
          f"max {lags[-1]:.1f} s (target p99 <= 5 s)")
    # the same, leaving out what the stream's start costs: batches written after its first publication
    first = min(seen.values())
    warm = sorted(seen[last] - t for last, t in written if last in seen and t > first)
    secs = sorted(float(ln.split("published in ")[1].split()[0]) for ln in log_lines
                  if ln.startswith("batch ") and "published in" in ln)
    if warm and secs:
        print(f"  of which the {len(warm)} written after the stream's first publication ({first - written[0][1]:.1f} s "
              f"after the first batch): p50 {q(0.5, warm):.1f} s, p99 {q(0.99, warm):.1f} s, max {warm[-1]:.1f} s; "
              f"micro-batches p50 {q(0.5, secs):.1f} s, max {secs[-1]:.1f} s")
    bronze = sorted(in_bronze[last] - t for last, t in written if last in in_bronze and t > first)
    if bronze:  # the same batches' time to the published bronze table: ingest --follow's share of it
        print(f"  the same batches in the published bronze metadata_log (ingest --follow alone): p50 {q(0.5, bronze):.1f} s, "
              f"p99 {q(0.99, bronze):.1f} s, max {bronze[-1]:.1f} s; polls published: "
              f"{sum(1 for ln in open(work / 'ingest.log') if ln.startswith('poll ') and 'published' in ln)}")
    print(f"stream micro-batches published: {batches} ({resumed} absorbed / resumed, {whole} whole replays); peak RSS of "
          f"ingest --follow + replay --mode stream: {rss.peak / 2**30:.2f} GiB; logs in {work}")
    return {"p50": q(0.5), "p99": q(0.99), "max": lags[-1], "batches": batches}


if __name__ == "__main__":
    sys.exit(main())
