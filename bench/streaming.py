"""Streaming benchmark: freshness of the live pipeline (``ingest --follow`` + ``ingest-metrics --follow``
+ ``replay --mode stream``).

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/streaming.py [--scenario tiny] [--minutes 5]
        [--interval 1] [--trigger S] [--rate RECORDS_PER_S] [--data-dir DIR] [--compare-rev REV]

A generated cluster (``kraft-replay generate --segments-out``, cached in ``--data-dir``) is written
into a live node dir in real time, as a running cluster writes it: its batches are appended to the
active segment one by one — spread evenly over ``--minutes``, or at ``--rate`` records per second
until ``--minutes`` have passed (a storm: ``--scenario medium --rate 2000``) —, each re-stamped to the
wall clock when written (base and max timestamps moved, CRC recomputed), segments roll and snapshots
appear as they did in the generated node. A Prometheus endpoint in this process serves each
broker's ``last-applied-record-offset`` / ``-timestamp`` as a JMX exporter does: the brokers apply
what was written 0.05-3 s earlier (a different delay each). Three real processes run meanwhile:
``kraft-replay ingest NODE --follow``, ``kraft-replay ingest-metrics URL --follow`` and
``kraft-replay replay --mode stream``, polls every ``--interval`` seconds, the stream's trigger every
``--trigger`` (default the same). A poller reads
the published lake (delta-rs, no Spark) every 0.25 s.

**Freshness** of a batch = the moment its last offset is visible in the published versioned state
(``log_commit``) − the moment its bytes were written; **in cache_lag**: the moment a published
``cache_lag`` row has a log end at or past it. Prints p50 / p99 / max over every batch written and over
those written after the stream's first publication (its start — a cold JVM and a whole replay — left
out), the same batches' time to the published bronze ``metadata_log`` (the log follower's share),
the micro-batches' seconds, whole replays, the backlog (offsets written but not yet in the versioned
state) every 10 s, the state store's size and the peak RSS of the live processes (this
bench's own process, standing in for Kafka and the brokers' metrics endpoint, left out).
Issue 47's targets: p99 ≤ 5 s to both (storm: ≤ 10 s, no growing backlog), the bronze hop alone
p99 ≤ 1 s, the live processes ≤ 4 GiB together. ``--compare-rev REV`` runs it again with the package
of git revision ``REV`` and prints the ratio. Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import bisect
import http.server
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


def restamp(batch: bytes, now_ms: int) -> bytes:
    """A record batch (v2) whose max timestamp is ``now_ms`` (its base moved by as much; the records'
    deltas kept) and whose CRC-32C is recomputed: the batch as a broker appending it now writes it."""
    from kraft_replay.codec.crc import CRC_START, crc32c

    base, top = struct.unpack(">qq", batch[27:43])
    out = bytearray(batch)
    out[27:43] = struct.pack(">qq", now_ms - (top - base), now_ms)
    out[17:21] = struct.pack(">I", crc32c(bytes(out[CRC_START:])))
    return bytes(out)


def write_batch(part: Path, handles: dict, seg: Path, s: int, e: int, last: int, snaps: list, written: list) -> None:
    """Append bytes ``[s, e)`` of segment ``seg`` (one batch, re-stamped to now: :func:`restamp`) to its
    namesake in the live partition dir ``part`` and flush; note ``(last offset, now)`` in ``written``;
    then rename into place the snapshots of ``snaps`` ((end offset, path), in order) the log has
    reached, as Kafka does."""
    fh = handles.get(seg)
    if fh is None:
        fh = handles[seg] = open(part / seg.name, "ab")  # noqa: SIM115 - the caller closes handles
    with open(seg, "rb") as r:
        r.seek(s)
        now = time.time()
        fh.write(restamp(r.read(e - s), int(now * 1000)))
    fh.flush()
    written.append((last, now))
    while snaps and snaps[0][0] <= last + 1:
        _end, snap = snaps.pop(0)
        tmp = part / (snap.name + ".part")
        shutil.copy(snap, tmp)
        os.rename(tmp, part / snap.name)  # Kafka renames a finished snapshot into place


OFFSET = "kafka_server_broker_metadata_metrics_last_applied_record_offset"
STAMP = "kafka_server_broker_metadata_metrics_last_applied_record_timestamp"
DELAYS = (0.05, 0.2, 0.5, 1.0, 3.0)  # seconds each broker takes to apply what was written


class Exporter(http.server.BaseHTTPRequestHandler):
    """``/metrics`` of the brokers as a JMX exporter shows them: broker ``i`` has applied the newest
    batch written ``DELAYS[i]`` seconds or more ago (-1 before any)."""

    brokers: list[int] = []
    written: list[tuple[int, float]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        now, lines = time.time(), ["# TYPE " + OFFSET + " gauge", "# TYPE " + STAMP + " gauge"]
        for i, b in enumerate(self.brokers):
            k = bisect.bisect_right(self.written, now - DELAYS[i % len(DELAYS)], key=lambda w: w[1])
            off, t = self.written[k - 1] if k else (-1, 0.0)
            lines += [f'{OFFSET}{{broker_id="{b}"}} {off}.0', f'{STAMP}{{broker_id="{b}"}} {int(t * 1000)}.0']
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _segments(scenario: str, data_dir: Path) -> Path:
    out = data_dir / f"segments-{scenario}"
    if not (out / "__cluster_metadata-0").is_dir():
        shutil.rmtree(out, ignore_errors=True)
        lake = data_dir / f"gen-{scenario}"
        shutil.rmtree(lake, ignore_errors=True)
        subprocess.run([*_cli(), "generate", "--scenario", scenario, "--lake", str(lake), "--segments-out", str(out)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return out


class PublishedOffsets:
    """The greatest offset in the published ``log_commit`` (the versioned state), in the published
    ``metadata_log`` (bronze: ``ingest --follow``'s side alone) and the greatest log end of the
    published ``cache_lag`` (the last two from the files' statistics), read as the poll's observer
    should: on the machine under test, at little cost. ``_published`` is followed incrementally and a
    table is read again only when its published version moved, from the table kept loaded (opening
    each table afresh on every poll took a third of a core from the live processes)."""

    TABLES = (("log_commit", "last_offset", False), ("metadata_log", "offset", True),
              ("cache_lag", "log_end_offset", True))

    def __init__(self, lake: Path) -> None:
        self.lake = lake
        self._published = None
        self._tables: dict[str, object] = {}
        self._seen: dict[str, tuple[int, int | None]] = {}  # table -> (published version, its greatest offset)

    def _versions(self) -> dict[str, int] | None:
        from deltalake import DeltaTable

        try:
            if self._published is None:
                self._published = DeltaTable(str(self.lake / "_published"))
            else:
                self._published.update_incremental()
            t = self._published.to_pyarrow_table(columns=["table_name", "version"])
        except Exception:  # noqa: BLE001 - a table being created: try again next poll
            self._published = None
            return None
        return dict(zip(t.column("table_name").to_pylist(), t.column("version").to_pylist(), strict=True))

    def __call__(self) -> tuple[int | None, int | None, int | None]:
        import pyarrow as pa
        from deltalake import DeltaTable

        pub = self._versions()
        if pub is None:
            return None, None, None
        out: list[int | None] = []
        for table, column, stats in self.TABLES:
            version = pub.get(table)
            seen = self._seen.get(table)
            if version is not None and (seen is None or seen[0] != version):
                try:
                    dt = self._tables.get(table)
                    if dt is None:
                        dt = self._tables[table] = DeltaTable(str(self.lake / table), version=version)
                    else:
                        dt.load_as_version(version)
                    vals = (pa.table(dt.get_add_actions(flatten=True)).column(f"max.{column}") if stats
                            else dt.to_pyarrow_table(columns=[column]).column(column)).to_pylist()
                    vals = [v for v in vals if v is not None]
                    seen = self._seen[table] = (version, max(vals) if vals else None)
                except Exception:  # noqa: BLE001 - being created: try again next poll
                    self._tables.pop(table, None)
            out.append(seen[1] if seen is not None else None)
        return out[0], out[1], out[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="tiny")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--interval", type=float, default=1.0, help="the followers' polls, seconds")
    ap.add_argument("--trigger", type=float, default=None, help="the stream's trigger, seconds (default: --interval)")
    ap.add_argument("--rate", type=float, default=None, metavar="RECORDS_PER_S",
                    help="write at this many records per second until --minutes have passed (a storm) instead of "
                         "spreading the whole scenario over --minutes")
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
        print(f"p99 freshness after the stream's first publication: this checkout {new['p99']:.1f} s vs {args.compare_rev} {old['p99']:.1f} s: "
              f"{old['p99'] / new['p99']:.1f}x; p50 {new['p50']:.1f} s vs {old['p50']:.1f} s")
    return 0


def _q(xs: list[float], p: float) -> float:
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _figures(what: str, lags: list[float]) -> str:
    return f"{what}: p50 {_q(lags, 0.5):.1f} s, p99 {_q(lags, 0.99):.1f} s, max {lags[-1]:.1f} s" if lags else f"{what}: none"


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def _one_run(args: argparse.Namespace, data_dir: Path, src: Path, lib: Path) -> dict | None:
    """One live run (the two followers + replay --mode stream, the package in ``lib``); its figures."""
    work = Path(tempfile.mkdtemp(prefix="stream-bench-", dir=data_dir))
    node, lake = work / "node", work / "lake"
    part = node / "__cluster_metadata-0"
    part.mkdir(parents=True)
    shutil.copy(src.parent / "meta.properties", node / "meta.properties")
    shutil.copy(src.parent / "bootstrap.checkpoint", node / "bootstrap.checkpoint")
    cluster_id = next(ln.split("=", 1)[1].strip() for ln in (src.parent / "meta.properties").read_text().splitlines()
                      if ln.startswith("cluster.id="))
    logs = sorted(p for p in src.iterdir() if p.suffix == ".log")
    snaps = sorted((int(p.name.split("-")[0]), p) for p in src.iterdir() if p.suffix == ".checkpoint")
    plan = [(seg, s, e, last) for seg in logs for s, e, last in _batches(seg)]
    seconds = args.minutes * 60
    if args.rate:  # a storm: the batches' records at --rate per second, for --minutes
        at, i, firsts = [], 0, [0] + [last + 1 for *_x, last in plan[:-1]]
        for i, (_seg, _s, _e, last) in enumerate(plan):
            t = firsts[i] / args.rate
            if t >= seconds:
                break
            at.append(t)
        plan = plan[:len(at)]
    else:
        at = [i * seconds / len(plan) for i in range(len(plan))]
    print(f"{len(plan)} batches ({plan[-1][3] + 1} offsets) written over {at[-1] / 60:.1f} min "
          f"({(plan[-1][3] + 1) / max(at[-1], 1e-9):,.0f} records/s); polls every {args.interval:g} s, trigger every "
          f"{args.trigger or args.interval:g} s", flush=True)
    brokers = _brokers(data_dir, args.scenario)
    written: list[tuple[int, float]] = []
    Exporter.brokers, Exporter.written = brokers, written
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"

    env = {**os.environ, "PYTHONPATH": str(lib)}
    cli = [sys.executable, "-m", "kraft_replay.serve.cli"]

    def start(name: str, *cmd: str) -> subprocess.Popen:
        return subprocess.Popen([*cli, *cmd], stdout=subprocess.DEVNULL, stderr=open(work / f"{name}.log", "w"),  # noqa: SIM115
                                env=env, cwd=ROOT)

    procs = [start("ingest", "ingest", str(node), "--lake", str(lake), "--follow", "--interval", str(args.interval))]
    seen: dict[int, float] = {}
    in_bronze: dict[int, float] = {}
    in_lag: dict[int, float] = {}
    backlog: list[tuple[float, int]] = []
    stop = threading.Event()

    def poll() -> None:
        last_backlog = 0.0
        taken = [0, 0, 0]  # how many of `written` (in offset order) each of the three has reached
        published = PublishedOffsets(lake)
        while not stop.is_set():
            offsets = published()
            now = time.time()
            for k, (off, into) in enumerate(zip(offsets, (seen, in_bronze, in_lag), strict=True)):
                i = taken[k]
                while off is not None and i < len(written) and written[i][0] <= off:
                    into.setdefault(written[i][0], now)
                    i += 1
                taken[k] = i
            if now - last_backlog >= 10 and written:
                backlog.append((now, written[-1][0] - (offsets[0] if offsets[0] is not None else -1)))
                last_backlog = now
            time.sleep(0.25)

    poller = threading.Thread(target=poll, daemon=True)
    with PeakRss(children_only=True) as rss:  # the live processes: not this one (Kafka's stand-in, the poller)
        started_stream = False
        t0 = time.time()
        handles: dict[Path, object] = {}
        for (seg, s, e, last), when in zip(plan, at, strict=True):
            time.sleep(max(0.0, t0 + when - time.time()))
            write_batch(part, handles, seg, s, e, last, snaps, written)
            if not started_stream and (lake / "metadata_log").is_dir() and (lake / "_published").is_dir():
                # the stream and the metrics follower need the bronze tables: started once the first ingest published
                procs.append(start("metrics", "ingest-metrics", url, "--lake", str(lake), "--cluster-id", cluster_id,
                                   "--follow", "--interval", str(args.interval)))
                procs.append(start("replay", "replay", "--lake", str(lake), "--mode", "stream", "--trigger",
                                   str(args.trigger or args.interval)))
                started_stream = True
                poller.start()
        written_until = time.time()
        deadline = written_until + 600
        while (len(seen) < len(written) or len(in_lag) < len(written)) and time.time() < deadline \
                and all(p.poll() is None for p in procs):
            time.sleep(1)
        stop.set()
        state_bytes = _dir_bytes(lake / "_streams")
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
        server.shutdown()
    lags = sorted(seen[last] - t for last, t in written if last in seen)
    missing = len(written) - len(lags)
    log_lines = open(work / "replay.log").read().splitlines()
    batches = sum(1 for ln in log_lines if ln.startswith("batch ") and "published" in ln)
    resumed = sum(1 for ln in log_lines if ln.startswith("batch ") and "record(s)" in ln)
    whole = [ln for ln in log_lines if "replayed whole" in ln]
    if not lags:
        print("no batch became visible; see", work)
        return None
    print(_figures(f"freshness in the versioned state over {len(lags)} batches ({missing} never visible)", lags)
          + " (target p99 <= 5 s)")
    first = min(seen.values())
    warm = sorted(seen[last] - t for last, t in written if last in seen and t > first)
    secs = sorted(float(ln.split("published in ")[1].split()[0]) for ln in log_lines
                  if ln.startswith("batch ") and "published in" in ln)
    print(f"  of the {len(warm)} batches written after the stream's first publication ({first - written[0][1]:.1f} s "
          f"after the first batch): " + _figures("versioned state", warm).split(": ", 1)[1])
    lag_warm = sorted(in_lag[last] - t for last, t in written if last in in_lag and t > first)
    print("  " + _figures(f"in cache_lag ({len(written) - len(in_lag)} never)", lag_warm))
    bronze = sorted(in_bronze[last] - t for last, t in written if last in in_bronze and t > first)
    polls = sum(1 for ln in open(work / "ingest.log") if ln.startswith("poll ") and "published" in ln)
    print("  " + _figures("in the published bronze metadata_log (ingest --follow alone)", bronze) + f"; polls published: {polls}")
    if secs:
        print(f"  micro-batches: {batches} published ({resumed} absorbed, {len(whole)} whole replays), seconds p50 "
              f"{_q(secs, 0.5):.2f}, p99 {_q(secs, 0.99):.2f}, max {secs[-1]:.2f}")
    for ln in whole[:5]:
        print("    " + ln[:200])
    if backlog:
        print("  backlog (offsets written, not yet in the versioned state), every 10 s: "
              + " ".join(str(b) for _t, b in backlog))
    roles = ", ".join(f"{role} {r / 2**30:.2f}" for role, r, _a in sorted(rss.at_peak, key=lambda x: -x[1])[:10])
    print(f"  peak RSS of the live processes {rss.peak / 2**30:.2f} GiB (at the peak, GiB: {roles}); state store and "
          f"checkpoint {state_bytes / 2**20:.1f} MiB; logs in {work}")
    return {"p50": _q(warm, 0.5), "p99": _q(warm, 0.99), "lag_p99": _q(lag_warm, 0.99) if lag_warm else float("nan"),
            "batches": batches}


def _brokers(data_dir: Path, scenario: str) -> list[int]:
    """The broker ids of the generated cluster (its ``broker_progress`` samples)."""
    from deltalake import DeltaTable

    t = DeltaTable(str(data_dir / f"gen-{scenario}" / "broker_progress")).to_pyarrow_table(columns=["broker_id"])
    return sorted(set(t.column("broker_id").to_pylist()))


if __name__ == "__main__":
    sys.exit(main())
